"""Do window edges change bert_ner's entities? Long docs vs. their sentences.

    python bench/ner_windows.py PIPELINE [--words 5000] [--sentences none|gold|sentencizer]
        [--context doc|sentence|auto] [--limit N] [--output bench/results/ner_windows.json]

CoNLL-2003 test sentences are joined, in order, by a space (or `--joiner newline`,
a line break) into documents of at least `--words` words (each is split into many
encoder windows). Every sentence is
also annotated alone. The long documents get no sentence boundaries (like raw
text), the sentences' own ones (`gold`), or spaCy's rule-based `sentencizer`'s;
`--context` overrides the pipeline encoder's context (`doc`: windows over the
whole text; `sentence`: each sentence encoded apart; `auto`: as the training docs
were, see docs/components.md). `--limit` keeps the first N sentences. An entity "agrees" when
the long document has the same label at the same characters. Also checks that
every entity's tokens carry a valid tag sequence (B/I with one label, never an
orphan I).
"""

import json
import platform
import time
from pathlib import Path
from typing import List, Literal, Optional, Set, Tuple

import spacy
import typer
from spacy.tokens import Doc

from spacy_bert_pipes.convert import read_conll_ner

CONLL = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "conll2003"
Entity = Tuple[int, int, str]


def join(
    docs: List[Doc], vocab: spacy.vocab.Vocab, keep_sentences: bool, joiner: str = " "
) -> Tuple[Doc, List[int]]:
    """One doc made of several, with the character offset of each part, joined by
    a space or a line break. Without `keep_sentences` it has no sentence
    boundaries, like raw text."""
    words: List[str] = []
    spaces: List[bool] = []
    starts: List[bool] = []
    offsets = []
    position = 0
    for i, doc in enumerate(docs):
        if i and joiner == "\n":  # a line break is a token of its own in spaCy
            words.append("\n")
            spaces.append(False)
            starts.append(False)
        offsets.append(position)
        words.extend(t.text for t in doc)
        spaces.extend([True] * (len(doc) - 1) + [joiner == " "])
        starts.extend([True] + [False] * (len(doc) - 1))
        position += len(doc.text) + 1
    spaces[-1] = False
    if keep_sentences:
        return Doc(vocab, words=words, spaces=spaces, sent_starts=starts), offsets
    return Doc(vocab, words=words, spaces=spaces), offsets


def entities(doc: Doc, shift: int = 0) -> Set[Entity]:
    return {(e.start_char + shift, e.end_char + shift, e.label_) for e in doc.ents}


def tags_valid(doc: Doc) -> bool:
    """Token-level IOB from doc.ents: every I continues an entity of its label."""
    previous = "O"
    for token in doc:
        if token.ent_iob_ == "I" and (previous == "O" or previous != token.ent_type_):
            return False
        previous = token.ent_type_ if token.ent_iob_ in ("B", "I") else "O"
    return True


def main(
    pipeline: Path = typer.Argument(..., help="A trained pipeline with bert_ner writing doc.ents"),
    words: int = typer.Option(5000, help="Minimum words per long document"),
    sentences_from: Literal["none", "gold", "sentencizer"] = typer.Option(
        "none",
        "--sentences",
        help="Sentence boundaries of the long documents: none, the CoNLL sentences' "
        "(gold), or spaCy's rule-based sentencizer's",
    ),
    context: Optional[Literal["doc", "sentence", "auto"]] = typer.Option(
        None, help="Override the encoder's context (default: as the pipeline was trained)"
    ),
    limit: int = typer.Option(0, help="Use only the first N sentences (0: all)"),
    joiner: Literal["space", "newline"] = typer.Option(
        "space", help="What joins the sentences of a long document"
    ),
    data: Path = typer.Option(CONLL / "test.txt", help="CoNLL-2003 file"),
    output: Path = typer.Option(Path("bench/results/ner_windows.json"), help="JSON results"),
) -> None:
    nlp = spacy.load(pipeline)
    encoder = nlp.get_pipe("bert_ner").model.get_ref("encoder")
    if context is not None:
        encoder.attrs["context"] = context
    sentencizer = spacy.blank("en").add_pipe("sentencizer")
    sentences = list(read_conll_ner(data, nlp.vocab, n_sents=1))
    if limit:
        sentences = sentences[:limit]
    groups: List[List[Doc]] = [[]]
    for sentence in sentences:
        if sum(len(d) for d in groups[-1]) >= words:
            groups.append([])
        groups[-1].append(sentence)
    start = time.perf_counter()
    alone = list(nlp.pipe(sentences, batch_size=64))
    seconds_alone = time.perf_counter() - start
    n_alone = n_agree = n_long = 0
    valid = True
    index = 0
    start = time.perf_counter()
    per_doc = []
    for group in groups:
        separator = "\n" if joiner == "newline" else " "
        long_doc, offsets = join(group, nlp.vocab, sentences_from == "gold", separator)
        if sentences_from == "sentencizer":
            long_doc = sentencizer(long_doc)
        long_doc = nlp(long_doc)
        valid &= tags_valid(long_doc)
        expected: Set[Entity] = set()
        for shift in offsets:
            expected |= entities(alone[index], shift)
            valid &= tags_valid(alone[index])
            index += 1
        found = entities(long_doc)
        per_doc.append(
            {"words": len(long_doc), "entities": len(expected), "agree": len(found & expected)}
        )
        n_alone += len(expected)
        n_long += len(found)
        n_agree += len(found & expected)
    seconds_long = time.perf_counter() - start
    result = {
        "command": f"python bench/ner_windows.py {pipeline} --words {words} "
        f"--sentences {sentences_from}"
        + (f" --context {context}" if context else "")
        + (f" --limit {limit}" if limit else "")
        + (f" --joiner {joiner}" if joiner != "space" else ""),
        "long_doc_sentences": sentences_from,
        "joiner": joiner,
        "context": encoder.attrs.get("context", "doc"),
        "learned_context": encoder.attrs.get("learned_context"),
        "machine": f"{platform.machine()} {platform.processor()}, {platform.node()}",
        "pipeline": str(pipeline),
        "encoder_max_length": encoder.attrs.get("max_length"),
        "sentences": len(sentences),
        "long_docs": len(groups),
        "entities_alone": n_alone,
        "entities_long": n_long,
        "agreeing": n_agree,
        "agreement_of_alone": n_agree / max(n_alone, 1),
        "agreement_of_long": n_agree / max(n_long, 1),
        "all_tag_sequences_valid": bool(valid),
        "seconds_alone": round(seconds_alone, 1),
        "seconds_long": round(seconds_long, 1),
        "per_doc": per_doc,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    typer.echo(
        f"{len(groups)} docs of >= {words} words from {len(sentences)} sentences: "
        f"{n_agree}/{n_alone} entities agree ({result['agreement_of_alone']:.2%}); "
        f"long docs found {n_long}; valid tags: {valid}"
    )


if __name__ == "__main__":
    typer.run(main)
