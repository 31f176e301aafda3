"""Named entities: `read_ner_docs` (or one of the readers it dispatches to)
yields Docs with `doc.ents` set, from CoNLL columns, JSONL texts with
character offsets, or spaCy v2 JSON."""

from pathlib import Path
from typing import Any, Dict, Iterator, List, Literal, Optional, Tuple, Union

from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.training.converters import json_to_docs
from spacy.training.iob_utils import biluo_tags_to_spans, iob_to_biluo
from spacy.vocab import Vocab

from ..io.errors import ConversionError
from .fields import json_object, json_text, json_type, jsonl_records, load_json, read_text, show

# A CoNLL line whose first column is this separates two documents.
CONLL_DOCSTART = "-DOCSTART-"


# Suffixes `read_ner_docs` knows; with file_format="auto" any other is read as CoNLL.
NER_SUFFIXES = {
    ".jsonl": "jsonl",
    ".json": "json",
    ".txt": "conll",
    ".conll": "conll",
    ".iob": "conll",
}


# Entity fields found without `spans_field`: [start, end, label] lists, or
# {"start", "end", "label"} objects (Prodigy).
AUTO_SPANS_FIELDS = ("entities", "spans")


NerFileFormat = Literal["auto", "conll", "jsonl", "json"]


def read_ner_docs(
    path: Path,
    nlp: Language,
    *,
    file_format: NerFileFormat = "auto",
    n_sents: int = 0,
) -> Iterator[Doc]:
    """Read named entity data into Docs with `doc.ents` set, choosing the
    reader by format. The arguments are checked at once; the file is read as
    the Docs are consumed.

    path (Path): The file to read, UTF-8 encoded.
    nlp (Language): Its vocab holds the Docs; its tokenizer splits JSONL texts.
    file_format (Literal["auto", "conll", "jsonl", "json"]): "conll" for
        `read_conll_ner`, "jsonl" for `read_entity_jsonl`, "json" for
        `read_spacy_json`. "auto" picks by suffix: ".jsonl" is JSONL, ".json"
        is spaCy v2 JSON, anything else (".txt", ".conll", ".iob", ...) CoNLL.
    n_sents (int): CoNLL only: sentences per Doc, or 0 for one Doc per document.
    RETURNS (Iterator[Doc]): The Docs, in file order.
    RAISES (ValueError): For an unknown file_format, or n_sents with a
        format other than CoNLL.
    """
    path = Path(path)
    if file_format == "auto":
        chosen = NER_SUFFIXES.get(path.suffix.lower(), "conll")
    elif file_format in ("conll", "jsonl", "json"):
        chosen = file_format
    else:
        raise ValueError(
            f"unknown file_format {file_format!r}: expected auto, conll, jsonl or json"
        )
    if chosen == "conll":
        docs = read_conll_ner(path, nlp.vocab, n_sents=n_sents)
        if file_format == "auto" and path.suffix.lower() not in NER_SUFFIXES:
            known = ", ".join(NER_SUFFIXES)
            reason = f"{path.suffix!r} is not a known suffix" if path.suffix else "no suffix"
            return _explain_errors(docs, f"read as CoNLL: {reason} ({known})")
        return docs
    if n_sents:
        raise ValueError(f"n_sents groups CoNLL sentences, but {path.name} is read as {chosen}")
    if chosen == "jsonl":
        return read_entity_jsonl(path, nlp)
    return read_spacy_json(path, nlp)


def read_conll_ner(path: Path, vocab: Vocab, *, n_sents: int = 0) -> Iterator[Doc]:
    """Read CoNLL-style NER data: one token per line in whitespace-separated
    columns, the token first and its NER tag last (CoNLL 2003:
    "token POS chunk NER"), blank lines between sentences and "-DOCSTART-"
    lines between documents. Tags are IOB2 (every entity starts with "B-") or
    IOB1 (an entity starts with "I-" unless it follows one of the same type).
    Every line has as many columns as the file's first token line.

    The Docs are made from the tokens, joined by single spaces, with sentence
    starts and entities set; entities never cross a sentence boundary.
    Documents without tokens are skipped.

    path (Path): The file to read, UTF-8 encoded.
    vocab (Vocab): The vocab the Docs are made with.
    n_sents (int): Sentences per Doc: 0 for one Doc per document (the whole
        file if it has no "-DOCSTART-" line), k > 0 for groups of k
        consecutive sentences, never crossing a document boundary.
    RETURNS (Iterator[Doc]): The Docs, in file order.
    RAISES (ValueError): If n_sents is negative.
    """
    if n_sents < 0:
        raise ValueError(f"n_sents must be 0 (one Doc per document) or more, found {n_sents}")
    return _read_conll_ner(Path(path), vocab, n_sents)


