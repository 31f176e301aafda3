"""Properties of the converters (convert.py): arbitrary Unicode written into each
input format converts without a crash, without losing a row, and with every
entity or answer covering exactly its characters."""

import csv
import json
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import spacy
from hypothesis import example, given
from hypothesis import strategies as st
from spacy.tokens import DocBin
from strategies import NASTY, PROPERTY, texts

from spacy_bert_pipes.convert import (
    ConversionError,
    read_conll_ner,
    read_entity_jsonl,
    read_squad,
    read_textcat_rows,
    rows_to_docs,
    write_docbin,
)

NLP = spacy.blank("en")


def has_surrogate(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


def as_json_reads(text: str) -> str:
    """The text as JSON gives it back: an escaped high and low surrogate side by
    side ("\\ud800\\udc00") are read as the one character they encode."""
    return str(json.loads(json.dumps(text)))


# Labels: arbitrary text that is a valid label (non-empty, no surrounding
# whitespace, no "|", which separates CSV labels).
labels = texts(max_pieces=4).filter(lambda s: s.strip() == s and s and "|" not in s)
label_sets = st.lists(labels, min_size=1, max_size=4, unique=True)


def round_trip_docbin(docs: List[Any]) -> List[Any]:
    with tempfile.TemporaryDirectory() as tmp:
        n = write_docbin(docs, Path(tmp) / "out.spacy")
        assert n == len(docs)
        return list(DocBin().from_disk(Path(tmp) / "out.spacy").get_docs(NLP.vocab))


@st.composite
def textcat_rows(
    draw: Any, surrogates: bool
) -> Tuple[List[str], List[Tuple[str, Tuple[str, ...]]]]:
    label_set = draw(label_sets)
    rows = draw(
        st.lists(
            st.tuples(
                texts(surrogates=surrogates),
                st.lists(st.sampled_from(label_set), min_size=1, max_size=3, unique=True).map(
                    tuple
                ),
            ),
            max_size=6,
        )
    )
    return label_set, rows


@PROPERTY
@given(case=textcat_rows(surrogates=False))
@example(case=(["a"], [("\r", ("a",)), ("", ("a",)), ("\u2028x\x00\r\n", ("a",))]))
def test_csv_rows_convert_one_doc_each(case: Any) -> None:
    label_set, rows = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.csv"
        with path.open("w", encoding="utf8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "labels"])
            for text, row_labels in rows:
                writer.writerow([text, "|".join(row_labels)])
        read = list(read_textcat_rows(path))
    assert [(r.text, r.labels) for r in read] == rows
    docs = round_trip_docbin(list(rows_to_docs(NLP, read, label_set, exclusive=False)))
    assert [d.text for d in docs] == [text for text, _ in rows]
    for doc, (_, row_labels) in zip(docs, rows):
        assert doc.cats == {lb: float(lb in row_labels) for lb in label_set}


@PROPERTY
@given(case=textcat_rows(surrogates=True), ensure_ascii=st.booleans())
# found by Hypothesis: a lone surrogate crashed spaCy's tokenizer (UnicodeEncodeError)
@example(case=(["\u0301"], [("ok", ("\u0301",)), ("\ud800", ("\u0301",))]), ensure_ascii=True)
def test_jsonl_rows_convert_one_doc_each_or_name_the_line(case: Any, ensure_ascii: bool) -> None:
    label_set, rows = case
    if not ensure_ascii:  # raw UTF-8 cannot hold a lone surrogate
        rows = [(t, ls) for t, ls in rows if not has_surrogate(t)]
    rows = [(as_json_reads(t), ls) for t, ls in rows]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.jsonl"
        lines = [
            json.dumps({"text": t, "labels": list(ls)}, ensure_ascii=ensure_ascii) for t, ls in rows
        ]
        path.write_text("\n".join(lines), encoding="utf8")
        bad = [i for i, (t, _) in enumerate(rows, start=1) if has_surrogate(t)]
        try:
            read = list(read_textcat_rows(path))
            docs = round_trip_docbin(list(rows_to_docs(NLP, read, label_set, exclusive=False)))
        except ConversionError as err:
            # a lone surrogate is not text: an error naming its line, the first such
            assert bad and err.location == f"{path}:{bad[0]}", (err, bad)
            return
    assert not bad
    assert [d.text for d in docs] == [t for t, _ in rows]
    assert [r.labels for r in read] == [ls for _, ls in rows]


@st.composite
def entity_records(draw: Any) -> Tuple[str, List[Tuple[int, int, str]]]:
    """A text and non-overlapping entities on its token boundaries."""
    text = draw(texts())
    doc = NLP.make_doc(text)
    bounds = sorted(draw(st.sets(st.integers(0, len(doc)), max_size=8)))
    entities = []
    for start, end in zip(bounds[::2], bounds[1::2]):
        if end > start:
            span = doc[start:end]
            entities.append((span.start_char, span.end_char, draw(labels)))
    return text, entities


@PROPERTY
@given(records=st.lists(entity_records(), max_size=4), spans_style=st.booleans())
@example(
    records=[("new york \u200b paris\u0301", [(0, 8, "LOC"), (11, 17, "LOC")])], spans_style=False
)
def test_entity_jsonl_entities_cover_their_characters(
    records: List[Tuple[str, List[Tuple[int, int, str]]]], spans_style: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ents.jsonl"
        lines = []
        for text, entities in records:
            if spans_style:
                record: Dict[str, Any] = {
                    "text": text,
                    "spans": [{"start": s, "end": e, "label": lb} for s, e, lb in entities],
                }
            else:
                record = {"text": text, "entities": [list(e) for e in entities]}
            lines.append(json.dumps(record))
        path.write_text("\n".join(lines), encoding="utf8")
        docs = round_trip_docbin(list(read_entity_jsonl(path, NLP)))
    assert len(docs) == len(records)
    for doc, (text, entities) in zip(docs, records):
        assert doc.text == text
        assert [(e.start_char, e.end_char, e.label_) for e in doc.ents] == entities
        for ent in doc.ents:
            assert ent.text == text[ent.start_char : ent.end_char]


conll_token = (
    st.lists(
        st.one_of(st.sampled_from(NASTY), st.characters(codec="utf-8")), min_size=1, max_size=5
    )
    .map(lambda parts: "".join(c for c in "".join(parts) if not c.isspace()))
    .filter(lambda t: t and t != "-DOCSTART-")
)
conll_label = conll_token.filter(lambda t: not t.startswith("\ufeff"))


@st.composite
def conll_sentences(draw: Any) -> List[List[Tuple[str, str]]]:
    label_set = draw(st.lists(conll_label, min_size=1, max_size=3, unique=True))
    sentences = []
    for _ in range(draw(st.integers(1, 4))):
        sentence = []
        previous = "O"
        for _ in range(draw(st.integers(1, 8))):
            token = draw(conll_token)
            choice = draw(st.sampled_from(["O", "B", "I"]))
            if choice == "I" and previous == "O":
                choice = "B"  # IOB2: an entity starts with B-
            label = previous[2:] if choice == "I" else draw(st.sampled_from(label_set))
            tag = "O" if choice == "O" else f"{choice}-{label}"
            sentence.append((token, tag))
            previous = tag
        sentences.append(sentence)
    # the file's first character would be read as a byte order mark
    first_token, first_tag = sentences[0][0]
    sentences[0][0] = (first_token.lstrip("\ufeff") or "x", first_tag)
    return sentences


def iob2_entities(sentences: List[List[Tuple[str, str]]]) -> List[Tuple[int, int, str]]:
    out: List[Tuple[int, int, str]] = []
    i = 0
    for sentence in sentences:
        for token_tag in sentence:
            tag = token_tag[1]
            if tag.startswith("B-"):
                out.append((i, i + 1, tag[2:]))
            elif tag.startswith("I-"):
                out[-1] = (out[-1][0], i + 1, out[-1][2])
            i += 1
    return out


@PROPERTY
@given(sentences=conll_sentences(), columns=st.integers(2, 4))
def test_conll_keeps_every_token_and_entity(
    sentences: List[List[Tuple[str, str]]], columns: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.conll"
        blocks = [
            "\n".join(" ".join([tok] + ["X"] * (columns - 2) + [tag]) for tok, tag in sentence)
            for sentence in sentences
        ]
        path.write_text("\n\n".join(blocks) + "\n", encoding="utf8")
        docs = round_trip_docbin(list(read_conll_ner(path, NLP.vocab)))
    assert len(docs) == 1
    doc = docs[0]
    assert [t.text for t in doc] == [tok for sentence in sentences for tok, _ in sentence]
    assert [(e.start, e.end, e.label_) for e in doc.ents] == iob2_entities(sentences)
    for ent in doc.ents:
        assert ent.text == doc.text[ent.start_char : ent.end_char]
    assert sum(1 for _ in doc.sents) == len(sentences)


@st.composite
def squad_paragraphs(draw: Any) -> Tuple[str, List[Tuple[str, int, int]]]:
    """A context and answers (text, start, end) at places that hold more than whitespace."""
    context = draw(texts(surrogates=True).map(as_json_reads).filter(lambda t: t.strip()))
    answers = []
    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, len(context) - 1))
        end = draw(st.integers(start + 1, len(context)))
        if context[start:end].strip():
            answers.append((context[start:end], start, end))
    return context, answers


@PROPERTY
@given(paragraphs=st.lists(squad_paragraphs(), min_size=1, max_size=3))
def test_squad_answers_cover_their_characters(
    paragraphs: List[Tuple[str, List[Tuple[str, int, int]]]],
) -> None:
    data: Dict[str, Any] = {"data": [{"paragraphs": []}]}
    n = 0
    for context, answers in paragraphs:
        qas = []
        for text, start, _ in answers:
            n += 1
            qas.append(
                {
                    "id": str(n),
                    "question": f"q{n}?",
                    "answers": [{"text": text, "answer_start": start}],
                }
            )
        data["data"][0]["paragraphs"].append({"context": context, "qas": qas})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "squad.json"
        # one context a line, so that an error's line number says which
        path.write_text(json.dumps(data, indent=1), encoding="utf8")
        lines = path.read_text(encoding="utf8").split("\n")
        try:
            docs = list(read_squad(path, NLP))
        except ConversionError as err:
            # a lone surrogate is not text: an error naming a line that holds one
            assert any(has_surrogate(context) for context, _ in paragraphs)
            location, line = err.location.rsplit(":", 1)
            assert location == str(path)
            assert "\\ud" in lines[int(line) - 1]
            return
    assert not any(has_surrogate(context) for context, _ in paragraphs)
    assert len(docs) == len(paragraphs)
    for doc, (context, answers) in zip(docs, paragraphs):
        assert doc.text == context
        assert len(doc._.gold_answers) == len(answers)
        for gold in doc._.gold_answers.values():
            (answer,) = gold
            assert answer["text"] == context[answer["start"] : answer["end"]]
            assert answer["text"] == answer["text"].strip() and answer["text"]


def test_entity_jsonl_lone_surrogate_names_its_line() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ents.jsonl"
        records = [
            {"text": "paris", "entities": [[0, 5, "LOC"]]},
            {"text": "x\ud800", "entities": []},
        ]
        path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf8")
        try:
            list(read_entity_jsonl(path, NLP))
        except ConversionError as err:
            assert err.location == f"{path}:2"
            assert "lone surrogate \\ud800" in err.message
        else:
            raise AssertionError("a lone surrogate was converted")
