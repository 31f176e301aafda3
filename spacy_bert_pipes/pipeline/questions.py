"""The questions `bert_qa` asks of a doc, and what makes a question valid."""

import unicodedata
from typing import Any, Dict

from spacy.tokens import Doc


def asked_questions(fixed: Dict[str, str], doc: Doc, index: int = 0) -> Dict[str, str]:
    """The questions asked of a doc: the `fixed` ones, then those of its
    `nlp.pipe(..., as_tuples=True)` context (`{"questions": {key: question}}`),
    then `doc._.questions` (a later source overrides the same key)."""
    asked = dict(fixed)
    context = getattr(doc, "_context", None)
    sources = [
        (
            "the questions of the nlp.pipe context",
            context.get("questions") if isinstance(context, dict) else None,
        ),
        ("doc._.questions", doc._.get("questions")),
    ]
    for where, own in sources:
        if not own:
            continue
        if not isinstance(own, dict):
            raise ValueError(
                f"Doc {index}: {where} must be a dict {{key: question}}, got {type(own).__name__}"
            )
        for key, text in own.items():
            check_question(key, text, f"{where} of doc {index}")
            asked[key] = text
    return asked


def check_question(key: Any, text: Any, where: str) -> None:
    """Raise a ValueError naming `where` the question came from if its key or text
    is empty, or if the tokenizer would reduce the text to nothing."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"{where}: question keys must be non-empty strings, got {key!r}")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}: the question for {key!r} is empty")
    # BERT's normalizer drops control and format characters (NUL, U+200B) and
    # U+FFFD, splits on whitespace and, uncased, strips accents (Mn): a question
    # of only these has no wordpieces (checked against the default encoder's
    # tokenizer on every code point; models/heads/qa.py catches what Unicode versions
    # disagree on)
    dropped = ("Cc", "Cf", "Co", "Cs", "Zs", "Mn")
    if all(
        char.isspace() or char == "\ufffd" or unicodedata.category(char) in dropped
        for char in unicodedata.normalize("NFD", text)
    ):
        raise ValueError(
            f"{where}: the question for {key!r} is empty to the tokenizer, which drops "
            f"control and format characters and combining marks: {text!r}"
        )
