"""Property-based tests (Hypothesis) of the input readers and the output
round trip: arbitrary Unicode (combining marks, right-to-left, control and
zero-width characters, NUL, long texts; lone surrogates in JSONL escapes;
invalid UTF-8 bytes in CSV, JSONL, Parquet and .txt files) never crashes a
reader or `annotate`, and never loses a row: every input row comes back as
its text, or as an error row naming its line (or file, or Parquet row)."""

import csv
import io
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import spacy
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from spacy.tokens import Span

from spacy_bert_pipes.annotate import AnnotateOptions, prepare_run, run_annotation
from spacy_bert_pipes.io.output import doc_to_row, write_rows
from spacy_bert_pipes.io.output_readers import read_output_rows
from spacy_bert_pipes.io.readers import read_input

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# Characters that have broken text handling elsewhere: combining marks,
# right-to-left text and marks, zero-width and BOM, controls, NUL, line and
# paragraph separators, CSV's own quote, comma and line ends.
SPECIAL = (
    "\u0301\u0327\u05d0\u05d1\u0627\u200f\u202e\u200b\u200d\ufeff"
    "\x00\x01\x1b\x7f\x85\u2028\u2029\r\n\t\",'\\ "
)
chars = st.characters(codec="utf-8")  # any code point but the surrogates
texts = st.one_of(
    st.text(st.one_of(chars, st.sampled_from(SPECIAL)), max_size=40),
    st.text(st.sampled_from(SPECIAL), max_size=10),
    st.builds(lambda c, n: c * n, st.sampled_from("a\u05d0\x00 \u0301"), st.integers(0, 200_000)),
)
surrogate_texts = st.builds(
    lambda a, s, b: a + s + b, texts, st.characters(categories=["Cs"]), texts
)
NL = b"\n"
INVALID_BYTES = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe2\x82", b"\x80abc"]


@st.composite
def rows(draw: Any, surrogates: bool = False) -> List[Tuple[str, bytes, Optional[str]]]:
    """(text, its UTF-8 bytes maybe with invalid bytes inserted, the text if
    the bytes are valid else None) per row."""
    found = []
    for _ in range(draw(st.integers(1, 6))):
        text = draw(surrogate_texts if surrogates and draw(st.booleans()) else texts)
        raw = text.encode("utf8", "surrogatepass")
        if draw(st.integers(0, 3)) == 0:
            cut = len(text[: draw(st.integers(0, len(text)))].encode("utf8", "surrogatepass"))
            raw = raw[:cut] + draw(st.sampled_from(INVALID_BYTES)) + raw[cut:]
        try:
            valid: Optional[str] = raw.decode("utf8")
        except UnicodeDecodeError:
            valid = None
        found.append((text, raw, valid))
    return found


def check_every_row(found: List[Any], expected: List[Optional[str]], sources: List[str]) -> None:
    """One row per input row, in order: its text if readable, else an error
    row naming where it is."""
    assert [row.number for row in found] == list(range(len(expected)))
    for row, text, source in zip(found, expected, sources):
        assert row.source == source
        if text is None:
            assert row.error and row.text is None, row
        else:
            assert (row.error, row.text) == (None, text)


@SETTINGS
@given(rows(), st.booleans())
@example([("a\x00b", b"a\x00b", "a\x00b"), ("x\r\ny", b"x\r\ny", "x\r\ny")], False)
@example([("\u202e\u05d0", b"\xff\xe2\x80\xae\xd7\x90", None)], True)
def test_csv(tmp_path: Path, given_rows: List[Any], crlf: bool) -> None:
    path = tmp_path / "in.csv"
    data, sources = io.BytesIO(), []
    data.write(b"id,text" + (b"\r\n" if crlf else b"\n"))
    for i, (_, raw, _) in enumerate(given_rows):
        sources.append(f"in.csv:{data.getvalue().count(NL) + 1}")
        quoted = b'"' + raw.replace(b'"', b'""') + b'"'
        data.write(f"r{i},".encode() + quoted + (b"\r\n" if crlf else b"\n"))
    path.write_bytes(data.getvalue())
    check_every_row(list(read_input(path)), [valid for _, _, valid in given_rows], sources)


@SETTINGS
@given(rows(surrogates=True), st.booleans())
@example([("lone \ud800", b"lone \xed\xa0\x80", None)], True)
def test_jsonl(tmp_path: Path, given_rows: List[Any], ascii_escapes: bool) -> None:
    """Text written with JSON escapes (lone surrogates as \\udXXX: an error
    row, no output can hold them) or as raw bytes (maybe invalid)."""
    lines, expected = [], []
    for i, (text, raw, valid) in enumerate(given_rows):
        if ascii_escapes:
            lines.append(json.dumps({"id": f"r{i}", "text": text}).encode())
            expected.append(None if any(0xD800 <= ord(c) < 0xE000 for c in text) else text)
        else:
            body = json.dumps(raw.decode("utf8", "surrogateescape"), ensure_ascii=False)
            lines.append(
                b'{"id": "r%d", "text": ' % i + body.encode("utf8", "surrogateescape") + b"}"
            )
            expected.append(valid)  # raw bytes: a lone surrogate is invalid UTF-8

    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    sources = [f"in.jsonl:{i + 1}" for i in range(len(lines))]
    check_every_row(list(read_input(path)), expected, sources)


