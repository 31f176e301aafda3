"""The reader spacy-bert-pipes.MultiCorpus.v1 on small DocBins: how it samples,
reads in order, tags sources, repeats itself for a seed, and fails."""

import subprocess
import sys
from collections import Counter
from importlib.metadata import entry_points
from pathlib import Path
from typing import Dict, List

import pytest
import spacy
from spacy.language import Language
from spacy.tokens import Doc, DocBin, Span
from spacy.training import Example
from spacy.util import load_config, registry
from thinc.api import ConfigValidationError

from spacy_bert_pipes.multitask import MultiCorpus

READER = "spacy-bert-pipes.MultiCorpus.v1"


@pytest.fixture(scope="module")
def nlp() -> Language:
    return spacy.blank("en")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory, nlp: Language) -> Dict[str, str]:
    """Source A: 100 docs with doc.cats; source B: 10 docs with an entity each;
    source C: a folder of two .spacy files with 5 docs each."""
    root = tmp_path_factory.mktemp("corpora")
    docs_a = []
    for i in range(100):
        doc = nlp.make_doc(f"query number a{i} about money")
        doc.cats = {"MONEY": 1.0, "OTHER": 0.0}
        docs_a.append(doc)
    docs_b = []
    for i in range(10):
        doc = nlp.make_doc(f"Ada b{i} lives in Paris")
        doc.ents = [Span(doc, 0, 1, label="PERSON"), Span(doc, 4, 5, label="GPE")]
        docs_b.append(doc)
    DocBin(docs=docs_a).to_disk(root / "a.spacy")
    DocBin(docs=docs_b).to_disk(root / "b.spacy")
    (root / "c").mkdir()
    for part in range(2):
        docs_c = [nlp.make_doc(f"text c{part * 5 + i}") for i in range(5)]
        DocBin(docs=docs_c).to_disk(root / "c" / f"part{part}.spacy")
    DocBin().to_disk(root / "empty.spacy")
    return {
        "A": str(root / "a.spacy"),
        "B": str(root / "b.spacy"),
        "C": str(root / "c"),
        "empty": str(root / "empty.spacy"),
    }


def read(corpus: MultiCorpus, nlp: Language) -> List[Example]:
    return list(corpus(nlp))


def sources_of(examples: List[Example]) -> Counter:
    return Counter(eg.reference._.bert_pipes_source for eg in examples)


def mark(eg: Example) -> str:
    """The token that tells a doc apart from the others of its source (a0, b3, c7)."""
    return eg.reference[2].text if eg.reference[0].text == "query" else eg.reference[1].text


def test_sampled_proportions_follow_size_to_the_alpha(
    corpora: Dict[str, str], nlp: Language
) -> None:
    sources = {"A": corpora["A"], "B": corpora["B"]}
    expected = 10**0.75 / (100**0.75 + 10**0.75)  # 0.151
    corpus = MultiCorpus(sources, alpha=0.75, seed=1)
    for _ in range(3):
        examples = read(corpus, nlp)
        assert len(examples) == 110  # the total size of the sources
        assert sources_of(examples)["B"] / 110 == pytest.approx(expected, abs=0.01)
    # alpha = 1: in proportion to size.
    examples = read(MultiCorpus(sources, alpha=1.0, epoch_size=1100), nlp)
    assert sources_of(examples) == {"A": 1000, "B": 100}


def test_alpha_zero_samples_the_sources_uniformly(corpora: Dict[str, str], nlp: Language) -> None:
    sources = {"A": corpora["A"], "B": corpora["B"], "C": corpora["C"]}
    examples = read(MultiCorpus(sources, alpha=0.0, epoch_size=300), nlp)
    assert sources_of(examples) == {"A": 100, "B": 100, "C": 100}


def test_explicit_weights_override_alpha(corpora: Dict[str, str], nlp: Language) -> None:
    sources = {"A": corpora["A"], "B": corpora["B"]}
    corpus = MultiCorpus(sources, alpha=1.0, weights={"A": 1.0, "B": 3.0}, epoch_size=200)
    assert sources_of(read(corpus, nlp)) == {"A": 50, "B": 150}
    # A source that weights does not name keeps size ** alpha, on the same scale.
    corpus = MultiCorpus(sources, alpha=1.0, weights={"B": 100.0}, epoch_size=200)
    assert sources_of(read(corpus, nlp)) == {"A": 100, "B": 100}
    # Weight 0: never sampled.
    corpus = MultiCorpus(sources, weights={"B": 0.0})
    assert sources_of(read(corpus, nlp)) == {"A": 110}


