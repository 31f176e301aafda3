"""Question answering: SQuAD JSON (v1.1, v2.0 and others in its format) and
Restaurant-8k span extraction. One Doc per context, its questions in
`doc._.questions` and its reference answers in `doc._.gold_answers`."""

import difflib
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from spacy.language import Language
from spacy.tokens import Doc

from ..io.errors import ConversionError
from ..pipeline.common import ensure_qa_extensions
from .fields import json_list_records, json_object, load_json, show


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
    data = load_json(path)
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
        article = json_object(data["data"][number - 1], in_article)
        for index, paragraph in enumerate(_json_list(article, "paragraphs", in_article), start=1):
            where = f"{in_article}, paragraph {index}"
            paragraph = json_object(paragraph, where)
            context = paragraph.get("context")
            if not isinstance(context, str):
                raise ConversionError(where, f'"context" must be a string, found {show(context)}')
            questions: Dict[str, str] = {}
            gold: Dict[str, List[Dict[str, Any]]] = {}
            for item, qa in enumerate(_json_list(paragraph, "qas", where), start=1):
                qa = json_object(qa, f"{where}, qas item {item}")
                key = _squad_id(qa, f"{where}, qas item {item}")
                at = f"{where}, question {key}"
                if key in seen:
                    raise ConversionError(at, f"question id {key!r} repeats {seen[key]}")
                seen[key] = at
                question = qa.get("question")
                if not isinstance(question, str) or not question.strip():
                    raise ConversionError(
                        at, f'"question" must be a non-empty string, found {show(question)}'
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
            where, f'"id" must be a non-empty string or a number, found {show(key)}'
        )
    return str(key)


def _squad_answers(
    qa: Dict[str, Any], context: str, where: str, stats: Dict[str, int]
) -> List[Dict[str, Any]]:
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        raise ConversionError(
            where, f'"is_impossible" must be true or false, found {show(impossible)}'
        )
    answers = _json_list(qa, "answers", where)
    if impossible:
        if answers:
            raise ConversionError(
                where, f'"is_impossible" is true, but it has answers: {show(answers)}'
            )
        return []
    if not answers:
        raise ConversionError(
            where, 'no answers; a question without an answer needs "is_impossible": true'
        )
    located: List[Dict[str, Any]] = []
    for answer in answers:
        answer = json_object(answer, where)
        text, start = answer.get("text"), answer.get("answer_start")
        if not isinstance(text, str) or not text.strip():
            raise ConversionError(
                where, f'answer "text" must be a non-empty string, found {show(text)}'
            )
        if isinstance(start, bool) or not isinstance(start, int):
            raise ConversionError(
                where, f'"answer_start" must be an integer, found {show(start)} for {text!r}'
            )
        found = _nearest(context, text, start)
        if found is None:
            raise ConversionError(
                where, f"answer {show(text)} (answer_start {start}) is not in the context"
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
    for where, record in json_list_records(path):
        user_input = record.get("userInput")
        if not isinstance(user_input, dict):
            raise ConversionError(where, f'expected a "userInput" object, found {show(user_input)}')
        text = user_input.get("text", "")
        if not isinstance(text, str):
            raise ConversionError(where, f'"text" must be a string, found {show(text)}')
        labels = record.get("labels", [])
        if not isinstance(labels, list):
            raise ConversionError(where, f'"labels" must be a list, found {show(labels)}')
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
            where, f'expected a label {{"slot": ..., "valueSpan": ...}}, found {show(label)}'
        )
    slot = label["slot"]
    # Protobuf JSON leaves out zeros: a missing index is 0, a missing span 0-0.
    span = label.get("valueSpan", {})
    if not isinstance(span, dict):
        raise ConversionError(where, f'slot {slot!r}: "valueSpan" must be an object')
    start, end = span.get("startIndex", 0), span.get("endIndex", 0)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in (start, end)):
        raise ConversionError(
            where, f"slot {slot!r}: span indices must be integers, found {show(span)}"
        )
    return slot, start, end


def _unknown_slot_message(slot: str, slots: Sequence[str]) -> str:
    close = difflib.get_close_matches(slot, slots, n=3)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return f"unknown slot {slot!r}; {hint}(slots: {', '.join(slots)})"


def _json_list(record: Dict[str, Any], field: str, where: str) -> List[Any]:
    value = record.get(field)
    if not isinstance(value, list):
        raise ConversionError(where, f"expected a {field!r} list, found {show(value)}")
    return value
