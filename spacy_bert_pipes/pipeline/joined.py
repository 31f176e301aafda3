"""Training sentences joined as raw text: what `bert_ner` trains on when it reads
sentences apart by rule (`join_sentences`).

A model trained on single sentences and run on raw text reads the pieces spaCy's
rule-based sentencizer cuts, and a line without final punctuation (a headline, a
dateline, a table row) runs into the next sentence. Joining runs of training
examples into one doc of words and spaces, read the same way, shows training such
pieces too.
"""

from typing import Callable, List, Sequence

from spacy.tokens import Doc
from spacy.training import Example


def joined_examples(
    examples: Sequence[Example], max_run: int, randint: Callable[[int, int], int]
) -> List[Example]:
    """The examples joined, in order, in runs of 1 to `max_run` (`randint(1, max_run)`,
    spaCy's training seeds Python's `random`):
    each run's predicted docs become one doc of their words and spaces only (a
    space between them, no sentence boundaries, like raw text), its reference docs
    one doc with their entities and span groups. Examples whose predicted doc is
    empty or has sentence boundaries (read as they are at prediction) stay alone."""
    out: List[Example] = []
    run: List[Example] = []
    size = randint(1, max_run)
    for eg in examples:
        if len(eg.predicted) == 0 or eg.predicted.has_annotation("SENT_START"):
            out.extend(_join_run(run) + [eg])
            run = []
            continue
        run.append(eg)
        if len(run) >= size:
            out.extend(_join_run(run))
            run = []
            size = randint(1, max_run)
    return out + _join_run(run)


def _join_run(run: List[Example]) -> List[Example]:
    if len(run) <= 1:
        return run
    words: List[str] = []
    spaces: List[bool] = []
    for eg in run:
        words.extend(token.text for token in eg.predicted)
        spaces.extend(bool(token.whitespace_) for token in eg.predicted)
        # a space before the next doc, as `Doc.from_docs(ensure_whitespace=True)` adds
        spaces[-1] = spaces[-1] or not eg.predicted[-1].is_space
    spaces[-1] = bool(run[-1].predicted[-1].whitespace_)
    predicted = Doc(run[0].predicted.vocab, words=words, spaces=spaces)
    reference = Doc.from_docs([eg.reference for eg in run], ensure_whitespace=True)
    return [Example(predicted, reference)]
