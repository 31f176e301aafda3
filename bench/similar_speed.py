"""Nearest-neighbour search over exported vectors: quality and speed (not a test).

    python bench/mteb_banking77.py --precision fp32 --save-vectors VECTORS_DIR
    python bench/similar_speed.py VECTORS_DIR [--rows 100000] [--queries 200]
        [--threads 2] [--output FILE]

1. 1-NN intent accuracy on Banking77: the 10,003 training queries' doc.vector
   (VECTORS_DIR/banking77_train.parquet, written in the format `bert-pipes
   similar` reads) are the index; each of the 3,080 test queries counts as right
   when its nearest training query has the same intent.
2. Speed over a collection of `--rows` 384-d vectors: the training vectors
   repeated with small Gaussian noise (real directions, no exact duplicates),
   written to Parquet and read back with `read_vectors` like the CLI does. Each
   index kind ("flat" exact, "hnsw") is built, then queried one test vector at a
   time (top 10, as the CLI); median and 95th-percentile latency are recorded,
   and for hnsw its recall@10 against the exact search.
Writes bench/results/similar_speed.json.
"""

import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy
import pyarrow
import pyarrow.parquet as pq
import typer

from spacy_bert_pipes.similar import INDEX_KINDS, VectorIndex, read_vectors

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def labels_of(path: Path) -> List[str]:
    return [str(v) for v in pq.read_table(path, columns=["label"]).column("label").to_pylist()]


def main(
    vectors_dir: Path = typer.Argument(..., help="Where mteb_banking77.py saved the vectors"),
    rows: int = typer.Option(100_000, help="Rows of the speed collection"),
    queries: int = typer.Option(200, help="Timed single queries per index"),
    threads: int = typer.Option(2, help="faiss (OpenMP) threads"),
    kinds: str = typer.Option(",".join(INDEX_KINDS), help="Index kinds to time"),
    output: Path = typer.Option(RESULTS / "similar_speed.json", help="Results JSON"),
) -> None:
    import faiss

    faiss.omp_set_num_threads(threads)
    train_path = vectors_dir / "banking77_train.parquet"
    test_path = vectors_dir / "banking77_test.parquet"
    train, test = read_vectors(train_path), read_vectors(test_path)
    train_labels, test_labels = labels_of(train_path), labels_of(test_path)
    index = VectorIndex(train)
    hits = index.search(test.vectors, k=1)
    right = sum(train_labels[h[0].row] == gold for h, gold in zip(hits, test_labels))
    nn = {
        "index": f"{len(train.ids)} train queries",
        "queries": len(test.ids),
        "accuracy_1nn": round(100 * right / len(test.ids), 2),
    }
    print("1-NN", nn, flush=True)

    rng = numpy.random.default_rng(0)
    reps = -(-rows // len(train.vectors))
    big = numpy.concatenate([train.vectors] * reps)[:rows]
    big = big + rng.normal(scale=0.01, size=big.shape).astype("f")
    speed: Dict[str, Any] = {"rows": rows, "width": int(big.shape[1])}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.parquet"
        values = pyarrow.array(big.astype("float32").ravel())
        column = pyarrow.FixedSizeListArray.from_arrays(values, big.shape[1])
        pq.write_table(
            pyarrow.table({"id": [f"r{i}" for i in range(rows)], "vector": column}), path
        )
        start = time.perf_counter()
        collection = read_vectors(path)
        speed["read_seconds"] = round(time.perf_counter() - start, 3)
    query_vectors = test.vectors[:queries]
    exact = None
    for kind in kinds.split(","):
        start = time.perf_counter()
        built = VectorIndex(collection, kind=kind)  # type: ignore[arg-type]
        build = time.perf_counter() - start
        latencies = []
        found = []
        for q in range(len(query_vectors)):
            start = time.perf_counter()
            result = built.search(query_vectors[q : q + 1], k=10)[0]
            latencies.append(1000 * (time.perf_counter() - start))
            found.append({h.row for h in result})
        entry = {
            "build_seconds": round(build, 2),
            "query_ms_median": round(float(numpy.median(latencies)), 3),
            "query_ms_p95": round(float(numpy.percentile(latencies, 95)), 3),
            "query_ms_max": round(float(numpy.max(latencies)), 3),
        }
        if kind == "flat":
            exact = found
        elif exact is not None:
            recall = numpy.mean([len(a & b) / 10 for a, b in zip(exact, found)])
            entry["recall_at_10_vs_flat"] = round(float(recall), 4)
        speed[kind] = entry
        print(kind, entry, flush=True)
    result = {
        "command": " ".join(["python", *sys.argv]),
        "machine": f"{platform.machine()} {platform.processor()}, {platform.node()}",
        "threads": threads,
        "faiss": faiss.__version__,
        "banking77_1nn": nn,
        "speed": speed,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