def test_the_sources_are_interleaved(corpora: Dict[str, str], nlp: Language) -> None:
    sources = {"A": corpora["A"], "B": corpora["B"]}
    examples = read(MultiCorpus(sources, alpha=0.0), nlp)
    first_half = sources_of(examples[:55])
    assert 15 < first_half["B"] < 40


def test_every_doc_is_seen_before_any_repeats(corpora: Dict[str, str], nlp: Language) -> None:
    sources = {"A": corpora["A"], "B": corpora["B"]}
    # B (10 docs) is drawn 55 times a call: every doc 5 or 6 times, in whole passes.
    corpus = MultiCorpus(sources, alpha=0.0, seed=3)
    stream = [mark(eg) for eg in read(corpus, nlp) if eg.reference._.bert_pipes_source == "B"]
    assert len(stream) == 55
    for start in range(0, 50, 10):
        assert sorted(stream[start : start + 10]) == sorted(f"b{i}" for i in range(10))
    assert stream[:10] != stream[10:20]  # each pass is shuffled anew
    # A (100 docs) is drawn 55 times a call: the next call goes on with the rest.
    corpus = MultiCorpus(sources, alpha=0.0, seed=3)
    seen = [
        mark(eg)
        for _ in range(2)
        for eg in read(corpus, nlp)
        if eg.reference._.bert_pipes_source == "A"
    ]
    assert sorted(seen[:100]) == sorted(f"a{i}" for i in range(100))


def test_repeats_are_separate_examples(corpora: Dict[str, str], nlp: Language) -> None:
    corpus = MultiCorpus({"B": corpora["B"]}, epoch_size=30)
    examples = read(corpus, nlp)
    assert len({id(eg) for eg in examples}) == 30
    assert len({id(eg.reference) for eg in examples}) == 30
    assert len({id(eg.predicted) for eg in examples}) == 30


def test_the_files_are_read_once_per_nlp_and_copies_yielded(tmp_path: Path, nlp: Language) -> None:
    path = tmp_path / "a.spacy"
    DocBin(docs=[nlp.make_doc(f"query number a{i} here") for i in range(4)]).to_disk(path)
    corpus = MultiCorpus({"A": str(path)}, epoch_size=4)
    first = read(corpus, nlp)
    first[0].predicted.cats["CHANGED"] = 1.0  # what training might do to a yielded doc
    first[0].reference.user_data["seen"] = True
    DocBin(docs=[nlp.make_doc("another text")]).to_disk(path)
    second = read(corpus, nlp)  # the same nlp: the examples first read, copied again
    assert sorted(map(mark, second)) == sorted(map(mark, first))
    assert not {id(eg) for eg in first} & {id(eg) for eg in second}
    assert all(not eg.predicted.cats and "seen" not in eg.reference.user_data for eg in second)
    other = read(corpus, spacy.blank("en"))  # another nlp object reads the files again
    assert {eg.reference.text for eg in other} == {"another text"}


