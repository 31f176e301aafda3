"""int8 prediction (ONNX Runtime) through everything that predicts: heads on their
own encoders and listeners on a shared one, QA pair windows, long docs in
strided windows, vectors from a branch, and `annotate` with one or two workers
(the same bytes)."""

from pathlib import Path
from typing import Any, Dict, List

import numpy
import pytest
import spacy
from annotate_helpers import read_output, run, save_tiny_pipeline, word_rows, write_input
from helpers import loader_config, textcat_examples

from spacy_bert_pipes.loading import load_pipeline

pytestmark = pytest.mark.usefixtures("one_thread")

LONG = " ".join(["john smith is in paris with my card"] * 12)
TEXTS = ["my card is in the bank of london", "", LONG]


@pytest.fixture(scope="module")
def heads(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(save_tiny_pipeline(tmp_path_factory.mktemp("heads") / "nlp", tiny_bert))


@pytest.fixture(scope="module")
def shared(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bert_encoder with a listening bert_textcat and bert_vectors on a branch."""
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": {"max_length": 16, "stride": 4}})
    listener = {"@architectures": "spacy-bert-pipes.EncoderListener.v1"}
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": listener}})
    nlp.add_pipe("bert_vectors", config={"own_layers": 1})
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    path = tmp_path_factory.mktemp("shared") / "pipeline"
    nlp.to_disk(path)
    return path


def outputs(nlp: Any) -> List[Dict[str, Any]]:
    out = []
    for doc in nlp.pipe(TEXTS):
        out.append(
            {
                "cats": numpy.array(list(doc.cats.values())),
                "ents": [(e.start_char, e.end_char, e.label_) for e in doc.ents],
                "answers": getattr(doc._, "answers", None),
                "vector": doc.vector.copy() if doc.has_vector else None,
            }
        )
    return out


QUESTIONS = {"components": {"bert_qa": {"questions": {"who": "who is it?"}}}}


def int8_and_fp32(path: Any) -> Any:
    config = (
        QUESTIONS
        if "bert_qa" in spacy.util.load_config(Path(path) / "config.cfg")["components"]
        else None
    )
    return outputs(load_pipeline(path, precision="int8", config=config)), outputs(
        load_pipeline(path, precision="fp32", config=config)
    )


def test_heads_on_their_own_encoders_qa_included(heads: str) -> None:
    int8, fp32 = int8_and_fp32(heads)
    assert any(doc["answers"] for doc in fp32)  # bert_qa ran
    for a, b in zip(int8, fp32):
        numpy.testing.assert_allclose(a["cats"], b["cats"], atol=0.05)
        # every question is answered (which span wins may move)
        assert [x["key"] for x in a["answers"]] == [x["key"] for x in b["answers"]]
    assert any(not numpy.array_equal(a["cats"], b["cats"]) for a, b in zip(int8, fp32))


def test_listeners_and_branch_vectors_on_a_shared_encoder(shared: Path) -> None:
    int8, fp32 = int8_and_fp32(shared)
    for a, b in zip(int8, fp32):
        numpy.testing.assert_allclose(a["cats"], b["cats"], atol=0.05)
        if b["vector"] is None:
            assert a["vector"] is None
            continue
        cosine = a["vector"] @ b["vector"] / numpy.linalg.norm(a["vector"])
        assert cosine / numpy.linalg.norm(b["vector"]) > 0.98


def test_annotate_at_int8_gives_the_same_bytes_with_one_and_two_workers(
    heads: str, tmp_path: Path
) -> None:
    records = word_rows(40, step=5, shortest=3, spread=40)
    input_path = write_input(tmp_path, "jsonl", records)
    written = {}
    for workers in (1, 2):
        output = tmp_path / f"out{workers}.jsonl"
        run(
            heads, input_path, output, batch_size=4, chunk_size=8, workers=workers, precision="int8"
        )
        written[workers] = output.read_bytes()
    assert written[1] == written[2]
    fp32 = tmp_path / "fp32.jsonl"
    run(heads, input_path, fp32, batch_size=4, chunk_size=8, precision="fp32")
    assert read_output(fp32) != read_output(tmp_path / "out1.jsonl")  # int8 really ran


@pytest.mark.parametrize("reproducible", [True, False])
def test_reproducible_int8_rows_do_not_depend_on_their_batch(
    heads: str, reproducible: bool
) -> None:
    """int8 quantizes activations with one scale per transformer call, so a
    reproducible window runs alone; without it, batches of one and of many
    give other bits (the control that shows the test can tell)."""
    nlp = load_pipeline(heads, precision="int8", reproducible=reproducible)
    texts = [row["text"] for row in word_rows(24, step=5, shortest=2, spread=24)]
    together = [doc.cats for doc in nlp.pipe(texts, batch_size=64)]
    same = sum(nlp(text).cats == cats for text, cats in zip(texts, together))
    if reproducible:
        assert same == len(texts)
    else:
        assert same < len(texts)
