"""`explain`: the attention of each component's encoder, for the window the
component itself runs, drawn to PNGs and an HTML page."""

import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy
import pytest
import spacy
import torch
from helpers import (
    EXPLAIN_FILES_LAYERS_0_1,
    SMALL_ENCODER,
    loader_config,
    textcat_examples,
    tiny_pipeline,
)
from numpy.testing import assert_allclose
from spacy.language import Language
from spacy.training import Example
from transformers import BertModel

from spacy_bert_pipes.explain import ExplainError, explain, find_encoder
from spacy_bert_pipes.models.encoder import bert as encoder_module

LISTENER = {"@architectures": "spacy-bert-pipes.EncoderListener.v1", "upstream": "*"}
TEXT = "why is my new card not working in london?"
PNG = b"\x89PNG\r\n\x1a\n"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def own_nlp(tiny_bert: Path) -> Language:
    """bert_textcat and bert_ner, each on its own encoder, and a sentencizer."""
    return tiny_pipeline(tiny_bert, qa=False, sentencizer=True)


@pytest.fixture(scope="module")
def shared_nlp(tiny_bert: Path) -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": SMALL_ENCODER})
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": LISTENER}})
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    return nlp


def make_qa(tiny_bert: Path, questions: Dict[str, str]) -> Language:
    nlp = spacy.blank("en")
    model = {"encoder": SMALL_ENCODER, "max_seq_len": 24, "doc_stride": 4, "max_question_len": 8}
    nlp.add_pipe("bert_qa", config={"model": model, "questions": questions})
    nlp.config["initialize"]["components"]["bert_qa"] = loader_config(tiny_bert)
    nlp.initialize(lambda: [Example(nlp.make_doc(TEXT), nlp.make_doc(TEXT))])
    return nlp


@pytest.fixture(scope="module")
def qa_nlp(tiny_bert: Path) -> Language:
    return make_qa(tiny_bert, {"what": "what is not working?"})


@pytest.fixture(scope="module")
def reference(tiny_bert: Path) -> BertModel:
    return BertModel.from_pretrained(tiny_bert, attn_implementation="eager").eval()


def hf_attentions(model: BertModel, ids: List[int], types: List[int]) -> numpy.ndarray:
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(ids)[None],
            token_type_ids=torch.tensor(types)[None],
            output_attentions=True,
        )
    return torch.stack([a[0] for a in out.attentions]).numpy()


def windows_run(
    nlp: Language, monkeypatch: pytest.MonkeyPatch, text: str = TEXT
) -> List[Tuple[List[int], List[int]]]:
    """The (ids, segment ids) windows the pipeline's encoders run for a text."""
    seen: List[Tuple[List[int], List[int]]] = []
    original = encoder_module.run_windows

    def recording(encoder, windows, is_train, cases=None):  # type: ignore[no-untyped-def]
        seen.extend((list(map(int, ids)), list(map(int, types))) for ids, types in windows)
        return original(encoder, windows, is_train, cases)

    with monkeypatch.context() as patch:
        patch.setattr(encoder_module, "run_windows", recording)
        nlp(text)
    return seen


@pytest.mark.parametrize("component", ["bert_textcat", "bert_ner"])
def test_weights_are_those_of_the_components_own_pass(
    own_nlp: Language,
    reference: BertModel,
    monkeypatch: pytest.MonkeyPatch,
    component: str,
) -> None:
    result = explain(own_nlp, TEXT, component=component)
    assert result.component == result.encoder_component == component
    maps = result.attention
    # the window the component runs is the one explained
    ids, types = windows_run(own_nlp, monkeypatch)[0]
    assert maps.input_ids.tolist() == ids and maps.token_type_ids.tolist() == types
    assert_allclose(maps.weights, hf_attentions(reference, ids, types), atol=1e-6)
    assert_allclose(maps.weights.sum(axis=-1), 1.0, atol=1e-5)


def test_default_component_is_the_first_with_an_encoder(own_nlp: Language) -> None:
    assert find_encoder(own_nlp).component == "bert_textcat"
    result = explain(own_nlp, TEXT)
    assert result.component == "bert_textcat"
    assert result.layers == [1] and result.heads == [0, 1]


def test_listener_is_explained_through_its_bert_encoder(shared_nlp: Language) -> None:
    result = explain(shared_nlp, TEXT, component="bert_textcat")
    assert (result.component, result.encoder_component) == ("bert_textcat", "bert_encoder")
    direct = explain(shared_nlp, TEXT, component="bert_encoder")
    assert_allclose(result.attention.weights, direct.attention.weights)