def test_a_second_reader_of_the_same_files_and_nlp_reads_nothing(
    tmp_path: Path, nlp: Language, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`spacy train` makes the reader twice (initialize, then the loop): the
    second takes the first one's examples, unless a file changed meanwhile."""
    path = tmp_path / "a.spacy"
    DocBin(docs=[nlp.make_doc(f"query number a{i} here") for i in range(4)]).to_disk(path)
    opened: List[str] = []
    from_disk = DocBin.from_disk

    def counted(self: DocBin, path: Path) -> DocBin:
        opened.append(str(path))
        return from_disk(self, path)

    monkeypatch.setattr(DocBin, "from_disk", counted)
    first = read(MultiCorpus({"A": str(path)}, epoch_size=4), nlp)
    second = read(MultiCorpus({"B": str(path)}, epoch_size=4, seed=3), nlp)
    assert opened == [str(path)]
    assert sorted(map(mark, second)) == sorted(map(mark, first))
    assert not {id(eg) for eg in first} & {id(eg) for eg in second}
    # another limit, or another nlp object, reads the file
    assert len(read(MultiCorpus({"A": str(path)}, epoch_size=4, limit=2), nlp)) == 4
    read(MultiCorpus({"A": str(path)}, epoch_size=4), spacy.blank("en"))
    assert len(opened) == 3
    DocBin(docs=[nlp.make_doc("another text")]).to_disk(path)  # a new file
    changed = read(MultiCorpus({"A": str(path)}, epoch_size=4), nlp)
    assert {eg.reference.text for eg in changed} == {"another text"} and len(opened) == 4


def test_shuffle_false_reads_every_doc_once_in_order(
    corpora: Dict[str, str], nlp: Language
) -> None:
    sources = {"B": corpora["B"], "A": corpora["A"], "C": corpora["C"]}
    corpus = MultiCorpus(sources, shuffle=False, epoch_size=7, weights={"A": 0.0})
    for _ in range(2):
        examples = read(corpus, nlp)
        expected = [f"b{i}" for i in range(10)] + [f"a{i}" for i in range(100)]
        expected += [f"c{i}" for i in range(10)]  # C's two files in name order
        assert [mark(eg) for eg in examples] == expected
        expected_sources = ["B"] * 10 + ["A"] * 100 + ["C"] * 10
        assert [eg.reference._.bert_pipes_source for eg in examples] == expected_sources


def test_every_doc_carries_its_source_and_its_annotations(
    corpora: Dict[str, str], nlp: Language
) -> None:
    sources = {"A": corpora["A"], "B": corpora["B"], "C": corpora["C"]}
    for shuffle in (True, False):
        for eg in read(MultiCorpus(sources, shuffle=shuffle), nlp):
            source = eg.reference._.bert_pipes_source
            assert eg.predicted._.bert_pipes_source == source
            assert mark(eg)[0] == source.lower()
            if source == "A":
                assert eg.reference.cats == {"MONEY": 1.0, "OTHER": 0.0}
            if source == "B":
                assert [e.label_ for e in eg.reference.ents] == ["PERSON", "GPE"]
            assert not eg.predicted.ents and not eg.predicted.cats


def test_the_extension_is_registered_with_a_default() -> None:
    assert Doc.has_extension("bert_pipes_source")
    assert spacy.blank("en")("text")._.bert_pipes_source is None


def test_the_draw_repeats_for_a_seed_and_call(corpora: Dict[str, str], nlp: Language) -> None:
    sources = {"A": corpora["A"], "B": corpora["B"]}

    def draws(seed: int, calls: int = 2) -> List[List[str]]:
        corpus = MultiCorpus(sources, seed=seed)
        return [[mark(eg) for eg in read(corpus, nlp)] for _ in range(calls)]

    first, second = draws(0)
    assert draws(0) == [first, second]
    assert first != second  # each call (epoch) draws anew
    assert draws(1)[0] != first


def test_limit_and_max_length_apply_per_source(corpora: Dict[str, str], nlp: Language) -> None:
    sources = {"A": corpora["A"], "B": corpora["B"]}
    examples = read(MultiCorpus(sources, shuffle=False, limit=3), nlp)
    assert [mark(eg) for eg in examples] == ["a0", "a1", "a2", "b0", "b1", "b2"]
    # The docs have no sentence boundaries: longer ones are left out, as spacy.Corpus
    # does (C's docs have 2 tokens, A's 5).
    examples = read(MultiCorpus({"C": corpora["C"]}, shuffle=False, max_length=3), nlp)
    assert sources_of(examples) == {"C": 10}
    corpus = MultiCorpus({"C": corpora["C"], "A": corpora["A"]}, max_length=3)
    with pytest.raises(ValueError, match=r"sources\.A = .*max_length = 3 leaves out longer"):
        read(corpus, nlp)


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"sources": {}}, r"sources is empty"),
        ({"alpha": -0.5}, r"alpha = -0\.5: it must be 0 or more"),
        ({"weights": {"D": 1.0}}, r"weights\.D: no source 'D' \(sources: A, B\)"),
        ({"weights": {"B": -1.0}}, r"weights\.B = -1\.0: it must be 0 or more"),
        ({"epoch_size": 0}, r"epoch_size = 0: it must be 1 or more"),
    ],
)
def test_bad_settings_are_named(corpora: Dict[str, str], settings: dict, message: str) -> None:
    settings = {"sources": {"A": corpora["A"], "B": corpora["B"]}, **settings}
    with pytest.raises(ValueError, match=rf"^{READER}: {message}"):
        registry.readers.get(READER)(**settings)


