"""What does bert_ner cost on top of bert_textcat when both share one encoder?

    python bench/ner_overhead.py [--workload news|short] [--n 400] [--repeats 3]

Builds bert_encoder + bert_textcat + bert_ner (both heads listen to the encoder;
the default encoder's weights, heads untrained: speed does not depend on them)
and times `nlp.pipe` over the same texts with bert_ner disabled and enabled,
alternating, best of `--repeats`. Also counts transformer windows, to show the
encoder runs once per window whichever heads are on.
Workloads: "news" = SQuAD dev contexts (news-length paragraphs), "short" =
Banking77 test queries.
"""

import csv
import json
import platform
import time
from pathlib import Path
from typing import Any, Dict, List, Literal

import spacy
import torch
import typer
from spacy.language import Language
from spacy.training import Example

from spacy_bert_pipes.models.encoder import bert as encoder_module

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
LISTENER = {"@architectures": "spacy-bert-pipes.EncoderListener.v1", "upstream": "*"}


def load_texts(workload: str, n: int) -> List[str]:
    if workload == "short":
        with (SHARED / "banking77" / "test.csv").open(encoding="utf8", newline="") as file_:
            return [row["text"] for row in csv.DictReader(file_)][:n]
    data = json.loads((SHARED / "squad" / "dev-v1.1.json").read_text(encoding="utf8"))
    texts = [p["context"] for article in data["data"] for p in article["paragraphs"]]
    return texts[:n]


def build() -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder")
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": LISTENER}})
    nlp.add_pipe("bert_ner", config={"model": {"encoder": LISTENER}})
    doc = nlp.make_doc("John Smith lost his card in Paris")
    eg = Example.from_dict(
        doc,
        {"cats": {"card": 1.0, "other": 0.0}, "entities": [(0, 10, "PER"), (28, 33, "LOC")]},
    )
    labels = {"bert_ner": {"labels": ["LOC", "MISC", "ORG", "PER"]}}
    nlp.config["initialize"]["components"].update(labels)
    nlp.initialize(lambda: [eg])
    return nlp


def timed(nlp: Language, texts: List[str], batch_size: int, disable: List[str]) -> Dict[str, Any]:
    windows = []
    original = encoder_module.run_windows

    def counting(encoder: Any, batch: Any, is_train: bool, cases: Any = None) -> Any:
        windows.append(len(batch))
        return original(encoder, batch, is_train, cases)

    encoder_module.run_windows = counting
    try:
        start = time.perf_counter()
        with nlp.select_pipes(disable=disable):
            n_ents = sum(len(doc.ents) for doc in nlp.pipe(texts, batch_size=batch_size))
        seconds = time.perf_counter() - start
    finally:
        encoder_module.run_windows = original
    return {"seconds": seconds, "windows": sum(windows), "entities": n_ents}


def main(
    workload: Literal["news", "short"] = typer.Option("news", help="news or short"),
    n: int = typer.Option(400, help="Number of texts"),
    batch_size: int = typer.Option(64, help="nlp.pipe batch size"),
    repeats: int = typer.Option(3, help="Timed runs of each pipeline (best is kept)"),
    output: Path = typer.Option(
        None, help="JSON results (default bench/results/ner_overhead_<workload>.json)"
    ),
) -> None:
    texts = load_texts(workload, n)
    n_words = sum(len(t.split()) for t in texts)
    nlp = build()
    timed(nlp, texts[:batch_size], batch_size, [])  # warm up
    runs: Dict[str, List[Dict[str, Any]]] = {"textcat": [], "textcat+ner": []}
    for _ in range(repeats):
        runs["textcat"].append(timed(nlp, texts, batch_size, ["bert_ner"]))
        runs["textcat+ner"].append(timed(nlp, texts, batch_size, []))
    best = {name: min(r["seconds"] for r in rs) for name, rs in runs.items()}
    ratio = best["textcat+ner"] / best["textcat"]
    result = {
        "command": f"python bench/ner_overhead.py --workload {workload} --n {n} "
        f"--batch-size {batch_size} --repeats {repeats}",
        "machine": f"{platform.machine()} {platform.processor()}, {platform.node()}",
        "torch_threads": torch.get_num_threads(),
        "workload": workload,
        "texts": len(texts),
        "words": n_words,
        "seconds": best,
        "words_per_second": {k: n_words / v for k, v in best.items()},
        "windows": {k: rs[0]["windows"] for k, rs in runs.items()},
        "ratio": ratio,
        "runs": runs,
    }
    path = output or Path(f"bench/results/ner_overhead_{workload}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    typer.echo(
        f"{workload}: {len(texts)} texts, {n_words} words; textcat {best['textcat']:.1f}s, "
        f"textcat+ner {best['textcat+ner']:.1f}s: ratio {ratio:.3f}; windows "
        f"{result['windows']['textcat']} vs {result['windows']['textcat+ner']}"
    )


if __name__ == "__main__":
    typer.run(main)
