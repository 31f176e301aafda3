"""The low-data curve on Banking77: `bert_textcat` with label prototypes
(configs/textcat_fewshot.cfg) at k examples per intent, against frozen sentence
embeddings + logistic regression (scikit-learn, C = 10: of 1, 10 and 100 the best
at 5 and 10 examples) on the same encoder; and intents added to a
trained model by their names alone.

    python bench/few_shot.py --per-label 0 --per-label 1 --per-label 5 --per-label 10 \
        --seeds 0 --seeds 1 --seeds 2 --output bench/results/few_shot_banking77.json

k = 0 is zero-shot: the intent names (underscores as spaces) are the only
descriptions, no examples. For k >= 1 the seed draws k training queries per
intent (the same ones for every method) and seeds the training run. Each run is
scored on all 3,080 test queries. Training runs for --epochs epochs of the
sample, at most --max-steps steps (the config's learning-rate schedule scaled to
it), and keeps the last model. With --held-out N, the seed also picks N
intents that are left out of the k-shot training and added back afterwards by
their names (`add_described_label`): their recall, and the other intents'
accuracy before and after, are reported. With --unlabelled N, zero-shot is also
scored after `adapt_to_texts` on N training queries used as unlabelled texts
(their labels unused): `adapted_accuracy`.
"""

import csv
import json
import math
import platform
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import extras  # bench/extras.py: the references apart (Makefile)
import numpy
import spacy
import torch
import typer
from spacy.cli.train import train as spacy_train
from spacy.language import Language
from spacy.tokens import Doc, DocBin
from thinc.api import Config

extras.use()  # scikit-learn

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets" / "banking77"
Rows = List[Tuple[str, str]]


def read_rows(path: Path) -> Rows:
    with path.open(encoding="utf8", newline="") as f:
        return [(row["text"], row["category"]) for row in csv.DictReader(f)]


def sample_per_label(rows: Rows, per_label: int, seed: int, labels: List[str]) -> Rows:
    """`per_label` rows of each label, drawn with `seed`."""
    by_label: Dict[str, List[str]] = defaultdict(list)
    for text, label in rows:
        by_label[label].append(text)
    rng = random.Random(seed)
    chosen = [(text, label) for label in labels for text in rng.sample(by_label[label], per_label)]
    rng.shuffle(chosen)
    return chosen


def to_docs(nlp: Language, rows: Rows, labels: List[str]) -> List[Doc]:
    docs = []
    for text, gold in rows:
        doc = nlp.make_doc(text)
        doc.cats = {label: float(label == gold) for label in labels}
        docs.append(doc)
    return docs


def predict(nlp: Language, texts: List[str]) -> List[str]:
    return [max(doc.cats, key=doc.cats.__getitem__) for doc in nlp.pipe(texts, batch_size=256)]


def accuracy(predicted: List[str], gold: List[str]) -> float:
    return 100.0 * sum(p == g for p, g in zip(predicted, gold)) / max(len(gold), 1)


def zero_shot(config: Path, labels: List[str], overrides: Dict[str, Any]) -> Language:
    cfg = Config().from_disk(config, overrides=overrides)
    cfg["initialize"]["components"]["bert_textcat"]["labels"] = labels
    nlp = spacy.util.load_model_from_config(cfg, auto_fill=True, validate=True)
    nlp.initialize()
    return nlp


