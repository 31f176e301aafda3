"""Speed and accuracy of a trained pipeline's encoder in each precision mode.

Loads the same trained pipeline once per precision (fp32, bf16, int8, ...) by
overriding its encoders' `precision` setting, scores it on a test corpus, and times
`nlp.pipe` over the corpus texts. Precisions are timed in interleaved rounds so that
noise from other processes on the machine hits all of them alike.

    python bench/precision.py training/textcat-full/model-best corpus/banking77/test.spacy \
        --output bench/results/precision_banking77.json
"""

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import spacy
import torch
from spacy.language import Language
from spacy.tokens import DocBin
from spacy.training import Example

from spacy_bert_pipes.about import __version__
from spacy_bert_pipes.loading import load_pipeline


def score(nlp: Language, examples: List[Example], batch_size: int) -> Dict[str, Any]:
    scores = nlp.evaluate(examples, batch_size=batch_size)
    keep = ("cats_accuracy", "cats_macro_f", "ents_f", "ents_p", "ents_r")
    return {k: scores[k] for k in keep if scores.get(k) is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pipeline")
    parser.add_argument("corpus", help=".spacy file with reference annotations")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "int8"])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    parser.add_argument("--limit", type=int, default=0, help="texts to time (0: all)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    pipelines = {p: load_pipeline(args.pipeline, precision=p) for p in args.precisions}
    first = pipelines[args.precisions[0]]
    docs = list(DocBin().from_disk(args.corpus).get_docs(first.vocab))
    examples = [Example(first.make_doc(d.text), d) for d in docs]
    texts = [d.text for d in docs][: args.limit or None]
    n_words = sum(len(first.make_doc(t)) for t in texts)

    results: Dict[str, Dict[str, Any]] = {}
    for precision, nlp in pipelines.items():
        results[precision] = {"scores": score(nlp, examples, args.batch_size), "seconds": []}
        print(precision, results[precision]["scores"], flush=True)
        list(nlp.pipe(texts[: args.batch_size], batch_size=args.batch_size))  # warm-up
    for round_ in range(args.rounds):
        for precision, nlp in pipelines.items():
            start = time.perf_counter()
            for _ in nlp.pipe(texts, batch_size=args.batch_size):
                pass
            seconds = time.perf_counter() - start
            results[precision]["seconds"].append(seconds)
            print(f"round {round_} {precision}: {n_words / seconds:.0f} words/s", flush=True)
    base = args.precisions[0]
    for res in results.values():
        best = min(res["seconds"])
        res["words_per_s"] = n_words / best
        res["speedup_vs_" + base] = min(results[base]["seconds"]) / best
    report = {
        "command": "python " + " ".join(sys.argv),
        "machine": {
            "cpu": _cpu_model(),
            "threads": torch.get_num_threads(),
            "platform": platform.platform(),
        },
        "versions": {
            "spacy_bert_pipes": __version__,
            "torch": torch.__version__,
            "spacy": spacy.__version__,
        },
        "pipeline": args.pipeline,
        "corpus": args.corpus,
        "n_texts": len(texts),
        "n_words": n_words,
        "results": results,
    }
    print(json.dumps(report, indent=2))
    if args.output:
        args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
