"""Do two checkouts of spacy-bert-pipes predict the same? Runs pipelines over the
CoNLL-2003 test set (bert_ner: whole documents, so long texts take several
windows, and single sentences) and the Banking77 test set (bert_textcat) once
with each checkout's code (a subprocess with that checkout on PYTHONPATH, dumping
entities and cats to JSON), then compares: every doc the same entities (start,
end, label) and the same top label, cats within --cats-tol (not a test).
With --qa, also SQuAD v1.1 dev paragraphs, each asked its own questions (and
the pipeline's), through a bert_qa pipeline: every doc the same answers (key,
text, start, end, rank) and answer spans, scores within --cats-tol.

    python bench/compare_predictions.py --old /tmp/main-checkout \\
        --ner PIPELINE --textcat PIPELINE [--new .] [--limit 0] \\
        [--qa PIPELINE --qa-paragraphs 300 --qa-stub --qa-config JSON --out NAME]

A pipeline with both components may be given to both options. `--qa-stub`
replaces the transformer's forward by bench/qa_host.py's deterministic stub
(the decoding is compared on non-trivial logits without the forward's cost);
`--qa-config` overrides the component's settings ({"bert_qa": {"top_k": 3}}).
Prints a summary and writes bench/results/compare_predictions.json (or --out).
"""

import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

import typer

ROOT = Path(__file__).resolve().parent.parent
DATA = Path("/work/shared/datasets")
RESULTS = ROOT / "bench" / "results"

app = typer.Typer(add_completion=False)


def conll_docs(nlp: Any, data: Path, n_sents: int, limit: int) -> List[Any]:
    from spacy.tokens import Doc

    from spacy_bert_pipes.convert import read_conll_ner

    docs = []
    for gold in read_conll_ner(data / "conll2003" / "test.txt", nlp.vocab, n_sents=n_sents):
        # the same tokens and sentence starts, without the gold entities
        words = [t.text for t in gold]
        spaces = [bool(t.whitespace_) for t in gold]
        starts = [bool(t.is_sent_start) for t in gold]
        docs.append(Doc(nlp.vocab, words=words, spaces=spaces, sent_starts=starts))
        if limit and len(docs) >= limit:
            break
    return docs


def banking_texts(data: Path, limit: int) -> List[str]:
    import csv

    with (data / "banking77" / "test.csv").open(encoding="utf8", newline="") as file:
        texts = [row["text"] for row in csv.DictReader(file)]
    return texts[:limit] if limit else texts


@app.command()
def dump(
    ner: Optional[Path] = typer.Option(None),
    textcat: Optional[Path] = typer.Option(None),
    out: Path = typer.Option(...),
    limit: int = typer.Option(0),
    data: Path = typer.Option(DATA),
    batch_size: int = typer.Option(32),
    qa: Optional[Path] = typer.Option(None),
    qa_paragraphs: int = typer.Option(300),
    qa_stub: bool = typer.Option(False),
    qa_config: str = typer.Option(""),
) -> None:
    """(Run in a subprocess) predict with the code on PYTHONPATH, write JSON."""
    import spacy
    import torch

    torch.set_num_threads(1)
    import spacy_bert_pipes

    result: Dict[str, Any] = {"code": str(Path(spacy_bert_pipes.__file__).parent)}
    if ner is not None:
        nlp = spacy.load(ner)
        name = next(n for n, p in nlp.pipeline if p.__class__.__name__ == "BertEntityRecognizer")
        for key, n_sents in (("conll_documents", 0), ("conll_sentences", 1)):
            docs = conll_docs(nlp, data, n_sents, limit if limit else (0 if n_sents == 0 else 2000))
            rows = []
            for doc in nlp.pipe(docs, batch_size=batch_size):
                spans = doc.ents if nlp.get_pipe(name).cfg["annotate"] == "ents" else []
                rows.append([[s.start, s.end, s.label_, s._.get("bert_ner_score")] for s in spans])
            result[key] = rows
    if textcat is not None:
        nlp = spacy.load(textcat)
        texts = banking_texts(data, limit)
        result["banking77"] = [doc.cats for doc in nlp.pipe(texts, batch_size=batch_size)]
    if qa is not None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import qa_host

        nlp = qa_host.load(qa, qa_config)
        if qa_stub:
            qa_host.stub_forward()
        rows = []
        items = qa_host.squad_items(data, qa_paragraphs)
        for doc in qa_host.run(nlp, items, batch_size):
            rows.append(
                {
                    "answers": doc._.answers or [],
                    "spans": {
                        key: [[s.start, s.end, s.label_] for s in group]
                        for key, group in doc.spans.items()
                    },
                }
            )
        result["squad_qa"] = rows
    out.write_text(json.dumps(result), encoding="utf8")


def run_dump(code: Path, args: List[str], out: Path) -> Dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(code))
    command = [sys.executable, str(Path(__file__).resolve()), "dump", "--out", str(out), *args]
    subprocess.run(command, env=env, check=True, cwd=str(code))
    return json.loads(out.read_text(encoding="utf8"))


