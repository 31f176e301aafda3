"""The one-pass pipeline's scores beside the heads trained apart."""

import json
from pathlib import Path

import pytest

from spacy_bert_pipes.multitask.compare import CompareError, compare, side_by_side

APART = {
    "textcat": {"cats_accuracy": 0.8471},
    "multilabel": {"cats_micro_f": 0.5907},
    "ner": {"ents_f": 0.7973},
    "qa_slots": {"qa_span_f": 0.6762, "qa_f1": 0.9373},
}
ONE_PASS = {
    "multitask_banking77": {"cats_accuracy": 0.7347, "nlu_micro_f": None},
    "multitask_nluplusplus": {"cats_accuracy": None, "nlu_micro_f": 0.7827},
    "multitask_conll2003": {"ents_f": 0.8038},
    "multitask_restaurant8k": {"qa_span_f": 0.8824, "qa_f1": 0.9731},
}


def write(folder: Path, files: dict) -> None:
    for stem, scores in files.items():
        (folder / f"{stem}.json").write_text(json.dumps(scores), encoding="utf8")


def test_each_task_scored_apart_and_in_one_pass(tmp_path: Path) -> None:
    write(tmp_path, {**APART, **ONE_PASS})
    speed = tmp_path / "one_pass.json"
    speed.write_text(
        json.dumps(
            {
                "texts": 300,
                "device": "cpu",
                "pipelines": {
                    "one_pass": {"docs_per_second": 478.5},
                    "assembled": {"docs_per_second": 58.5},
                },
            }
        ),
        encoding="utf8",
    )
    table = side_by_side(tmp_path, speed).splitlines()
    assert "| Banking77 accuracy | 84.71 | 73.47 | -11.24 |" in table
    assert "| NLU++ micro F1 | 59.07 | 78.27 | +19.20 |" in table
    assert "| CoNLL-2003 F1 | 79.73 | 80.38 | +0.65 |" in table
    assert "| Restaurant-8k SQuAD F1 | 93.73 | 97.31 | +3.58 |" in table
    assert table[-1] == "| docs/s (300 texts, cpu) | 58.5 | 478.5 | 8.18x |"


def test_a_missing_file_or_score_is_named(tmp_path: Path) -> None:
    write(tmp_path, APART)
    with pytest.raises(CompareError, match="multitask_banking77.json: no such metrics file"):
        side_by_side(tmp_path)
    write(tmp_path, {**ONE_PASS, "multitask_nluplusplus": {"nlu_micro_f": None}})
    with pytest.raises(CompareError, match=r"multitask_nluplusplus.json: no score 'nlu_micro_f'"):
        side_by_side(tmp_path)
    (tmp_path / "ner.json").write_text("[1, 2", encoding="utf8")
    write(tmp_path, ONE_PASS)
    with pytest.raises(CompareError, match="ner.json: not a metrics JSON"):
        side_by_side(tmp_path)


def test_without_the_heads_apart_the_table_says_where_they_come_from(tmp_path: Path) -> None:
    write(tmp_path, {**ONE_PASS, "ner": APART["ner"]})
    rows = compare(tmp_path)
    assert [r.apart for r in rows] == [None, None, pytest.approx(79.73), None, None]
    table = side_by_side(tmp_path).splitlines()
    assert "| Banking77 accuracy | - | 73.47 | - |" in table
    assert "| CoNLL-2003 F1 | 79.73 | 80.38 | +0.65 |" in table
    assert table[-1].startswith(f"Heads apart: not scored in `{tmp_path}`; `spacy project run one")
