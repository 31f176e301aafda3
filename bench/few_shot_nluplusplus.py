"""Multi-label few-shot and zero-shot on NLU++ banking (48 intents; folds 0-17
train, 18-19 test, as the workflow splits them): `bert_textcat` with label
prototypes (configs/textcat_fewshot.cfg, multi-label), from the ontology's own
intent descriptions alone (zero-shot) and with k training queries per intent.

    python bench/few_shot_nluplusplus.py --per-label 0 --per-label 10 \
        --seeds 0 --seeds 1 --seeds 2 --output bench/results/few_shot_nluplusplus.json

Zero-shot needs a cosine threshold (`similarity_threshold`): the run reports the
configured one and the one with the best micro F1 on the train folds (labels
used only to pick that one number). With examples, each intent's threshold is
calibrated on its examples. The seed draws, for each intent, k train queries
that have it (a query drawn for one intent keeps all its intents).
"""

import json
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy
import spacy
import torch
import typer
from few_shot import ROOT
from spacy.cli.train import train as spacy_train
from spacy.language import Language
from spacy.tokens import DocBin
from spacy.training import Example
from thinc.api import Config

DATA = ROOT.parent / "shared" / "datasets" / "nluplusplus"
Row = Tuple[str, List[str]]


def read_folds(folds: range) -> List[Row]:
    rows = []
    for fold in folds:
        for item in json.loads((DATA / "banking" / f"fold{fold}.json").read_text("utf8")):
            rows.append((item["text"], list(item.get("intents", []))))
    return rows


def sample(rows: List[Row], labels: List[str], k: int, seed: int) -> List[Row]:
    rng = random.Random(seed)
    chosen: Dict[str, Row] = {}
    for label in labels:
        having = [row for row in rows if label in row[1]]
        for row in rng.sample(having, min(k, len(having))):
            chosen[row[0]] = row
    out = list(chosen.values())
    rng.shuffle(out)
    return out


def examples(nlp: Language, rows: List[Row], labels: List[str]) -> List[Example]:
    out = []
    for text, gold in rows:
        doc = nlp.make_doc(text)
        out.append(Example.from_dict(doc, {"cats": {lb: float(lb in gold) for lb in labels}}))
    return out


def micro_f(nlp: Language, rows: List[Row], labels: List[str]) -> Dict[str, float]:
    scores = nlp.evaluate(examples(nlp, rows, labels), batch_size=256)
    return {k: scores[f"cats_micro_{k}"] for k in ("p", "r", "f")}


def cosines(nlp: Language, rows: List[Row]) -> numpy.ndarray:
    textcat = nlp.get_pipe("bert_textcat")
    W = textcat.model.get_ref("output").get_param("W")
    vectors = textcat.prototypes.sentence_vectors([nlp.make_doc(text) for text, _ in rows])
    return vectors @ (W / numpy.linalg.norm(W, axis=1, keepdims=True)).T


def best_threshold(cos: numpy.ndarray, rows: List[Row], labels: List[str]) -> float:
    gold = numpy.asarray([[lb in g for lb in labels] for _, g in rows])
    best, best_f = 0.0, -1.0
    for t in numpy.linspace(0.05, 0.95, 91):
        pred = cos >= t
        tp = float((pred & gold).sum())
        f = 2 * tp / max(float(pred.sum() + gold.sum()), 1.0)
        if f > best_f:
            best, best_f = float(t), f
    return best


def main(
    per_label: List[int] = typer.Option([0, 10], help="Examples per intent (0: zero-shot)"),
    seeds: List[int] = typer.Option([0, 1, 2]),
    config: Path = typer.Option(ROOT / "configs/textcat_fewshot.cfg"),
    output: Path = typer.Option(ROOT / "bench/results/few_shot_nluplusplus.json"),
) -> None:
    ontology = json.loads((DATA / "ontology.json").read_text("utf8"))["intents"]
    train, test = read_folds(range(0, 18)), read_folds(range(18, 20))
    labels = sorted({lb for _, gold in train + test for lb in gold})
    descriptions = {lb: ontology[lb]["description"] for lb in labels}
    runs: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        described = Path(tmp) / "descriptions.json"
        described.write_text(json.dumps(descriptions), encoding="utf8")
        base = {
            "components.bert_textcat.model.exclusive_classes": False,
            # the nearest-examples term is for exclusive classes only
            "components.bert_textcat.model.example_weight": 0.0,
            "components.bert_textcat.label_names_as_descriptions": False,
            "components.bert_textcat.label_descriptions": str(described),
        }
        for seed in seeds:
            for k in per_label:
                run: Dict[str, Any] = {"seed": seed, "per_label": k}
                if k == 0:
                    cfg = Config().from_disk(config, overrides={**base, "system.seed": seed})
                    nlp = spacy.util.load_model_from_config(cfg, auto_fill=True, validate=True)
                    nlp.initialize()
                    run["test"] = micro_f(nlp, test, labels)
                    threshold = best_threshold(cosines(nlp, train), train, labels)
                    scale = float(
                        numpy.exp(
                            nlp.get_pipe("bert_textcat")
                            .model.get_ref("output")
                            .get_param("log_scale")[0]
                        )
                    )
                    nlp.get_pipe("bert_textcat").model.get_ref("output").set_param(
                        "b", numpy.full(len(labels), -scale * threshold, dtype="f")
                    )
                    run["train_folds_threshold"] = threshold
                    run["test_at_train_folds_threshold"] = micro_f(nlp, test, labels)
                else:
                    rows = sample(train, labels, k, seed)
                    path = Path(tmp) / f"sample_{seed}_{k}.spacy"
                    blank = spacy.blank("en")
                    DocBin(docs=[eg.reference for eg in examples(blank, rows, labels)]).to_disk(
                        path
                    )
                    overrides = {**base, "paths.train": str(path), "paths.dev": str(path)}
                    overrides.update({"system.seed": seed, "training.logger.progress_bar": None})
                    start = time.perf_counter()
                    spacy_train(config, Path(tmp) / f"run_{seed}_{k}", overrides=overrides)
                    run["train_seconds"] = time.perf_counter() - start
                    run["train_docs"] = len(rows)
                    nlp = spacy.load(Path(tmp) / f"run_{seed}_{k}" / "model-last")
                    run["test"] = micro_f(nlp, test, labels)
                runs.append(run)
                print(json.dumps(run), flush=True)
    summary = {}
    for k in per_label:
        values = [r["test"]["f"] for r in runs if r["per_label"] == k]
        summary[str(k)] = {"micro_f_mean": statistics.mean(values)}
        tuned = [
            r["test_at_train_folds_threshold"]["f"] for r in runs if r["per_label"] == k and k == 0
        ]
        if tuned:
            summary[str(k)]["micro_f_mean_train_folds_threshold"] = statistics.mean(tuned)
    report = {
        "command": "python " + " ".join(sys.argv),
        "machine": {"processor": platform.processor(), "threads": torch.get_num_threads()},
        "summary": summary,
        "runs": runs,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    typer.run(main)
