"""Adapting a zero-shot router to unlabelled traffic where most texts are out of
scope (issue: routing without labels, as a product).

A `bert_textcat` with label prototypes routes 8 Banking77 intents from one
description each (no examples). It is scored on those intents' test queries
(accuracy of the top label), then adapted (`adapt_to_texts`) to 300 unlabelled
Banking77 training queries: either 300 of the 8 intents (in scope), or 300
random queries of all 77 intents (about 10% in scope, like a real ticket
stream), and scored again. Mean over `--samples` draws of the 300 queries.

    python bench/route_adapt.py --output bench/results/route_adapt.json
"""

import csv
import json
import random
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy
import spacy
import typer

ROOT = Path(__file__).resolve().parents[1]
BANKING77 = ROOT / "assets/banking77"
# the 8 intents and the one-line description a new user would write for each
DESCRIPTIONS: Dict[str, str] = {
    "card_arrival": "my new card has not arrived yet",
    "lost_or_stolen_card": "I lost my card or it was stolen",
    "exchange_rate": "what exchange rate do you use",
    "top_up_failed": "my top up did not work",
    "pin_blocked": "my PIN is blocked",
    "cash_withdrawal_charge": "I was charged a fee for withdrawing cash",
    "refund_not_showing_up": "my refund is not showing in my account",
    "transfer_not_received_by_recipient": "the person I sent money to has not received it",
}


def read(path: Path) -> List[Tuple[str, str]]:
    with path.open(encoding="utf8", newline="") as file_:
        return [(row["text"], row["category"]) for row in csv.DictReader(file_)]


def router() -> spacy.language.Language:
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "bert_textcat",
        config={
            "model": {
                "@architectures": "spacy-bert-pipes.PrototypeCatModel.v1",
                "encoder": {"@architectures": "spacy-bert-pipes.BertEncoder.v2"},
            },
            "label_descriptions": {label: [text] for label, text in DESCRIPTIONS.items()},
        },
    )
    nlp.initialize()
    return nlp


def accuracy(nlp: spacy.language.Language, test: List[Tuple[str, str]]) -> float:
    docs = nlp.pipe([text for text, _ in test], batch_size=64)
    right = [max(doc.cats, key=doc.cats.__getitem__) == gold for doc, (_, gold) in zip(docs, test)]
    return float(numpy.mean(right))


def main(
    samples: int = typer.Option(3, help="Draws of the unlabelled queries"),
    texts: int = typer.Option(300, help="Unlabelled queries per draw"),
    output: Path = typer.Option(ROOT / "bench/results/route_adapt.json"),
) -> None:
    train, test = read(BANKING77 / "train.csv"), read(BANKING77 / "test.csv")
    test = [(t, label) for t, label in test if label in DESCRIPTIONS]
    in_scope = [(t, label) for t, label in train if label in DESCRIPTIONS]
    base = router()
    before = accuracy(base, test)
    state = base.get_pipe("bert_textcat").model.to_bytes()
    rows = []
    for sample in range(samples):
        rng = random.Random(sample)
        for kind, pool in (("in scope", in_scope), ("random", train)):
            drawn = rng.sample(pool, texts)
            share = sum(label in DESCRIPTIONS for _, label in drawn) / texts
            pipe = base.get_pipe("bert_textcat")
            pipe.model.from_bytes(state)
            start = time.perf_counter()
            counts = pipe.adapt_to_texts([base.make_doc(t) for t, _ in drawn])
            seconds = time.perf_counter() - start
            after = accuracy(base, test)
            rows.append(
                {
                    "sample": sample,
                    "texts": kind,
                    "in_scope_share": share,
                    "kept": int(sum(counts.values())),
                    "accuracy": after,
                    "seconds": seconds,
                }
            )
            typer.echo(
                f"sample {sample} {kind:8s}: {share:.0%} in scope, {rows[-1]['kept']} kept, "
                f"accuracy {before * 100:.1f} -> {after * 100:.1f}"
            )
    summary = {
        kind: float(numpy.mean([r["accuracy"] for r in rows if r["texts"] == kind]))
        for kind in ("in scope", "random")
    }
    typer.echo(
        f"before {before * 100:.2f}; after, mean of {samples}: in scope "
        f"{summary['in scope'] * 100:.2f}, random {summary['random'] * 100:.2f}"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        json.dumps(
            {"test_queries": len(test), "before": before, "mean_after": summary, "runs": rows},
            indent=2,
        )
    )


if __name__ == "__main__":
    typer.run(main)