def train_k_shot(
    config: Path, rows: Rows, labels: List[str], seed: int, tmp: Path, overrides: Dict[str, Any]
) -> Tuple[Language, float]:
    """Train on the rows for `overrides["epochs"]` epochs (at most
    `overrides["max_steps"]` steps of 32), from the config; the last model."""
    overrides = dict(overrides)
    steps = min(overrides.pop("max_steps"), math.ceil(overrides.pop("epochs") * len(rows) / 32))
    overrides["training.max_steps"] = overrides["training.eval_frequency"] = steps
    overrides["training.optimizer.learn_rate.warmup_steps"] = max(1, steps // 10)
    blank = spacy.blank("en")
    path = tmp / f"sample_{seed}_{len(rows)}.spacy"
    DocBin(docs=to_docs(blank, rows, labels)).to_disk(path)
    out = tmp / f"run_{seed}_{len(rows)}"
    settings = {"paths.train": str(path), "paths.dev": str(path), "system.seed": seed}
    settings["training.logger.progress_bar"] = None
    start = time.perf_counter()
    spacy_train(config, out, overrides={**settings, **overrides})
    seconds = time.perf_counter() - start
    return spacy.load(out / "model-last"), seconds


def frozen_baseline(
    vectors: numpy.ndarray, rows: Rows, sample: Rows, test_vectors: numpy.ndarray
) -> List[str]:
    """Logistic regression (C = 10) on the frozen sentence vectors."""
    from sklearn.linear_model import LogisticRegression

    index = {text: i for i, (text, _) in enumerate(rows)}
    X = vectors[[index[text] for text, _ in sample]]
    y = [label for _, label in sample]
    classifier = LogisticRegression(C=10.0, max_iter=3000).fit(X, y)
    return list(classifier.predict(test_vectors))


def sentence_vectors(nlp: Language, texts: List[str]) -> numpy.ndarray:
    textcat = nlp.get_pipe("bert_textcat")
    return textcat.prototypes.sentence_vectors([nlp.make_doc(t) for t in texts])


def held_out_run(
    nlp: Language, held: List[str], test: Rows, before: Optional[List[str]] = None
) -> Dict[str, Any]:
    """Add the held-out intents by their names; their recall and the others' accuracy."""
    from spacy_bert_pipes.pipeline.label_descriptions import name_description

    texts = [t for t, _ in test]
    gold = [g for _, g in test]
    others = [i for i, g in enumerate(gold) if g not in held]
    if before is None:
        before = predict(nlp, texts)
    textcat = nlp.get_pipe("bert_textcat")
    for label in held:
        textcat.add_described_label(label, [name_description(textcat.name, label)])
    after = predict(nlp, texts)
    held_idx = [i for i, g in enumerate(gold) if g in held]
    return {
        "held_out": held,
        "held_out_recall": accuracy([after[i] for i in held_idx], [gold[i] for i in held_idx]),
        "others_accuracy_before": accuracy([before[i] for i in others], [gold[i] for i in others]),
        "others_accuracy_after": accuracy([after[i] for i in others], [gold[i] for i in others]),
    }


def summarize(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Mean and sd over the seeds of each number, per examples-per-intent."""
    summary: Dict[str, Any] = {}
    for k in sorted({r["per_label"] for r in runs}):
        summary[str(k)] = {"seeds": sorted(r["seed"] for r in runs if r["per_label"] == k)}
        keys = ("accuracy", "baseline_accuracy", "held_out_recall", "train_seconds")
        for key in (*keys, "adapted_accuracy"):
            values = [r[key] for r in runs if r["per_label"] == k and key in r]
            if values:
                sd = statistics.stdev(values) if len(values) > 1 else 0.0
                summary[str(k)][key] = {"mean": statistics.mean(values), "sd": sd}
        drops = [
            r["others_accuracy_before"] - r["others_accuracy_after"]
            for r in runs
            if r["per_label"] == k and "others_accuracy_after" in r
        ]
        if drops:
            summary[str(k)]["others_accuracy_drop"] = {"mean": statistics.mean(drops)}
    return summary


def merge(parts: List[Path], output: Path) -> None:
    """One results file from several runs of this script (e.g. one per seed)."""
    reports = [json.loads(p.read_text(encoding="utf8")) for p in parts]
    runs = [run for report in reports for run in report["runs"]]
    merged = {**reports[0], "commands": [r["command"] for r in reports], "runs": runs}
    merged.pop("command", None)
    merged["summary"] = summarize(runs)
    output.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf8")
    print(json.dumps(merged["summary"], indent=2))


def plot(
    summary: Dict[str, Any], plain: Optional[Path], adapted: Optional[Path], path: Path
) -> None:
    """The curve: accuracy against examples per intent, ours and the baselines;
    with `adapted`, the zero-shot point after adapt_to_texts (--unlabelled)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = sorted(int(k) for k in summary)
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, name in (("accuracy", "prototypes (ours)"), ("baseline_accuracy", "frozen + LogReg")):
        points = [(k, summary[str(k)][key]["mean"]) for k in ks if key in summary[str(k)]]
        if points:
            ax.plot(*zip(*points), marker="o", label=name)
    if plain is not None:
        report = json.loads(plain.read_text(encoding="utf8"))
        mean = 100.0 * report["summary"]["base"]["mean_test_accuracy"]  # a fraction there
        steps = report["max_steps"]
        label = f"bert_textcat fine-tuned (textcat.cfg, {steps} steps)"
        ax.plot([report["per_label"]], [mean], marker="s", ls="", label=label)
    if adapted is not None:
        report = json.loads(adapted.read_text(encoding="utf8"))
        runs = [r for r in report["runs"] if "adapted_accuracy" in r]
        mean = statistics.mean(r["adapted_accuracy"] for r in runs)
        label = f"names + {runs[0]['unlabelled']:,} unlabelled texts (adapt_to_texts)"
        ax.plot([0], [mean], marker="^", ls="", label=label)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("labelled examples per intent (0: intent names only)")
    ax.set_ylabel("Banking77 test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(
    per_label: List[int] = typer.Option([0, 1, 2, 5, 10, 20], help="Examples per intent"),
    seeds: List[int] = typer.Option([0, 1, 2], help="Seeds (sample and training)"),
    config: Path = typer.Option(ROOT / "configs/textcat_fewshot.cfg"),
    baseline: bool = typer.Option(True, help="Also frozen embeddings + logistic regression"),
    held_out: int = typer.Option(0, help="Intents held out of k-shot training, added by name"),
    held_out_at: List[int] = typer.Option([10], help="The k at which to run --held-out"),
    unlabelled: int = typer.Option(0, help="Zero-shot: also adapt to N unlabelled train queries"),
    epochs: float = typer.Option(6.0, help="Training length in epochs of the sample..."),
    max_steps: int = typer.Option(150, help="...but at most this many steps (batches of 32)"),
    override: List[str] = typer.Option([], help="KEY=JSON config overrides, repeatable"),
    output: Path = typer.Option(ROOT / "bench/results/few_shot_banking77.json"),
    plot_to: Optional[Path] = typer.Option(None, help="Draw the curve (PNG) from --output"),
    plain: Optional[Path] = typer.Option(None, help="low_data_banking77.json, plotted beside"),
    adapted: Optional[Path] = typer.Option(None, help="--unlabelled results to plot beside"),
    merge_from: List[Path] = typer.Option([], help="Merge these results files into --output"),
) -> None:
    if merge_from:
        merge(merge_from, output)
    if plot_to is not None:  # draw from the results already written
        summary = json.loads(output.read_text(encoding="utf8"))["summary"]
        plot(summary, plain, adapted, plot_to)
    if merge_from or plot_to is not None:
        return
    torch.set_num_threads(max(1, torch.get_num_threads()))
    train, test = read_rows(DATA / "train.csv"), read_rows(DATA / "test.csv")
    labels = sorted({label for _, label in train})
    texts, gold = [t for t, _ in test], [g for _, g in test]
    overrides: Dict[str, Any] = {k: json.loads(v) for k, v in (o.split("=", 1) for o in override)}
    settings = {**overrides, "epochs": epochs, "max_steps": max_steps}
    runs: List[Dict[str, Any]] = []
    vectors = test_vectors = None
    if baseline and any(k > 0 for k in per_label):
        encoder = zero_shot(config, labels, {})
        vectors = sentence_vectors(encoder, [t for t, _ in train])
        test_vectors = sentence_vectors(encoder, texts)
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for k in per_label:
                run: Dict[str, Any] = {"seed": seed, "per_label": k}
                if k == 0:
                    start = time.perf_counter()
                    nlp = zero_shot(config, labels, {**overrides, "system.seed": seed})
                    run["train_seconds"] = time.perf_counter() - start
                    run["accuracy"] = accuracy(predict(nlp, texts), gold)
                    if unlabelled:
                        pool = random.Random(seed).sample([t for t, _ in train], unlabelled)
                        textcat = nlp.get_pipe("bert_textcat")
                        start = time.perf_counter()
                        textcat.adapt_to_texts([nlp.make_doc(t) for t in pool])
                        run["adapt_seconds"] = time.perf_counter() - start
                        run["unlabelled"] = unlabelled
                        run["adapted_accuracy"] = accuracy(predict(nlp, texts), gold)
                    runs.append(run)
                    print(json.dumps(run), flush=True)
                    continue
                sample = sample_per_label(train, k, seed, labels)
                if vectors is not None and test_vectors is not None:
                    predicted = frozen_baseline(vectors, train, sample, test_vectors)
                    run["baseline_accuracy"] = accuracy(predicted, gold)
                nlp, run["train_seconds"] = train_k_shot(
                    config, sample, labels, seed, Path(tmp), settings
                )
                run["accuracy"] = accuracy(predict(nlp, texts), gold)
                if held_out and k in held_out_at:
                    held = sorted(random.Random(seed).sample(labels, held_out))
                    kept = [label for label in labels if label not in held]
                    part = [(t, g) for t, g in sample if g not in held]
                    nlp, seconds = train_k_shot(config, part, kept, seed, Path(tmp), settings)
                    run["held_out_train_seconds"] = seconds
                    run.update(held_out_run(nlp, held, test))
                runs.append(run)
                print(json.dumps(run), flush=True)
    summary = summarize(runs)
    report = {
        "command": "python " + " ".join(sys.argv),
        "machine": {"processor": platform.processor(), "threads": torch.get_num_threads()},
        "versions": {"torch": torch.__version__, "spacy": spacy.__version__},
        "config": str(config.relative_to(ROOT)) if config.is_relative_to(ROOT) else str(config),
        "overrides": overrides,
        "epochs": epochs,
        "max_steps": max_steps,
        "summary": summary,
        "runs": runs,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    typer.run(main)
