"""Where does raw text get cut? The learned sentence splitter against the rule.

    python bench/sentence_splits.py [--train train.txt] [--data valid.txt]
        [--output bench/results/sentence_splits.json]

Learns `context = "auto"`'s sentence splitter (`models/text/splitter.py`) from the
CoNLL-2003 training sentences in order, as `initialize` does, then joins the
`--data` sentences by spaces into one doc without boundaries (like raw text) and
scores the cuts of spaCy's rule-based sentencizer and of the splitter at several
thresholds against the sentences' own boundaries (precision, recall, F1).
"""

import json
import platform
import time
from pathlib import Path
from typing import Dict, List, Set

import spacy
import typer
from spacy.tokens import Doc

from spacy_bert_pipes.convert import read_conll_ner
from spacy_bert_pipes.models.text.splitter import THRESHOLD, learn_splitter

CONLL = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "conll2003"


def scores(predicted: Set[int], gold: Set[int]) -> Dict[str, float]:
    right = len(predicted & gold)
    return {
        "precision": round(right / max(len(predicted), 1), 4),
        "recall": round(right / max(len(gold), 1), 4),
        "f1": round(2 * right / max(len(predicted) + len(gold), 1), 4),
        "cuts": len(predicted),
    }


def main(
    train: Path = typer.Option(CONLL / "train.txt", help="CoNLL-2003 file to learn from"),
    data: Path = typer.Option(CONLL / "valid.txt", help="CoNLL-2003 file to score on"),
    output: Path = typer.Option(Path("bench/results/sentence_splits.json"), help="JSON results"),
) -> None:
    nlp = spacy.blank("en")
    start = time.perf_counter()
    splitter = learn_splitter(read_conll_ner(train, nlp.vocab, n_sents=1))
    seconds_learn = time.perf_counter() - start
    words: List[str] = []
    gold: Set[int] = set()
    for sentence in read_conll_ner(data, nlp.vocab, n_sents=1):
        if words:
            gold.add(len(words))
        words.extend(token.text for token in sentence)
    doc = Doc(nlp.vocab, words=words)  # a space after every word, no boundaries
    sentencizer = nlp.add_pipe("sentencizer")
    rule = {i for i, start in enumerate(sentencizer.predict([doc])[0]) if start and i}
    after, probs = splitter.probabilities(doc)
    learned = {
        str(threshold): scores({int(i) for i in after[probs >= threshold]}, gold)
        for threshold in (0.2, 0.35, 0.5, 0.65, 0.8)
    }
    result = {
        "command": f"python bench/sentence_splits.py --train {train} --data {data}",
        "machine": f"{platform.machine()} {platform.processor()}, {platform.node()}",
        "words": len(doc),
        "boundaries": len(gold),
        "rule_sentencizer": scores(rule, gold),
        "splitter_threshold": THRESHOLD,
        "splitter": learned,
        "seconds_learn": round(seconds_learn, 1),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    typer.echo(f"rule: {result['rule_sentencizer']}")
    for threshold, values in learned.items():
        typer.echo(f"splitter >= {threshold}: {values}")


if __name__ == "__main__":
    typer.run(main)
