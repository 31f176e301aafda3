"""Host time of bert_qa's prediction path, the transformer forward stubbed (not a test).

SQuAD v1.1 dev paragraphs, each asked its own questions (an `nlp.pipe(...,
as_tuples=True)` context) besides the pipeline's fixed ones, through a trained
bert_qa pipeline. The transformer's forward is replaced by a deterministic
function of the wordpiece ids and positions (sines: no two positions of a window
get the same vector, so span scores do not tie), so what is timed is host work
only, and the answers are the same whatever code runs them.

    python bench/qa_host.py time --pipeline PATH [--paragraphs 300] [--repeats 3]
    python bench/qa_host.py dump --pipeline PATH --out answers.json [--real-forward]

`time` prints and writes bench/results/qa_host.json (1 torch thread, best of
--repeats, host CPU seconds per question and per context word: the CPU time of
`nlp.pipe` less that of the stub itself); `dump` writes every
doc's answers (for bench/compare_predictions.py).
"""

import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import typer

ROOT = Path(__file__).resolve().parent.parent
DATA = Path("/work/shared/datasets")
RESULTS = ROOT / "bench" / "results"

app = typer.Typer(add_completion=False)


def squad_items(data: Path, paragraphs: int) -> List[Tuple[str, Dict[str, Any]]]:
    """(context, {"questions": {id: question}}) of the first SQuAD dev paragraphs."""
    squad = json.loads((data / "squad" / "dev-v1.1.json").read_text(encoding="utf8"))
    items = []
    for article in squad["data"]:
        for p in article["paragraphs"]:
            items.append((p["context"], {"questions": {q["id"]: q["question"] for q in p["qas"]}}))
    return items[:paragraphs] if paragraphs else items


STUB_SECONDS = [0.0]  # CPU time spent in the stub itself


def stub_forward() -> None:
    """Replace the transformer's forward by a cheap deterministic one: one
    gather from a fixed table of sines, by wordpiece id and position."""
    import torch

    from spacy_bert_pipes.models.transformer import hf_shim

    tables: Dict[int, torch.Tensor] = {}

    def lookup(self: Any, input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        cpu = time.process_time()
        width = self.width
        if width not in tables:
            freq = torch.arange(1, width + 1, dtype=torch.float64) * 0.0173
            rows = torch.arange(65536, dtype=torch.float64)[:, None]
            tables[width] = (torch.sin(rows * freq) * 3.0).to(torch.float32)
        pos = torch.arange(input_ids.shape[1])[None, :]
        # (batch, length, width): a function of each wordpiece id and its position
        out = tables[width][(input_ids.long() + 7919 * pos) % 65536]
        STUB_SECONDS[0] += time.process_time() - cpu
        return out

    hf_shim.TransformerModule.forward = lookup  # type: ignore[method-assign]


def load(pipeline: Path, config: str) -> Any:
    import spacy
    import torch

    torch.set_num_threads(1)
    nlp = spacy.load(pipeline)
    # a pipe's saved cfg wins over spacy.load's config overrides: set it here
    for name, settings in (json.loads(config) if config else {}).items():
        nlp.get_pipe(name).cfg.update(settings)
    return nlp


def run(nlp: Any, items: List[Tuple[str, Dict[str, Any]]], batch_size: int) -> List[Any]:
    return [doc for doc, _ in nlp.pipe(items, as_tuples=True, batch_size=batch_size)]


@app.command()
def dump(
    pipeline: Path = typer.Option(...),
    out: Path = typer.Option(...),
    paragraphs: int = typer.Option(300),
    real_forward: bool = typer.Option(False, help="Run the real transformer"),
    config: str = typer.Option("", help='Component overrides as JSON, {"bert_qa": {...}}'),
    batch_size: int = typer.Option(32),
    data: Path = typer.Option(DATA),
) -> None:
    """Every doc's answers and answer spans, as JSON (code from PYTHONPATH)."""
    import spacy_bert_pipes

    nlp = load(pipeline, config)
    if not real_forward:
        stub_forward()
    rows = []
    for doc in run(nlp, squad_items(data, paragraphs), batch_size):
        answers = [{k: v for k, v in a.items()} for a in doc._.answers or []]
        spans = [[s.start, s.end, s.label_] for key in doc.spans for s in doc.spans[key] if key]
        scores = [g.attrs.get("scores") for g in doc.spans.values()]
        rows.append({"answers": answers, "spans": spans, "span_scores": scores})
    result = {"code": str(Path(spacy_bert_pipes.__file__).parent), "docs": rows}
    out.write_text(json.dumps(result), encoding="utf8")


@app.command("time")
def time_(
    pipeline: Path = typer.Option(...),
    paragraphs: int = typer.Option(300),
    repeats: int = typer.Option(3),
    batch_size: int = typer.Option(32),
    config: str = typer.Option("", help='Component overrides as JSON, {"bert_qa": {...}}'),
    out: Path = typer.Option(RESULTS / "qa_host.json"),
    data: Path = typer.Option(DATA),
) -> None:
    """CPU seconds of nlp.pipe over the paragraphs, forward stubbed, best of repeats."""
    import spacy_bert_pipes

    nlp = load(pipeline, config)
    stub_forward()
    items = squad_items(data, paragraphs)
    run(nlp, items[:8], batch_size)  # warm-up
    fixed = len(nlp.get_pipe("bert_qa").cfg["questions"])
    questions = sum(len(c["questions"]) + fixed for _, c in items)
    words = sum(len(nlp.make_doc(text)) for text, _ in items)
    runs = []
    answers = 0
    for _ in range(repeats):
        cpu, stub = time.process_time(), STUB_SECONDS[0]
        docs = run(nlp, items, batch_size)
        runs.append((time.process_time() - cpu, STUB_SECONDS[0] - stub))
        answers = sum(len(doc._.answers or []) for doc in docs)
    best_run = min(runs, key=lambda r: r[0] - r[1])
    best = best_run[0] - best_run[1]  # host time: the stub's own time left out
    record = {
        "benchmark": "qa_host",
        "command": "python bench/qa_host.py time " + " ".join(sys.argv[2:]),
        "machine": f"{platform.processor() or platform.machine()}, 1 torch thread",
        "python": platform.python_version(),
        "code": str(Path(spacy_bert_pipes.__file__).parent),
        "pipeline": str(pipeline),
        "paragraphs": len(items),
        "questions": questions,
        "context_words": words,
        "answers": answers,
        "cpu_seconds_per_repeat": [round(r, 3) for r, _ in runs],
        "stub_cpu_seconds_per_repeat": [round(s, 3) for _, s in runs],
        "host_cpu_seconds": round(best, 3),
        "us_per_question": round(best / questions * 1e6, 1),
        "us_per_word": round(best / words * 1e6, 2),
        "words_per_cpu_second": round(words / best, 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    typer.echo(json.dumps(record, indent=2))


if __name__ == "__main__":
    app()