def read_entity_jsonl(
    path: Path, nlp: Language, *, text_field: str = "text", spans_field: Optional[str] = None
) -> Iterator[Doc]:
    """Read texts with character-offset entities, one JSON object per line, as
    written by spaCy or Prodigy: "entities" as `[[start, end, label], ...]`
    or "spans" as `[{"start": ..., "end": ..., "label": ...}, ...]`. Blank
    lines are skipped.

    Each entity must start and end on a token boundary of `nlp.make_doc`'s
    tokens (it is never expanded or trimmed to fit), have a non-empty label,
    and overlap no other entity.

    path (Path): The file to read, UTF-8 encoded.
    nlp (Language): Its tokenizer makes the Docs (`nlp.make_doc`).
    text_field (str): The field holding the text.
    spans_field (Optional[str]): The field holding the entities, as lists or
        objects. Defaults to "entities" or "spans", whichever the record has.
    YIELDS (Doc): The Docs, in file order.
    """
    path = Path(path)
    for where, record in jsonl_records(path):
        text = json_text(record, text_field, where)
        entities = _json_entities(record, spans_field, len(text), where)
        doc = nlp.make_doc(text)
        doc.ents = _entity_spans(doc, entities, where)
        yield doc


def read_spacy_json(path: Path, nlp: Language) -> Iterator[Doc]:
    """Read spaCy v2's JSON training format (a list of documents, each with
    "paragraphs" of tokenized "sentences"; NER tags in BILUO) with spaCy's own
    `json_to_docs`: one Doc per paragraph, keeping the tokens, sentences,
    entities and whatever else the file annotates.

    Errors name the record (document) in the list. A paragraph whose
    entities spaCy reads differently from its tags, as for IOB tags
    ("B-X I-X" without "L-X") that spaCy would drop, is an error.

    path (Path): The file to read, UTF-8 encoded.
    nlp (Language): Its vocab holds the Docs.
    YIELDS (Doc): The Docs, one per paragraph, in file order.
    """
    path = Path(path)
    records = load_json(path)
    if not isinstance(records, list):
        raise ConversionError(
            f"{path}:1", f"expected a JSON list of documents, found {json_type(records)}"
        )
    # The record and paragraph of each Doc `json_to_docs` will make, in order,
    # to say where its errors are: it reports none itself.
    paragraphs: List[Tuple[int, int, Dict[str, Any]]] = []
    for number, record in enumerate(records, start=1):
        record = json_object(record, f"{path}:record {number}")
        if not isinstance(record.get("paragraphs"), list):
            raise ConversionError(
                f"{path}:record {number}",
                f'expected a "paragraphs" list, found {show(record.get("paragraphs"))}',
            )
        for index, paragraph in enumerate(record["paragraphs"], start=1):
            paragraphs.append((number, index, paragraph))
    # json_to_docs makes Docs in a vocab of its own; they are copied into nlp's.
    docs = json_to_docs(records)
    for number, index, paragraph in paragraphs:
        where = f"{path}:record {number}"
        try:
            doc = next(docs)
        # `json_to_docs` does not check its input: malformed data surfaces as
        # these, from wherever spaCy first trips on it.
        except KeyError as err:
            raise ConversionError(where, f"paragraph {index}: missing key {err}") from None
        except (AttributeError, IndexError, TypeError, ValueError) as err:
            message = " ".join(str(err).split())
            raise ConversionError(where, f"paragraph {index}: {message}") from None
        n_tagged = sum(
            1
            for sentence in paragraph["sentences"]
            for token in sentence["tokens"]
            if str(token.get("ner") or "").startswith(("B-", "U-"))
        )
        if len(doc.ents) != n_tagged:
            raise ConversionError(
                where,
                f"paragraph {index}: {n_tagged} entities are tagged (B- or U-) but spaCy "
                f"reads {len(doc.ents)}; NER tags must be BILUO (B-, I-, L-, U-, O)",
            )
        yield Doc(nlp.vocab).from_bytes(doc.to_bytes())


def _read_conll_ner(path: Path, vocab: Vocab, n_sents: int) -> Iterator[Doc]:
    for sentences in _read_conll_documents(path):
        size = n_sents or len(sentences)
        for start in range(0, len(sentences), size):
            yield _conll_doc(vocab, sentences[start : start + size])


def _read_conll_documents(path: Path) -> Iterator[List[List[Tuple[str, str]]]]:
    # Yields each document as its sentences, each a list of (token, tag).
    document: List[List[Tuple[str, str]]] = []
    sentence: List[Tuple[str, str]] = []
    # The number of columns and the line of the first token line.
    first: Optional[Tuple[int, int]] = None
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        columns = line.split()
        if not columns or columns[0] == CONLL_DOCSTART:
            if sentence:
                document.append(sentence)
                sentence = []
            if columns and document:
                yield document
                document = []
            continue
        where = f"{path}:{number}"
        if first is None:
            if len(columns) < 2:
                raise ConversionError(
                    where, f"expected a token and an NER tag in the last column, found {line!r}"
                )
            first = (len(columns), number)
        elif len(columns) != first[0]:
            raise ConversionError(
                where,
                f"expected {first[0]} columns as on line {first[1]}, "
                f"found {len(columns)}: {line.strip()!r}",
            )
        sentence.append((columns[0], _conll_tag(columns[-1], where)))
    if sentence:
        document.append(sentence)
    if document:
        yield document