@SETTINGS
@given(rows())
def test_parquet(tmp_path: Path, given_rows: List[Any]) -> None:
    """A binary text column may hold invalid UTF-8; a string column cannot."""
    path = tmp_path / "in.parquet"
    table = pa.table(
        {
            "id": pa.array([f"r{i}" for i in range(len(given_rows))]),
            "text": pa.array([raw for _, raw, _ in given_rows], pa.binary()),
        }
    )
    pq.write_table(table, path, row_group_size=2)
    sources = [f"in.parquet:row {i}" for i in range(len(given_rows))]
    check_every_row(list(read_input(path)), [valid for _, _, valid in given_rows], sources)


@SETTINGS
@given(rows())
def test_txt_folder(tmp_path: Path, given_rows: List[Any]) -> None:
    folder = tmp_path / "docs"
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    expected, sources = [], []
    for i, (_, raw, valid) in enumerate(given_rows):
        (folder / f"{i:03d}.txt").write_bytes(raw)
        # A leading byte order mark is the file's encoding, not its text.
        expected.append(valid[1:] if valid and valid.startswith("\ufeff") else valid)
        source = f"docs/{i:03d}.txt"
        if valid is None:
            try:
                raw.decode("utf8")
            except UnicodeDecodeError as err:
                source += f":{raw.count(NL, 0, err.start) + 1}"
        sources.append(source)
    check_every_row(list(read_input(folder)), expected, sources)


@pytest.fixture(scope="module")
def blank() -> Any:
    return spacy.blank("xx")


@SETTINGS
@given(
    st.lists(st.tuples(texts, texts), min_size=1, max_size=5),
    st.sampled_from(["jsonl", "csv", "parquet"]),
)
@example([("\u0301", "\x00"), ("", "\ud7ff\ufeff")], "csv")
def test_output_round_trip(
    tmp_path: Path, blank: Any, records: List[Tuple[str, str]], fmt: str
) -> None:
    """Output rows with arbitrary ids and entity texts read back equal."""
    rows_out: List[Dict[str, Any]] = []
    for i, (doc_id, text) in enumerate(records):
        doc = blank(text)
        if len(doc):
            doc.ents = [Span(doc, 0, 1, label="X\u05d0")]
        rows_out.append(doc_to_row(doc, f"{i}{doc_id}"))
    path = tmp_path / f"out.{fmt}"
    write_rows(path, rows_out, fmt)
    if fmt == "csv":  # a part has no header; OUTPUT does
        path.write_bytes(b"id,cats,entities,answers,route,empty_text\r\n" + path.read_bytes())
    assert [row for _, row in read_output_rows(path)] == rows_out


@SETTINGS
@given(rows(), st.sampled_from(["csv", "jsonl", "parquet", "txt"]), st.integers(1, 3))
def test_annotate_loses_no_row(
    tmp_path: Path, blank: Any, given_rows: List[Any], fmt: str, chunk_size: int
) -> None:
    """`annotate` end to end: input rows = output rows + error rows, and
    each row is in exactly one of them, the error rows in input order."""
    folder = tmp_path / f"run-{fmt}-{chunk_size}-{len(given_rows)}"
    n = len(given_rows)
    ids = [f"r{i}" for i in range(n)]
    if fmt == "txt":
        path = folder / "docs"
        path.mkdir(parents=True, exist_ok=True)
        for old in path.iterdir():
            old.unlink()
        for i, (_, raw, _) in enumerate(given_rows):
            (path / f"r{i}").with_suffix(".txt").write_bytes(raw)
        ids = [f"r{i}.txt" for i in range(n)]
    elif fmt == "parquet":
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "in.parquet"
        texts_ = pa.array([raw for _, raw, _ in given_rows], pa.binary())
        pq.write_table(pa.table({"id": ids, "text": texts_}), path)
    else:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"in.{fmt}"
        body = io.StringIO()
        if fmt == "csv":
            writer = csv.writer(body)
            writer.writerow(["id", "text"])
            writer.writerows(
                (i, raw.decode("utf8", "surrogateescape"))
                for i, (_, raw, _) in zip(ids, given_rows)
            )
        else:
            for i, (_, raw, _) in zip(ids, given_rows):
                body.write(
                    json.dumps(
                        {"id": i, "text": raw.decode("utf8", "surrogateescape")}, ensure_ascii=False
                    )
                    + "\n"
                )
        path.write_bytes(body.getvalue().encode("utf8", "surrogateescape"))
    output = folder / "out.jsonl"
    options = AnnotateOptions(chunk_size=chunk_size, overwrite=True)
    summary = run_annotation(prepare_run("blank", path, output, options), blank)
    annotated = [row["id"] for _, row in read_output_rows(output)]
    errors = [
        json.loads(line)
        for line in output.with_name("out.jsonl.errors.jsonl").read_text("utf8").splitlines()
    ]
    assert summary.input_rows == n == len(annotated) + len(errors)
    assert sorted(annotated + [e["id"] for e in errors]) == sorted(ids)
    assert [e["row"] for e in errors] == sorted(e["row"] for e in errors)
    bad = [i for i, (_, _, valid) in enumerate(given_rows) if valid is None]
    assert [e["row"] for e in errors] == bad
    for error in errors:
        assert error["source"] and error["reason"], error