def test_qa_explains_the_question_and_context_pair(
    qa_nlp: Language, reference: BertModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = explain(qa_nlp, TEXT)  # the component's fixed question
    assert result.question == "what is not working?"
    maps = result.attention
    ids, types = windows_run(qa_nlp, monkeypatch)[0]
    assert maps.input_ids.tolist() == ids and maps.token_type_ids.tolist() == types
    assert 1 in types
    assert_allclose(maps.weights, hf_attentions(reference, ids, types), atol=1e-6)
    question_words = [w.text for w in result.words if w.is_question]
    assert question_words == ["what", "is", "not", "working", "?"]
    asked = explain(qa_nlp, TEXT, question="where is my card?")
    assert asked.question == "where is my card?"
    assert asked.attention.input_ids.tolist() != ids


def test_long_text_window(own_nlp: Language, monkeypatch: pytest.MonkeyPatch) -> None:
    text = " ".join([TEXT] * 3)
    runs = windows_run(own_nlp, monkeypatch, text)
    result = explain(own_nlp, text, component="bert_textcat", window=1)
    n = result.attention.n_windows
    assert n > 1 and len(runs) == 2 * n  # textcat's windows, then ner's
    assert result.attention.input_ids.tolist() == runs[1][0]
    outside = [w for w in result.words if w.score is None]
    inside = [w for w in result.words if w.score is not None]
    assert outside and inside


def test_word_scores_sum_the_cls_row(own_nlp: Language) -> None:
    result = explain(own_nlp, TEXT, layers=[0], heads=[1])
    maps = result.attention
    row = maps.weights[0, 1, 0]
    assert_allclose(result.cls_attention[0], row)
    special = maps.offsets[:, 0] < 0
    total = sum(w.score for w in result.words if w.score is not None)
    assert total == pytest.approx(float(row[~special].sum()), abs=1e-5)
    card = next(w for w in result.words if w.text == "card")
    assert TEXT[card.start : card.end] == "card"


def test_writes_pngs_and_a_page(own_nlp: Language, tmp_path: Path) -> None:
    result = explain(own_nlp, TEXT, layers=[0, -1], output_dir=tmp_path / "out")
    names = sorted(p.name for p in result.files)
    assert names == EXPLAIN_FILES_LAYERS_0_1
    for path in result.files:
        assert path.parent == tmp_path / "out"
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == PNG
    assert result.html is not None
    page = result.html.read_text(encoding="utf8")
    for word in ("card", "working", "london"):
        assert f">{word}</span>" in page
    assert page.count("data:image/png;base64,") == 5
    assert "not as an explanation" in page


def test_one_head_draws_no_head_grid(qa_nlp: Language, tmp_path: Path) -> None:
    result = explain(qa_nlp, TEXT, question="what <b>?", heads=[-1], output_dir=tmp_path)
    assert result.heads == [1]
    assert sorted(p.name for p in result.files) == [
        "attention_layer1.png",
        "cls_attention.png",
        "explain.html",
    ]
    page = (tmp_path / "explain.html").read_text(encoding="utf8")
    assert "&lt;" in page and "<b>" not in page  # the question is escaped
    assert "Question" in page


def test_without_matplotlib(own_nlp: Language, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"spacy-bert-pipes\[plots\]"):
        explain(own_nlp, TEXT, output_dir=tmp_path / "none")
    assert not (tmp_path / "none").exists()
    assert explain(own_nlp, TEXT).files == []  # computing needs no matplotlib


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"component": "nope"}, "no component 'nope' .*sentencizer, bert_textcat"),
        ({"component": "sentencizer"}, "'sentencizer' has no BERT encoder .*bert_ner"),
        ({"layers": [2]}, "layer 2 is out of range: the encoder has 2 layers"),
        ({"layers": [-3]}, "layer -3 is out of range"),
        ({"layers": []}, "No layer chosen"),
        ({"heads": [5]}, "head 5 is out of range: the encoder has 2 heads"),
        ({"question": "what?"}, "a question is only for a bert_qa component"),
        ({"window": 2}, "window 2 is out of range"),
    ],
)
def test_bad_arguments(own_nlp: Language, kwargs: Dict[str, Any], message: str) -> None:
    with pytest.raises(ExplainError, match=message):
        explain(own_nlp, TEXT, **kwargs)


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_text(own_nlp: Language, text: str) -> None:
    with pytest.raises(ExplainError, match="empty"):
        explain(own_nlp, text)


def test_qa_needs_a_question(tiny_bert: Path) -> None:
    nlp = make_qa(tiny_bert, {})
    with pytest.raises(ExplainError, match="give a question"):
        explain(nlp, TEXT)
    with pytest.raises(ExplainError, match="question is empty"):
        explain(nlp, TEXT, question=" ")


def test_no_encoder_in_the_pipeline() -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    with pytest.raises(ExplainError, match="no component with a BERT encoder"):
        explain(nlp, TEXT)
