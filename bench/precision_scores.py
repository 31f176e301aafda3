"""Each head's test score at several prediction precisions, and the doc vectors'
cosine between the first and each other (not a test).

    python bench/precision_scores.py PIPELINE [--precisions fp32,int8]
        [--test corpus/banking77/test.spacy ...] [--vector-texts 500]
        [--output bench/results/precision_scores.json]

For every test set, `bert-pipes evaluate PIPELINE TEST --precision P` (a fresh
process each, as a user runs it) at each precision; the scores kept are the ones
`make run` reports (Banking77 accuracy and routed right, NLU++ micro F, CoNLL-2003
entity F, Restaurant-8k span F, the router's out-of-scope AUROC when the test set
has out-of-scope docs). Then the pipeline's `doc.vector` at each precision for
the first `--vector-texts` texts of the first test set: the cosine of each pair.
Run from the project folder that `make run` (or a workflow) filled.
"""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy
import typer

KEYS = (
    "cats_accuracy",
    "cats_routed_accuracy",
    "cats_oos_auroc",
    "cats_oos_fpr95",
    "nlu_micro_f",
    "ents_f",
    "qa_span_f",
    "qa_f1",
)
DEFAULT_TESTS = [
    "corpus/banking77/test.spacy",
    "corpus/nluplusplus/test.spacy",
    "corpus/conll2003/test.spacy",
    "corpus/restaurant8k/test.spacy",
]


def flat(scores: Dict[str, Any], prefix: str = "") -> Dict[str, float]:
    out: Dict[str, float] = {}
    for key, value in scores.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat(value, f"{name}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def evaluate(pipeline: Path, test: str, precision: str, out: Path) -> Dict[str, float]:
    metrics = out / f"{Path(test).parent.name}_{precision}.json"
    args = [sys.executable, "-m", "spacy_bert_pipes", "evaluate", str(pipeline), test]
    args += ["--output", str(metrics), "--precision", precision]
    subprocess.run(args, check=True, capture_output=True, text=True)
    scores = flat(json.loads(metrics.read_text(encoding="utf8")))
    return {k: v for k, v in scores.items() if k.split(".")[-1] in KEYS}


def vectors(pipeline: Path, precision: str, texts: List[str]) -> numpy.ndarray:
    from spacy_bert_pipes.loading import load_pipeline

    nlp = load_pipeline(pipeline, precision=precision)  # type: ignore[arg-type]
    return numpy.stack([doc.vector for doc in nlp.pipe(texts, batch_size=64)])


def main(
    pipeline: Path = typer.Argument(..., help="A trained pipeline folder"),
    precisions: str = typer.Option("fp32,int8", help="The reference, then the others"),
    test: Optional[List[str]] = typer.Option(None, help="Test .spacy files (repeatable)"),
    vector_texts: int = typer.Option(500, help="Texts for the doc-vector cosine (0: none)"),
    output: Path = typer.Option(Path("bench/results/precision_scores.json")),
) -> None:
    import spacy
    from spacy.tokens import DocBin

    reference, *others = precisions.split(",")
    if not others:
        raise typer.BadParameter(f"{precisions!r}: name a reference and at least one other")
    tests = list(test or DEFAULT_TESTS)
    out = output.with_suffix("")
    out.mkdir(parents=True, exist_ok=True)
    record: Dict[str, Any] = {"pipeline": str(pipeline), "command": " ".join(sys.argv)}
    scores: Dict[str, Dict[str, Dict[str, float]]] = {}
    for path in tests:
        name = Path(path).parent.name
        scores[name] = {p: evaluate(pipeline, path, p, out) for p in (reference, *others)}
        for key, value in scores[name][reference].items():
            moved = "  ".join(
                f"{p} {scores[name][p].get(key, float('nan')) - value:+.4f}" for p in others
            )
            print(f"{name:12s} {key:40s} {reference} {value:8.4f}  {moved}")
    record["scores"] = scores
    if vector_texts:
        nlp = spacy.blank("en")
        docs = DocBin().from_disk(tests[0]).get_docs(nlp.vocab)
        texts = [doc.text for _, doc in zip(range(vector_texts), docs)]
        a = vectors(pipeline, reference, texts)
        record["vector_cosine"] = {}
        for other in others:
            b = vectors(pipeline, other, texts)
            cosine = (a * b).sum(1) / numpy.linalg.norm(a, axis=1) / numpy.linalg.norm(b, axis=1)
            record["vector_cosine"][other] = {
                "texts": len(texts),
                "min": float(cosine.min()),
                "mean": float(cosine.mean()),
                "p01": float(numpy.quantile(cosine, 0.01)),
            }
            print(f"doc.vector cosine {reference} vs {other}: {record['vector_cosine'][other]}")
    output.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    print(f"wrote {output}")


if __name__ == "__main__":
    typer.run(main)
