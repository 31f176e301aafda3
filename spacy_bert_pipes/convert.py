"""Read labelled data into spaCy Docs and `.spacy` files.

Text classification: the readers yield `TextcatRow`s, and `rows_to_docs` turns
them into Docs with a score in `doc.cats` for every label. Named entities:
`read_ner_docs` (or one of the readers it dispatches to) yields Docs with
`doc.ents` set, from CoNLL columns, JSONL texts with character offsets, or
spaCy v2 JSON. Question answering: `read_squad` and `read_restaurant8k` yield
a Doc per context with its questions in `doc._.questions` and their reference
answers in `doc._.gold_answers`. `write_docbin` saves any kind (with
`store_user_data=True` for the QA extensions). Every problem with the data
raises a `ConversionError` whose message starts with the place it was found,
`"{path}:{line}: "` (`"{path}:record {n}: "` for a JSON list), so no row,
token or entity is ever dropped or guessed at silently.
"""

import csv
import difflib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import (
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Literal,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from spacy.language import Language
from spacy.tokens import Doc, DocBin, Span
from spacy.training.converters import json_to_docs
from spacy.training.iob_utils import biluo_tags_to_spans, iob_to_biluo
from spacy.vocab import Vocab

from .io.errors import ConversionError
from .pipeline.common import ensure_qa_extensions

# Label fields found without `label_column`: one label, or several.
AUTO_LABEL_COLUMNS = ("label", "labels")
# Separates several labels in one CSV cell.
CSV_LABEL_SEPARATOR = "|"
NLUPLUSPLUS_DOMAINS = ("banking", "general")
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


@dataclass(frozen=True)
class TextcatRow:
    """One labelled text as read from a file.

    text (str): The document text; may be empty.
    labels (Tuple[str, ...]): The gold labels, in file order; empty means none.
    source (str): Where the row was read, e.g. "train.csv:12".
    """

    text: str
    labels: Tuple[str, ...]
    source: str


def read_textcat_rows(
    path: Path, *, text_column: str = "text", label_column: Optional[str] = None
) -> Iterator[TextcatRow]:
    """Read labelled texts from a `.csv` file (with a header row) or a `.jsonl`
    file (one JSON object per line). Blank lines are skipped; every other line
    is a row or an error.

    A CSV label cell holds one label or several separated by "|". A JSONL label
    field is a string (one label) or a list of strings (an empty list means no
    labels). An empty text is a valid document; a missing or null text, or a
    missing or empty label, is an error.

    path (Path): The file to read, UTF-8 encoded.
    text_column (str): The column or field holding the text.
    label_column (Optional[str]): The column or field holding the labels.
        Defaults to "label" or "labels", whichever the data has.
    YIELDS (TextcatRow): The rows, in file order.
    """
    path = Path(path)
    if path.suffix == ".csv":
        yield from _read_csv(path, text_column, label_column)
    elif path.suffix == ".jsonl":
        yield from _read_jsonl(path, text_column, label_column)
    else:
        raise ConversionError(
            str(path), f"unsupported file type {path.suffix!r}: expected .csv or .jsonl"
        )


def read_nluplusplus(folder: Path, folds: Sequence[int]) -> Iterator[TextcatRow]:
    """Read NLU++ fold files (`fold{N}.json`, each a JSON list of records with
    "text", an optional "intents" list and "slots"). A record without
    "intents" has no intent, which is valid multi-label data: its labels are
    an empty tuple. Slots are not read.

    folder (Path): The domain folder, e.g. "nluplusplus/banking".
    folds (Sequence[int]): The fold numbers to read, in order.
    YIELDS (TextcatRow): The rows, with sources like "fold3.json:record 7".
    """
    folder = Path(folder)
    for fold in folds:
        path = folder / f"fold{fold}.json"
        if not path.is_file():
            found = sorted(p.name for p in folder.glob("fold*.json"))
            raise ConversionError(
                str(path), f"no such fold file; {folder} has: {', '.join(found) or 'none'}"
            )
        records = _load_json(path)
        if not isinstance(records, list):
            raise ConversionError(
                f"{path}:1", f"expected a JSON list of records, found {_json_type(records)}"
            )
        for number, record in enumerate(records, start=1):
            where = f"{path}:record {number}"
            record = _json_object(record, where)
            text = _json_text(record, "text", where)
            if "intents" in record:
                labels = _json_labels(record["intents"], "intents", where)
            else:
                labels = ()
            yield TextcatRow(text=text, labels=labels, source=where)


def nluplusplus_labels(
    folder_or_ontology: Path, *, domains: Sequence[str] = NLUPLUSPLUS_DOMAINS
) -> List[str]:
    """Read the NLU++ intent labels of some domains from `ontology.json`.

    In the ontology, "intents" maps each intent to a record whose "domain"
    lists the domains it belongs to: "general" intents (affirm, greet, ...)
    belong to every domain's label set.

    folder_or_ontology (Path): The `ontology.json` file, or a folder holding
        it, or a fold folder whose parent holds it.
    domains (Sequence[str]): Keep the intents of any of these domains.
    RETURNS (List[str]): The intents, sorted.
    """
    path = _find_ontology(Path(folder_or_ontology))
    ontology = _load_json(path)
    intents = ontology.get("intents") if isinstance(ontology, dict) else None
    if not isinstance(intents, dict):
        raise ConversionError(str(path), 'expected an object with an "intents" object')
    labels = []
    for intent, info in intents.items():
        intent_domains = info.get("domain") if isinstance(info, dict) else None
        if not isinstance(intent_domains, list):
            raise ConversionError(
                str(path), f'intent {intent!r}: expected a "domain" list, found {_show(info)}'
            )
        if set(intent_domains) & set(domains):
            labels.append(intent)
    if not labels:
        raise ConversionError(str(path), f"no intents in the domains {list(domains)}")
    return sorted(labels)


def read_labels_file(path: Path) -> List[str]:
    """Read a label set from a JSON list of unique, non-empty strings.

    path (Path): The JSON file, e.g. Banking77's `categories.json`.
    RETURNS (List[str]): The labels, in file order.
    """
    path = Path(path)
    labels = _load_json(path)
    if not isinstance(labels, list) or not labels:
        raise ConversionError(
            f"{path}:1", f"expected a non-empty JSON list of labels, found {_show(labels)}"
        )
    first_seen: Dict[str, int] = {}
    for number, label in enumerate(labels, start=1):
        where = f"{path}:item {number}"
        if not isinstance(label, str) or not label.strip():
            raise ConversionError(where, f"expected a non-empty string, found {_show(label)}")
        if label in first_seen:
            raise ConversionError(where, f"label {label!r} repeats item {first_seen[label]}")
        first_seen[label] = number
    return labels


def rows_to_docs(
    nlp: Language, rows: Iterable[TextcatRow], labels: Sequence[str], *, exclusive: bool
) -> Iterator[Doc]:
    """Make a Doc per row with `doc.cats` scoring every label: 1.0 for the
    row's gold labels, 0.0 for the others.

    nlp (Language): Its tokenizer makes the Docs (`nlp.make_doc`).
    rows (Iterable[TextcatRow]): The labelled texts.
    labels (Sequence[str]): The full label set; a row's label outside it is
        an error.
    exclusive (bool): Whether the classes are mutually exclusive (textcat):
        then each row needs exactly one label. Otherwise (textcat_multilabel)
        a row has any number of labels, none included.
    YIELDS (Doc): The Docs, in row order.
    """
    known = set(labels)
    for row in rows:
        gold = set(row.labels)
        for label in row.labels:
            if label not in known:
                raise ConversionError(row.source, _unknown_label_message(label, labels))
        if exclusive and len(gold) != 1:
            found = ", ".join(repr(label) for label in sorted(gold)) or "none"
            raise ConversionError(
                row.source, f"exclusive classes need exactly one label per row, found {found}"
            )
        doc = nlp.make_doc(row.text)
        doc.cats = {label: 1.0 if label in gold else 0.0 for label in labels}
        yield doc


def write_docbin(docs: Iterable[Doc], output: Path, *, store_user_data: bool = False) -> int:
    """Save Docs to a `.spacy` file. The file is written once all Docs are
    made, so an error while making them leaves no partial file.

    docs (Iterable[Doc]): The Docs to save.
    output (Path): The `.spacy` file; missing parent folders are made.
    store_user_data (bool): Whether to save `doc.user_data`, which holds the
        values of custom extensions such as `doc._.gold_answers`. spaCy reads
        it back with the lists in it as tuples.
    RETURNS (int): The number of Docs written.
    """
    output = Path(output)
    doc_bin = DocBin(store_user_data=store_user_data)
    n_docs = 0
    for doc in docs:
        doc_bin.add(doc)
        n_docs += 1
    output.parent.mkdir(parents=True, exist_ok=True)
    doc_bin.to_disk(output)
    return n_docs


# Named entities: CoNLL columns, JSONL with character offsets, spaCy v2 JSON.


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
    # Split on "\n" only, as in `_read_jsonl`: line numbers must match an editor's.
    for number, line in enumerate(_read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConversionError(where, f"invalid JSON: {err.msg} (column {err.colno})") from None
        _check_surrogates(record, where)
        record = _json_object(record, where)
        text = _json_text(record, text_field, where)
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
    records = _load_json(path)
    if not isinstance(records, list):
        raise ConversionError(
            f"{path}:1", f"expected a JSON list of documents, found {_json_type(records)}"
        )
    # The record and paragraph of each Doc `json_to_docs` will make, in order,
    # to say where its errors are: it reports none itself.
    paragraphs: List[Tuple[int, int, Dict[str, Any]]] = []
    for number, record in enumerate(records, start=1):
        record = _json_object(record, f"{path}:record {number}")
        if not isinstance(record.get("paragraphs"), list):
            raise ConversionError(
                f"{path}:record {number}",
                f'expected a "paragraphs" list, found {_show(record.get("paragraphs"))}',
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
    for number, line in enumerate(_read_text(path).split("\n"), start=1):
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
        raise ConversionError(where, f"{field!r} must be a list of entities, found {_show(value)}")
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
                f'{{"start": ..., "end": ..., "label": ...}} in {field!r}, found {_show(item)}',
            )
        if not all(
            isinstance(offset, int) and not isinstance(offset, bool) for offset in (start, end)
        ):
            raise ConversionError(where, f"entity offsets must be integers, found {_show(item)}")
        if not isinstance(label, str) or not label.strip():
            raise ConversionError(
                where, f"entity label must be a non-empty string, found {_show(item)}"
            )
        if end <= start:
            raise ConversionError(where, f"entity {_show(item)} ends at or before its start")
        if start < 0 or end > n_chars:
            raise ConversionError(
                where, f"entity {_show(item)} is outside the text (0 to {n_chars} characters)"
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


# Question answering: SQuAD JSON (v1.1, v2.0 and others in its format) and
# Restaurant-8k span extraction. One Doc per context, its questions in
# `doc._.questions` and its reference answers in `doc._.gold_answers`.


def read_squad(
    path: Path,
    nlp: Language,
    *,
    articles: Optional[Tuple[int, int]] = None,
    stats: Optional[Dict[str, int]] = None,
) -> Iterator[Doc]:
    """Read question answering data in SQuAD's JSON format (v1.1, or v2.0 with
    unanswerable questions) into one Doc per paragraph context. The questions
    are set in `doc._.questions` and the reference answers in
    `doc._.gold_answers`, both keyed by the question "id" (as a string).

    An answer is located by its text: at its "answer_start" if the text is
    there, else at the occurrence nearest to it (some datasets' offsets are a
    few characters off); an answer text the context does not hold is an error.
    Whitespace around an answer is trimmed, so that answers start and end on
    a token, and identical references are kept once. A v2.0 question marked
    "is_impossible" has no answer (an empty list); its "plausible_answers"
    are not read.

    path (Path): The JSON file, UTF-8 encoded: an object whose "data" lists
        articles, each with "paragraphs" of a "context" and its "qas".
    nlp (Language): Its tokenizer makes the Docs (`nlp.make_doc`).
    articles (Optional[Tuple[int, int]]): The first and last article to read,
        1-based and inclusive, by position in the file, e.g. (39, 48); None
        reads them all.
    stats (Optional[Dict[str, int]]): Filled, as the Docs are consumed, with
        "corrected_offsets" (answers found away from their "answer_start")
        and "trimmed_answers" (answers trimmed of surrounding whitespace).
    RETURNS (Iterator[Doc]): The Docs, in file order.
    RAISES (ValueError): If articles is not a range of positive numbers.
    """
    if articles is not None:
        first, last = articles
        if first < 1 or last < first:
            raise ValueError(f"articles must be (first, last) with 1 <= first <= last: {articles}")
    counts = stats if stats is not None else {}
    counts.update(corrected_offsets=0, trimmed_answers=0)
    ensure_qa_extensions()
    return _read_squad(Path(path), nlp, articles, counts)


# Restaurant-8k's slots, each asked of every text as a question.
RESTAURANT8K_SLOTS = ("people", "date", "time", "first_name", "last_name")
RESTAURANT8K_QUESTIONS = {
    "people": "How many people?",
    "date": "What date?",
    "time": "What time?",
    "first_name": "What is the first name?",
    "last_name": "What is the last name?",
}


def read_restaurant8k(
    path: Path,
    nlp: Language,
    *,
    slots: Sequence[str] = RESTAURANT8K_SLOTS,
    questions: Optional[Dict[str, str]] = None,
    stats: Optional[Dict[str, int]] = None,
) -> Iterator[Doc]:
    """Read Restaurant-8k span extraction data (a JSON list of records with
    "userInput" {"text"} and optional "labels", each {"slot", "valueSpan"
    {"startIndex", "endIndex"}}) as question answering Docs: every slot is a
    question asked of every text, keyed by the slot name. A labelled slot has
    one answer, an unlabelled one none (an empty list).

    The file is protobuf JSON, which leaves out zero values: a missing
    "startIndex" is 0, a missing "text" the empty string. Whitespace around
    a span is trimmed, so that answers start and end on a token. The
    records' "context" (the slots the system had asked for) is not read.

    path (Path): The JSON file, UTF-8 encoded, e.g. "train_0.json".
    nlp (Language): Its tokenizer makes the Docs (`nlp.make_doc`).
    slots (Sequence[str]): The slots to ask about; a label of any other slot
        is an error.
    questions (Optional[Dict[str, str]]): Question texts by slot, replacing
        those of `RESTAURANT8K_QUESTIONS`.
    stats (Optional[Dict[str, int]]): Filled, as the Docs are consumed, with
        "trimmed_answers" (spans trimmed of surrounding whitespace).
    RETURNS (Iterator[Doc]): The Docs, one per record, in file order.
    RAISES (ValueError): If the slots are empty or repeat one, or a slot has
        no question text, or `questions` names a slot not in `slots`.
    """
    if not slots or len(set(slots)) != len(slots):
        raise ValueError(f"slots must be a non-empty list without repeats: {list(slots)}")
    texts = {**RESTAURANT8K_QUESTIONS, **(questions or {})}
    unknown = [slot for slot in questions or {} if slot not in slots]
    if unknown:
        raise ValueError(f"questions for slots not in {list(slots)}: {unknown}")
    missing = [slot for slot in slots if not texts.get(slot, "").strip()]
    if missing:
        raise ValueError(f"no question text for the slots {missing}: set them in questions")
    counts = stats if stats is not None else {}
    counts.update(trimmed_answers=0)
    ensure_qa_extensions()
    slot_questions = {slot: texts[slot] for slot in slots}
    return _read_restaurant8k(Path(path), nlp, slot_questions, counts)


def _read_squad(
    path: Path, nlp: Language, articles: Optional[Tuple[int, int]], stats: Dict[str, int]
) -> Iterator[Doc]:
    data = _load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ConversionError(str(path), 'expected a JSON object with a "data" list of articles')
    first, last = articles or (1, len(data["data"]))
    if last > len(data["data"]):
        raise ConversionError(
            str(path),
            f"asked for articles {first}-{last}, but the file has {len(data['data'])} articles",
        )
    seen: Dict[str, str] = {}  # question id -> where it was first read
    for number in range(first, last + 1):
        in_article = f"{path}:article {number}"
        article = _json_object(data["data"][number - 1], in_article)
        for index, paragraph in enumerate(_json_list(article, "paragraphs", in_article), start=1):
            where = f"{in_article}, paragraph {index}"
            paragraph = _json_object(paragraph, where)
            context = paragraph.get("context")
            if not isinstance(context, str):
                raise ConversionError(where, f'"context" must be a string, found {_show(context)}')
            questions: Dict[str, str] = {}
            gold: Dict[str, List[Dict[str, Any]]] = {}
            for item, qa in enumerate(_json_list(paragraph, "qas", where), start=1):
                qa = _json_object(qa, f"{where}, qas item {item}")
                key = _squad_id(qa, f"{where}, qas item {item}")
                at = f"{where}, question {key}"
                if key in seen:
                    raise ConversionError(at, f"question id {key!r} repeats {seen[key]}")
                seen[key] = at
                question = qa.get("question")
                if not isinstance(question, str) or not question.strip():
                    raise ConversionError(
                        at, f'"question" must be a non-empty string, found {_show(question)}'
                    )
                questions[key] = question
                gold[key] = _squad_answers(qa, context, at, stats)
            doc = nlp.make_doc(context)
            doc._.questions = questions
            doc._.gold_answers = gold
            yield doc


def _squad_id(qa: Dict[str, Any], where: str) -> str:
    # SQuAD's ids are strings; COVID-QA's are numbers.
    key = qa.get("id")
    if isinstance(key, bool) or not isinstance(key, (str, int)) or not str(key).strip():
        raise ConversionError(
            where, f'"id" must be a non-empty string or a number, found {_show(key)}'
        )
    return str(key)


def _squad_answers(
    qa: Dict[str, Any], context: str, where: str, stats: Dict[str, int]
) -> List[Dict[str, Any]]:
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        raise ConversionError(
            where, f'"is_impossible" must be true or false, found {_show(impossible)}'
        )
    answers = _json_list(qa, "answers", where)
    if impossible:
        if answers:
            raise ConversionError(
                where, f'"is_impossible" is true, but it has answers: {_show(answers)}'
            )
        return []
    if not answers:
        raise ConversionError(
            where, 'no answers; a question without an answer needs "is_impossible": true'
        )
    located: List[Dict[str, Any]] = []
    for answer in answers:
        answer = _json_object(answer, where)
        text, start = answer.get("text"), answer.get("answer_start")
        if not isinstance(text, str) or not text.strip():
            raise ConversionError(
                where, f'answer "text" must be a non-empty string, found {_show(text)}'
            )
        if isinstance(start, bool) or not isinstance(start, int):
            raise ConversionError(
                where, f'"answer_start" must be an integer, found {_show(start)} for {text!r}'
            )
        found = _nearest(context, text, start)
        if found is None:
            raise ConversionError(
                where, f"answer {_show(text)} (answer_start {start}) is not in the context"
            )
        stats["corrected_offsets"] += int(found != start)
        span = _trimmed_answer(context, found, found + len(text), stats)
        if not any(span["start"] == a["start"] and span["end"] == a["end"] for a in located):
            located.append(span)
    return located


def _nearest(context: str, text: str, start: int) -> Optional[int]:
    # Where `text` occurs in `context` nearest to `start` (the earlier of two
    # as near), or None.
    if context[start : start + len(text)] == text:
        return start
    best = None
    found = context.find(text)
    while found != -1:
        if best is None or abs(found - start) < abs(best - start):
            best = found
        if found > start:  # later occurrences are further away
            break
        found = context.find(text, found + 1)
    return best


def _trimmed_answer(text: str, start: int, end: int, stats: Dict[str, int]) -> Dict[str, Any]:
    # The answer at text[start:end] without surrounding whitespace, which no
    # token starts or ends with; the span holds more than whitespace.
    span = text[start:end]
    trimmed_start = start + len(span) - len(span.lstrip())
    trimmed_end = end - (len(span) - len(span.rstrip()))
    stats["trimmed_answers"] += int((trimmed_start, trimmed_end) != (start, end))
    return {"text": text[trimmed_start:trimmed_end], "start": trimmed_start, "end": trimmed_end}


def _read_restaurant8k(
    path: Path, nlp: Language, questions: Dict[str, str], stats: Dict[str, int]
) -> Iterator[Doc]:
    records = _load_json(path)
    if not isinstance(records, list):
        raise ConversionError(
            f"{path}:1", f"expected a JSON list of records, found {_json_type(records)}"
        )
    for number, record in enumerate(records, start=1):
        where = f"{path}:record {number}"
        record = _json_object(record, where)
        user_input = record.get("userInput")
        if not isinstance(user_input, dict):
            raise ConversionError(
                where, f'expected a "userInput" object, found {_show(user_input)}'
            )
        text = user_input.get("text", "")
        if not isinstance(text, str):
            raise ConversionError(where, f'"text" must be a string, found {_show(text)}')
        labels = record.get("labels", [])
        if not isinstance(labels, list):
            raise ConversionError(where, f'"labels" must be a list, found {_show(labels)}')
        gold: Dict[str, List[Dict[str, Any]]] = {slot: [] for slot in questions}
        for label in labels:
            slot, start, end = _restaurant8k_label(label, where)
            if slot not in questions:
                raise ConversionError(where, _unknown_slot_message(slot, list(questions)))
            if gold[slot]:
                raise ConversionError(where, f"slot {slot!r} is labelled twice")
            if start >= end:
                raise ConversionError(where, f"slot {slot!r} span {start}-{end} is empty")
            if start < 0 or end > len(text):
                raise ConversionError(
                    where,
                    f"slot {slot!r} span {start}-{end} is outside the text "
                    f"(0 to {len(text)} characters)",
                )
            if not text[start:end].strip():
                raise ConversionError(where, f"slot {slot!r} span {start}-{end} is only whitespace")
            gold[slot].append(_trimmed_answer(text, start, end, stats))
        doc = nlp.make_doc(text)
        doc._.questions = dict(questions)
        doc._.gold_answers = gold
        yield doc


def _restaurant8k_label(label: Any, where: str) -> Tuple[str, int, int]:
    if not isinstance(label, dict) or not isinstance(label.get("slot"), str):
        raise ConversionError(
            where, f'expected a label {{"slot": ..., "valueSpan": ...}}, found {_show(label)}'
        )
    slot = label["slot"]
    # Protobuf JSON leaves out zeros: a missing index is 0, a missing span 0-0.
    span = label.get("valueSpan", {})
    if not isinstance(span, dict):
        raise ConversionError(where, f'slot {slot!r}: "valueSpan" must be an object')
    start, end = span.get("startIndex", 0), span.get("endIndex", 0)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in (start, end)):
        raise ConversionError(
            where, f"slot {slot!r}: span indices must be integers, found {_show(span)}"
        )
    return slot, start, end


def _unknown_slot_message(slot: str, slots: Sequence[str]) -> str:
    close = difflib.get_close_matches(slot, slots, n=3)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return f"unknown slot {slot!r}; {hint}(slots: {', '.join(slots)})"


def _json_list(record: Dict[str, Any], field: str, where: str) -> List[Any]:
    value = record.get(field)
    if not isinstance(value, list):
        raise ConversionError(where, f"expected a {field!r} list, found {_show(value)}")
    return value


def _read_csv(path: Path, text_column: str, label_column: Optional[str]) -> Iterator[TextcatRow]:
    reader = csv.reader(io.StringIO(_read_text(path), newline=""), strict=True)
    # A record's first line: csv's `line_num` counts the lines read so far,
    # and a quoted field can span several lines.
    line = 1
    try:
        header = next(reader, None)
        if header is None:
            raise ConversionError(f"{path}:1", "empty file: expected a header row")
        text_index = _column_index(header, text_column, path, "text")
        label_column = label_column or _auto_label_column(header, f"{path}:1", "column")
        label_index = _column_index(header, label_column, path, "label")
        line = reader.line_num + 1
        for fields in reader:
            where = f"{path}:{line}"
            line = reader.line_num + 1
            if not fields:  # a blank line, not a record
                continue
            if len(fields) != len(header):
                raise ConversionError(
                    where, f"expected {len(header)} fields as in the header, found {len(fields)}"
                )
            labels = _split_labels(fields[label_index], label_column, where)
            yield TextcatRow(text=fields[text_index], labels=labels, source=where)
    except csv.Error as err:
        raise ConversionError(f"{path}:{line}", f"malformed CSV: {err}") from None


def _read_jsonl(path: Path, text_column: str, label_column: Optional[str]) -> Iterator[TextcatRow]:
    # Split on "\n" only: str.splitlines also splits on characters that JSON
    # strings may hold unescaped (e.g. "\u2028"), which would shift line numbers.
    for number, line in enumerate(_read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConversionError(where, f"invalid JSON: {err.msg} (column {err.colno})") from None
        _check_surrogates(record, where)
        record = _json_object(record, where)
        text = _json_text(record, text_column, where)
        field = label_column or _auto_label_column(list(record), where, "field")
        if field not in record:
            raise ConversionError(where, f"no {field!r} field; fields: {', '.join(record)}")
        labels = _json_labels(record[field], field, where)
        yield TextcatRow(text=text, labels=labels, source=where)


def _read_text(path: Path) -> str:
    # Decode the whole file at once, so a bad byte is reported on its own line.
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        bad = data[err.start : err.end]
        raise ConversionError(f"{path}:{line}", f"not UTF-8: byte {bad!r} ({err.reason})") from None


def _load_json(path: Path) -> Any:
    text = _read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConversionError(
            f"{path}:{err.lineno}", f"invalid JSON: {err.msg} (column {err.colno})"
        ) from None
    if _lone_surrogate(data) is not None:
        found = [m.start() for m in _LONE_SURROGATE_ESCAPES.finditer(text)]
        line = text.count("\n", 0, min(found)) + 1 if found else 1
        _check_surrogates(data, f"{path}:{line}")
    return data


# JSON escapes of a surrogate without its pair: a high one not followed by a low
# one, a low one not preceded by a high one.
_LONE_SURROGATE_ESCAPES = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def _lone_surrogate(value: Any) -> Optional[str]:
    """The first lone surrogate in the strings (keys included) of parsed JSON."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as err:
                return item[err.start]
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _check_surrogates(value: Any, where: str) -> None:
    # JSON may escape half of a UTF-16 pair ("\ud800") on its own; Python reads it
    # as a lone surrogate, which is no character: spaCy's tokenizer and .spacy files
    # cannot hold it (a UnicodeEncodeError deep inside spaCy otherwise).
    char = _lone_surrogate(value)
    if char is not None:
        raise ConversionError(
            where,
            f"a string holds a lone surrogate \\u{ord(char):04x} (half of a UTF-16 pair "
            "without the other half), which is not a character; fix or drop it",
        )


def _column_index(header: List[str], column: str, path: Path, kind: str) -> int:
    if column not in header:
        raise ConversionError(
            f"{path}:1", f"no {kind} column {column!r}; columns: {', '.join(header)}"
        )
    return header.index(column)


def _auto_label_column(names: List[str], where: str, kind: str) -> str:
    found = [name for name in AUTO_LABEL_COLUMNS if name in names]
    if len(found) != 1:
        problem = f"both a 'label' and a 'labels' {kind}" if found else f"no 'label' {kind}"
        raise ConversionError(
            where, f"{problem}; name the label {kind} explicitly; {kind}s: {', '.join(names)}"
        )
    return found[0]


def _split_labels(cell: str, column: str, where: str) -> Tuple[str, ...]:
    labels = tuple(part.strip() for part in cell.split(CSV_LABEL_SEPARATOR))
    if not all(labels):
        raise ConversionError(where, f"empty label in column {column!r}: {cell!r}")
    return labels


def _json_object(record: Any, where: str) -> Dict[str, Any]:
    if not isinstance(record, dict):
        raise ConversionError(where, f"expected a JSON object, found {_json_type(record)}")
    return record


def _json_text(record: Dict[str, Any], field: str, where: str) -> str:
    if field not in record:
        raise ConversionError(where, f"no text field {field!r}; fields: {', '.join(record)}")
    text = record[field]
    if not isinstance(text, str):
        raise ConversionError(where, f"{field!r} must be a string, found {_show(text)}")
    return text


def _json_labels(value: Any, field: str, where: str) -> Tuple[str, ...]:
    labels: List[Any] = [value] if isinstance(value, str) else value
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise ConversionError(
            where, f"{field!r} must be a string or a list of strings, found {_show(value)}"
        )
    if not all(label.strip() for label in labels):
        raise ConversionError(where, f"empty label in {field!r}: {_show(value)}")
    return tuple(labels)


def _unknown_label_message(label: str, labels: Sequence[str]) -> str:
    close = difflib.get_close_matches(label, labels, n=3)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    few = ", ".join(repr(known) for known in list(labels)[:5])
    more = ", ..." if len(labels) > 5 else ""
    return f"unknown label {label!r}; {hint}({len(labels)} known labels: {few}{more})"


def _find_ontology(path: Path) -> Path:
    if path.is_file():
        return path
    for folder in (path, path.parent):
        if (folder / "ontology.json").is_file():
            return folder / "ontology.json"
    raise ConversionError(str(path), "no ontology.json here or in the parent folder")


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    return "null" if value is None else names.get(type(value), "a number")


def _show(value: Any, limit: int = 60) -> str:
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."