@app.command()
def compare(
    old: Path = typer.Option(..., help="Checkout with the reference code"),
    new: Path = typer.Option(ROOT, help="Checkout with the code under test"),
    ner: Optional[Path] = typer.Option(None, help="A trained pipeline with bert_ner"),
    textcat: Optional[Path] = typer.Option(None, help="A trained pipeline with bert_textcat"),
    limit: int = typer.Option(0, help="Docs per set (0: all)"),
    cats_tol: float = typer.Option(1e-5, help="Largest difference of a cat or answer score"),
    data: Path = typer.Option(DATA),
    qa: Optional[Path] = typer.Option(None, help="A trained pipeline with bert_qa"),
    qa_paragraphs: int = typer.Option(300, help="SQuAD dev paragraphs (0: all)"),
    qa_stub: bool = typer.Option(False, help="Stub the transformer's forward (qa_host.py)"),
    qa_config: str = typer.Option("", help='Component overrides, {"bert_qa": {...}}'),
    out: str = typer.Option("compare_predictions.json", help="Result file in bench/results"),
) -> None:
    """Predict with both checkouts and compare."""
    args = ["--limit", str(limit), "--data", str(data)]
    if qa is not None:
        args += ["--qa", str(qa), "--qa-paragraphs", str(qa_paragraphs)]
        args += ["--qa-config", qa_config] + (["--qa-stub"] if qa_stub else [])
    if ner is not None:
        args += ["--ner", str(ner)]
    if textcat is not None:
        args += ["--textcat", str(textcat)]
    with tempfile.TemporaryDirectory() as tmp:
        before = run_dump(old.resolve(), args, Path(tmp) / "old.json")
        after = run_dump(new.resolve(), args, Path(tmp) / "new.json")
    report: Dict[str, Any] = {
        "benchmark": "compare_predictions",
        "command": "python bench/compare_predictions.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "old_code": before["code"],
        "new_code": after["code"],
    }
    ok = True
    for key in ("conll_documents", "conll_sentences"):
        if key not in before:
            continue
        a, b = before[key], after[key]
        differ = [
            i for i, (x, y) in enumerate(zip(a, b)) if [e[:3] for e in x] != [e[:3] for e in y]
        ]
        score_diff = max(
            (
                abs(e[3] - f[3])
                for x, y in zip(a, b)
                for e, f in zip(x, y)
                if e[:3] == f[:3] and e[3] is not None and f[3] is not None
            ),
            default=0.0,
        )
        same = len(a) == len(b) and not differ
        ok &= same
        report[key] = {
            "docs": len(a),
            "entities": sum(len(x) for x in a),
            "docs_with_different_entities": len(differ),
            "first_differences": [{"doc": i, "old": a[i], "new": b[i]} for i in differ[:3]],
            "max_entity_score_difference": score_diff,
            "same": same,
        }
    if "banking77" in before:
        a, b = before["banking77"], after["banking77"]
        top_differ = sum(max(x, key=x.get) != max(y, key=y.get) for x, y in zip(a, b))
        worst = max((abs(x[k] - y[k]) for x, y in zip(a, b) for k in x), default=0.0)
        keys_differ = sum(set(x) != set(y) for x, y in zip(a, b))
        same = len(a) == len(b) and not top_differ and not keys_differ and worst <= cats_tol
        ok &= same
        report["banking77"] = {
            "docs": len(a),
            "docs_with_different_top_label": top_differ,
            "max_cats_difference": worst,
            "cats_tolerance": cats_tol,
            "same": same,
        }
    if "squad_qa" in before:
        a, b = before["squad_qa"], after["squad_qa"]
        fields = ("key", "question", "text", "start", "end", "rank", "question_truncated")
        differ = [
            i
            for i, (x, y) in enumerate(zip(a, b))
            if x["spans"] != y["spans"]
            or [[q.get(f) for f in fields] for q in x["answers"]]
            != [[q.get(f) for f in fields] for q in y["answers"]]
        ]
        worst = max(
            (
                abs(p["score"] - q["score"])
                for x, y in zip(a, b)
                for p, q in zip(x["answers"], y["answers"])
            ),
            default=0.0,
        )
        same = len(a) == len(b) and not differ and worst <= cats_tol
        ok &= same
        report["squad_qa"] = {
            "paragraphs": len(a),
            "forward": "stub (bench/qa_host.py)" if qa_stub else "real",
            "config_overrides": qa_config,
            "answers": sum(len(x["answers"]) for x in a),
            "null_answers": sum(q["start"] is None for x in a for q in x["answers"]),
            "docs_with_different_answers": len(differ),
            "first_differences": [{"doc": i, "old": a[i], "new": b[i]} for i in differ[:2]],
            "max_score_difference": worst,
            "score_tolerance": cats_tol,
            "same": same,
        }
    report["same"] = ok
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / out
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    typer.echo(json.dumps(report, indent=2))
    if not ok:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
