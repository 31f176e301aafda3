"""What the encoder reads apart: the whole doc, or each of its sentences.

`context = "doc"` encodes a doc's text in windows; `"sentence"` each of its
`doc.sents` apart; `"auto"` as the training docs were (`learn_context`): a model
trained on single sentences reads sentences, cutting a doc without boundaries
where a sentence splitter learned from the training docs cuts (`splitter.py`) and
at line breaks, so that it reads raw text in the units it was trained on. Models
saved before the splitter existed cut by spaCy's rule-based sentencizer instead.
"""

from typing import Any, Dict, Iterable, List, Optional, Tuple

from spacy.pipeline import Sentencizer
from spacy.tokens import Doc
from thinc.api import Model

from .splitter import Splitter, learn_splitter

CONTEXTS = ("doc", "sentence", "auto")
# `context = "auto"` reads sentences apart when at least this share of the training
# docs are one sentence each (by their own boundaries, or else spaCy's sentencizer).
SENTENCE_LEVEL_SHARE = 0.9
# A sentence splitter is learned from at least this many training docs; from fewer,
# it would learn their words more than where units end, and the rule cuts better.
SPLITTER_MIN_DOCS = 100


# One rule-based sentencizer for every call (its predict reads, never writes, docs).
_SENTENCIZER = Sentencizer()


def segments(
    doc: Doc, text: str, context: str, splitter: Optional[Splitter] = None
) -> List[Tuple[int, int]]:
    """The character spans of `doc` (whose text is `text`) that are encoded apart:
    the whole text, or with context "sentence" each sentence that is not blank (a
    doc without sentence boundaries, or with only blank ones, is one span). With
    "sentences", the context "auto" learns from sentence-level training docs, a
    doc without boundaries is cut where `splitter` (`learned_splitter`) cuts, or
    without one where spaCy's rule-based sentencizer does, and at line breaks, as
    training never showed the model several sentences at once."""
    if context in ("sentence", "sentences"):
        if doc.has_annotation("SENT_START"):
            bounds = [(s.start_char, s.end_char) for s in doc.sents]
        elif context == "sentences" and len(doc):
            bounds = _rule_sentences(doc, splitter)
        else:
            bounds = []
        spans = [(start, end) for start, end in bounds if text[start:end].strip()]
        if spans:
            return spans
    return [(0, len(text))]


def effective_context(encoder: Model) -> str:
    """The encoder's context setting, with "auto" resolved: "sentences" (read
    sentences apart, cutting docs without boundaries by rule) when the training
    docs were sentences, else "doc" (also before `learn_context` has run)."""
    context = encoder.attrs.get("context", "doc")
    if context != "auto":
        return context
    return "sentences" if encoder.attrs.get("learned_context") == "sentence" else "doc"


def learned_splitter(encoder: Model) -> Optional[Splitter]:
    """The sentence splitter `learn_context` learned for `encoder`, if any."""
    data: Optional[Dict[str, Any]] = encoder.attrs.get("learned_splitter")
    return Splitter.from_dict(data) if data else None


def learn_context(encoder: Model, docs: Iterable[Doc]) -> None:
    """With `context = "auto"`, remember whether the training docs are sentences:
    at least SENTENCE_LEVEL_SHARE of them one sentence each (by their own
    boundaries where they have them, else by spaCy's sentencizer). If they are
    (and there are SPLITTER_MIN_DOCS of them), also learn from them, read in
    order, where one ends and the next begins (`learn_splitter`), to cut raw text
    into such units."""
    if encoder.attrs.get("context") != "auto":
        return
    seen = []
    n_single = 0
    for doc in docs:
        seen.append(doc)
        if doc.has_annotation("SENT_START"):
            n_single += sum(1 for _ in doc.sents) <= 1
        else:
            n_single += len(_rule_sentences(doc)) <= 1
    single = len(seen) > 0 and n_single >= SENTENCE_LEVEL_SHARE * len(seen)
    encoder.attrs["learned_context"] = "sentence" if single else "doc"
    learn = single and len(seen) >= SPLITTER_MIN_DOCS
    encoder.attrs["learned_splitter"] = learn_splitter(seen).to_dict() if learn else None


def _rule_sentences(doc: Doc, splitter: Optional[Splitter] = None) -> List[Tuple[int, int]]:
    """The character spans of the sentences in `doc` (which is not changed), cut
    at line breaks (headlines, datelines and table rows stand on lines of their
    own and often end without punctuation) and within lines by spaCy's rule-based
    sentencizer. Text without line breaks, where such lines may have run
    together, is cut where `splitter` cuts, when there is one."""
    breaks = [t.i + 1 for t in doc if t.is_space and "\n" in t.text and t.i + 1 < len(doc)]
    if splitter is None or breaks:
        starts = list(_SENTENCIZER.predict([doc])[0])
    else:
        starts = [True] + [False] * (len(doc) - 1)
        for i in splitter.starts(doc):
            starts[i] = True
    for i in breaks:
        starts[i] = True
    first = [i for i, start in enumerate(starts) if start] or [0]
    spans = []
    for a, b in zip(first, first[1:] + [len(doc)]):
        last = b - 1
        while last > a and doc[last].is_space:  # the line break ends, not joins
            last -= 1
        spans.append((doc[a].idx, doc[last].idx + len(doc[last])))
    return spans