@pytest.mark.parametrize("shuffle", [True, False])
def test_a_missing_source_is_named_when_read(
    corpora: Dict[str, str], nlp: Language, shuffle: bool
) -> None:
    """Not when the config is resolved: `spacy debug config` runs before the
    corpora exist, as with spacy.Corpus.v1."""
    corpus = MultiCorpus({"A": corpora["A"], "X": "nowhere/x.spacy"}, shuffle=shuffle)
    with pytest.raises(ValueError, match=r"sources\.X = 'nowhere/x\.spacy': no such file"):
        read(corpus, nlp)


@pytest.mark.filterwarnings("ignore:\\[W090\\]")  # spaCy's: no .spacy files in the folder
@pytest.mark.parametrize("shuffle", [True, False])
def test_an_empty_source_is_named(
    corpora: Dict[str, str], nlp: Language, tmp_path: Path, shuffle: bool
) -> None:
    (tmp_path / "nothing").mkdir()
    for name, path in [("empty", corpora["empty"]), ("nothing", str(tmp_path / "nothing"))]:
        corpus = MultiCorpus({"A": corpora["A"], name: path}, shuffle=shuffle)
        with pytest.raises(ValueError, match=rf"sources\.{name} = '{path}': no docs to read"):
            read(corpus, nlp)


def test_zero_weight_for_every_source_is_an_error(corpora: Dict[str, str], nlp: Language) -> None:
    corpus = MultiCorpus({"B": corpora["B"]}, weights={"B": 0.0})
    with pytest.raises(ValueError, match=r"every source has weight 0"):
        read(corpus, nlp)


CONFIG = """
[paths]
a = null
b = null

[nlp]
lang = "en"
pipeline = []

[components]

[corpora]

[corpora.train]
@readers = "spacy-bert-pipes.MultiCorpus.v1"
alpha = 0.5
seed = 7
epoch_size = 40

[corpora.train.sources]
cats = ${paths.a}
ents = ${paths.b}

[corpora.dev]
@readers = "spacy-bert-pipes.MultiCorpus.v1"
shuffle = false

[corpora.dev.sources]
ents = ${paths.b}
"""


def test_a_config_with_the_reader_resolves_and_reads(
    corpora: Dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "config.cfg"
    path.write_text(CONFIG, encoding="utf8")
    overrides = {"paths.a": corpora["A"], "paths.b": corpora["B"]}
    config = load_config(path, overrides=overrides, interpolate=True)
    readers = registry.resolve(config["corpora"])
    nlp = spacy.blank("en")
    train = list(readers["train"](nlp))
    assert len(train) == 40
    assert sources_of(train) == {"cats": 30, "ents": 10}  # 10 : sqrt(10)
    dev = list(readers["dev"](nlp))
    assert [mark(eg) for eg in dev] == [f"b{i}" for i in range(10)]
    # spaCy validates the settings against the reader's signature.
    config["corpora"]["train"]["alpha"] = "much"
    with pytest.raises(ConfigValidationError, match=r"train -> alpha"):
        registry.resolve(config["corpora"])


def test_spacy_finds_the_reader_through_its_entry_point() -> None:
    """As `python -m spacy train` does: nothing imports spacy_bert_pipes first."""
    (entry_point,) = [ep for ep in entry_points(group="spacy_readers") if ep.name == READER]
    assert entry_point.value == "spacy_bert_pipes.multitask.corpus:create_multi_corpus_reader"
    code = (
        "import sys; from spacy.util import registry; "
        f"assert 'spacy_bert_pipes' not in sys.modules; print(registry.readers.get({READER!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "create_multi_corpus_reader" in out.stdout