def _conll_tag(tag: str, where: str) -> str:
    if tag == "O":
        return tag
    prefix, dash, label = tag.partition("-")
    if not dash or prefix not in ("B", "I"):
        hint = "; BILUO and BIOES tags are not read" if prefix in ("L", "U", "E", "S") else ""
        raise ConversionError(
            where, f"expected an NER tag 'O', 'B-TYPE' or 'I-TYPE', found {tag!r}{hint}"
        )
    if not label:
        raise ConversionError(where, f"NER tag {tag!r} has no entity type")
    return tag


def _conll_doc(vocab: Vocab, sentences: List[List[Tuple[str, str]]]) -> Doc:
    words = [word for sentence in sentences for word, _ in sentence]
    sent_starts: List[Union[bool, int, None]] = [
        i == 0 for sentence in sentences for i in range(len(sentence))
    ]
    # Converted a sentence at a time: an IOB1 entity at a sentence start
    # begins with "I-", and must not join one ending the previous sentence.
    biluo = [tag for sentence in sentences for tag in iob_to_biluo(t for _, t in sentence)]
    spaces = [True] * len(words)
    spaces[-1] = False
    doc = Doc(vocab, words=words, spaces=spaces, sent_starts=sent_starts)
    doc.ents = biluo_tags_to_spans(doc, biluo)
    return doc


def _json_entities(
    record: Dict[str, Any], spans_field: Optional[str], n_chars: int, where: str
) -> List[Tuple[int, int, str]]:
    field = spans_field or _auto_spans_field(record, where)
    if field not in record:
        raise ConversionError(where, f"no {field!r} field; fields: {', '.join(record)}")
    value = record[field]
    if not isinstance(value, list):
        raise ConversionError(where, f"{field!r} must be a list of entities, found {show(value)}")
    entities = []
    for item in value:
        if isinstance(item, dict) and {"start", "end", "label"} <= set(item):
            start, end, label = item["start"], item["end"], item["label"]
        elif isinstance(item, list) and len(item) == 3:
            start, end, label = item
        else:
            raise ConversionError(
                where,
                f"expected an entity as [start, end, label] or "
                f'{{"start": ..., "end": ..., "label": ...}} in {field!r}, found {show(item)}',
            )
        if not all(
            isinstance(offset, int) and not isinstance(offset, bool) for offset in (start, end)
        ):
            raise ConversionError(where, f"entity offsets must be integers, found {show(item)}")
        if not isinstance(label, str) or not label.strip():
            raise ConversionError(
                where, f"entity label must be a non-empty string, found {show(item)}"
            )
        if end <= start:
            raise ConversionError(where, f"entity {show(item)} ends at or before its start")
        if start < 0 or end > n_chars:
            raise ConversionError(
                where, f"entity {show(item)} is outside the text (0 to {n_chars} characters)"
            )
        entities.append((start, end, label))
    return entities


def _auto_spans_field(record: Dict[str, Any], where: str) -> str:
    found = [name for name in AUTO_SPANS_FIELDS if name in record]
    if len(found) != 1:
        problem = "both an 'entities' and a 'spans'" if found else "no 'entities' or 'spans'"
        raise ConversionError(
            where, f"{problem} field; name the entity field explicitly; fields: {', '.join(record)}"
        )
    return found[0]


def _entity_spans(doc: Doc, entities: List[Tuple[int, int, str]], where: str) -> List[Span]:
    spans: List[Span] = []
    for start, end, label in sorted(entities):
        span = doc.char_span(start, end, label=label)
        if span is None:
            covered = doc.char_span(start, end, alignment_mode="expand")
            tokens = [token.text for token in covered] if covered is not None else []
            raise ConversionError(
                where,
                f"entity {label!r} at characters {start}-{end} ({doc.text[start:end]!r}) "
                f"does not fall on token boundaries; the tokens there are {tokens}",
            )
        if spans and span.start < spans[-1].end:
            prev = spans[-1]
            raise ConversionError(
                where,
                f"entities overlap: {prev.label_!r} at characters {prev.start_char}-"
                f"{prev.end_char} ({prev.text!r}) and {label!r} at {start}-{end} ({span.text!r})",
            )
        spans.append(span)
    return spans


def _explain_errors(docs: Iterator[Doc], note: str) -> Iterator[Doc]:
    try:
        yield from docs
    except ConversionError as err:
        raise ConversionError(err.location, f"{err.message} ({note})") from None
