"""What `annotate --vectors` adds to a run, apart from the encoder (not a test).

    python bench/annotate_vectors.py [--n-docs 20000] [--width 384]
        [--output bench/results/annotate_vectors.json]

Builds a pipeline without any model, only static word vectors of `--width`
dimensions (so `doc.vector` costs a mean of a few token vectors, nothing like
an encoder), annotates N short docs with and without --vectors to JSONL,
Parquet (float32), Parquet (float16) and a folder of shards, and writes JSON:
seconds and docs per second of each run, the time --vectors adds per doc
(its checks, the values' conversion and the writing), and the output sizes in
bytes per doc. Compare the added time per doc with a real pipeline's time per
doc (bench/results/annotate_rss_200k.json: 267 docs/s, 3.7 ms a doc, CPU bf16).
"""

import json
import os
import platform
import random
import tempfile
import time
from pathlib import Path
from typing import Any, Dict

import numpy
import spacy
import typer

from spacy_bert_pipes.annotate import AnnotateOptions, annotate

WORDS = "my card payment refund transfer account bank cash pin new arrived still waiting".split()


def main(
    n_docs: int = typer.Option(20_000, help="Docs to annotate"),
    width: int = typer.Option(384, help="The doc vector width (all-MiniLM-L6-v2: 384)"),
    chunk_size: int = typer.Option(1000, help="Rows per chunk"),
    output: Path = typer.Option(Path("bench/results/annotate_vectors.json")),
) -> None:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        nlp = spacy.blank("en")
        rng = numpy.random.default_rng(0)
        for word in WORDS:
            nlp.vocab.set_vector(word, rng.standard_normal(width).astype("float32"))
        nlp.to_disk(folder / "nlp")
        sample = random.Random(0)
        with (folder / "in.jsonl").open("w") as file_:
            for i in range(n_docs):
                text = " ".join(sample.sample(WORDS, sample.randint(3, 8)))
                file_.write(json.dumps({"id": f"doc-{i}", "text": text}) + "\n")
        runs: Dict[str, Any] = {}
        for name, out, vectors, dtype in [
            ("jsonl", "out.jsonl", False, "float32"),
            ("jsonl --vectors", "v.jsonl", True, "float32"),
            ("jsonl --vectors float16", "v16.jsonl", True, "float16"),
            ("parquet", "out.parquet", False, "float32"),
            ("parquet --vectors", "v.parquet", True, "float32"),
            ("parquet --vectors float16", "v16.parquet", True, "float16"),
            ("shards --vectors", "shards", True, "float32"),
        ]:
            options = AnnotateOptions(chunk_size=chunk_size, vectors=vectors, vectors_dtype=dtype)
            start = time.perf_counter()
            summary = annotate(str(folder / "nlp"), folder / "in.jsonl", folder / out, options)
            seconds = time.perf_counter() - start
            assert summary.output_rows == n_docs, summary
            path = folder / out
            size = (
                sum(p.stat().st_size for p in path.iterdir())
                if path.is_dir()
                else path.stat().st_size
            )
            runs[name] = {
                "seconds": round(seconds, 2),
                "docs_per_second": round(n_docs / seconds, 1),
                "bytes_per_doc": round(size / n_docs, 1),
            }
            print(name, runs[name], flush=True)
    added = {
        fmt: round(1000 * (runs[f"{fmt} --vectors"]["seconds"] - runs[fmt]["seconds"]) / n_docs, 3)
        for fmt in ("jsonl", "parquet")
    }
    result = {
        "command": f"python bench/annotate_vectors.py --n-docs {n_docs} --width {width} "
        f"--chunk-size {chunk_size} --output {output}",
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}; shared, 2 cores",
        # The times are only as good as the machine was quiet: its load, 1-minute average.
        "load_average_before_after": [round(load_before[0], 1), round(os.getloadavg()[0], 1)],
        "n_docs": n_docs,
        "width": width,
        "runs": runs,
        "ms_added_per_doc_by_vectors": added,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    typer.run(main)
