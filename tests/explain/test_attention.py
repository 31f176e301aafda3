"""The encoder's attention weights, checked against the Hugging Face model's own
`output_attentions` for the same input ids."""

from pathlib import Path

import numpy
import pytest
import torch
from numpy.testing import assert_allclose
from thinc.api import Model
from transformers import BertModel

from spacy_bert_pipes.explain.attention import AttentionMaps, encoder_attention
from spacy_bert_pipes.models.encoder.bert import BertEncoder, hf_shim
from spacy_bert_pipes.models.encoder.loaders import HFCheckpoint

TEXT = "My card payment did not arrive in Paris!"
LONG = " ".join(["why is my new card not working in london"] * 4)


pytestmark = pytest.mark.usefixtures("one_thread")


def make_encoder(path: Path, **kwargs) -> Model:  # type: ignore[no-untyped-def]
    encoder = BertEncoder(**kwargs)
    HFCheckpoint(str(path)).load_encoder(encoder)
    encoder.initialize()
    return encoder


@pytest.fixture(scope="module")
def encoder(tiny_bert: Path) -> Model:
    return make_encoder(tiny_bert, max_length=16, stride=4)


@pytest.fixture(scope="module")
def reference(tiny_bert: Path) -> BertModel:
    """The same checkpoint, loaded by transformers with eager attention."""
    return BertModel.from_pretrained(tiny_bert, attn_implementation="eager").eval()


def hf_attentions(model: BertModel, maps: AttentionMaps) -> numpy.ndarray:
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(maps.input_ids.tolist())[None],
            token_type_ids=torch.tensor(maps.token_type_ids.tolist())[None],
            output_attentions=True,
        )
    return torch.stack([a[0] for a in out.attentions]).numpy()


def test_weights_equal_the_models_own_attentions(encoder: Model, reference: BertModel) -> None:
    maps = encoder_attention(encoder, TEXT)
    assert maps.weights.dtype == numpy.float32
    assert maps.weights.shape == (2, 2, len(maps.tokens), len(maps.tokens))
    assert maps.tokens[0] == "[CLS]" and maps.tokens[-1] == "[SEP]"
    assert_allclose(maps.weights, hf_attentions(reference, maps), atol=1e-6)
    assert_allclose(maps.weights.sum(axis=-1), 1.0, atol=1e-5)


def test_input_is_the_encoders_window(encoder: Model) -> None:
    tokenizer = hf_shim(encoder).tokenizer
    maps = encoder_attention(encoder, TEXT)
    expected = tokenizer(TEXT)["input_ids"]
    assert maps.input_ids.tolist() == expected
    assert maps.token_type_ids.tolist() == [0] * len(expected)
    assert maps.offsets[0].tolist() == [-1, -1] and maps.offsets[-1].tolist() == [-1, -1]
    for token, (start, end) in zip(maps.tokens[1:-1], maps.offsets[1:-1].tolist()):
        assert TEXT[start:end].lower() == token.removeprefix("##")
    assert (maps.n_windows, maps.window, maps.pieces) == (1, 0, (0, len(expected) - 2))


def test_sdpa_encoder_gives_weights_and_keeps_its_setting(tiny_bert: Path) -> None:
    encoder = make_encoder(tiny_bert)
    transformer = hf_shim(encoder).module.transformer
    transformer.config._attn_implementation = "sdpa"
    transformer.train()
    maps = encoder_attention(encoder, TEXT)
    assert transformer.config._attn_implementation == "sdpa"
    assert transformer.training  # eval mode only for the pass
    reference = BertModel.from_pretrained(tiny_bert, attn_implementation="eager").eval()
    assert_allclose(maps.weights, hf_attentions(reference, maps), atol=1e-6)


@pytest.mark.parametrize("window", [0, 1, -1])
def test_windows_of_a_long_text(encoder: Model, reference: BertModel, window: int) -> None:
    maps = encoder_attention(encoder, LONG, window=window)
    assert maps.n_windows > 2
    assert len(maps.tokens) <= 16
    start, end = maps.pieces
    assert end - start == len(maps.tokens) - 2
    if window == 1:
        assert start == 16 - 2 - 4  # windows start size - stride apart
    if window == -1:
        assert maps.window == maps.n_windows - 1 and end == maps.n_pieces
    assert_allclose(maps.weights, hf_attentions(reference, maps), atol=1e-6)


def test_window_out_of_range(encoder: Model) -> None:
    with pytest.raises(ValueError, match="window 3 is out of range: the text has 1 window"):
        encoder_attention(encoder, TEXT, window=3)


@pytest.mark.parametrize("max_question_length,truncated", [(64, False), (2, True)])
def test_question_and_context_pair(
    encoder: Model, reference: BertModel, max_question_length: int, truncated: bool
) -> None:
    question = "what is my card?"
    maps = encoder_attention(
        encoder, TEXT, question=question, max_length=40, max_question_length=max_question_length
    )
    n_q = int(maps.is_question.sum())
    assert maps.question_truncated is truncated
    assert n_q == (2 if truncated else 5)
    # [CLS] question [SEP] context [SEP], the context in segment 1
    assert maps.tokens[0] == "[CLS]" and maps.tokens[n_q + 1] == "[SEP]"
    assert maps.token_type_ids.tolist() == [0] * (n_q + 2) + [1] * (len(maps.tokens) - n_q - 2)
    q_offsets = maps.offsets[maps.is_question == 1]
    assert question[q_offsets[0, 0] : q_offsets[0, 1]] == "what"
    assert_allclose(maps.weights, hf_attentions(reference, maps), atol=1e-6)


def test_question_leaves_no_room(encoder: Model) -> None:
    with pytest.raises(ValueError, match="no room for the text"):
        encoder_attention(encoder, TEXT, question="where is my card ?", max_length=8)


def test_no_attentions_is_a_clear_error(tiny_bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As from an attention kernel that never materializes the weights."""
    encoder = make_encoder(tiny_bert)
    transformer = hf_shim(encoder).module.transformer
    original = transformer.forward

    def forward(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = original(*args, **kwargs)
        out.attentions = None
        return out

    monkeypatch.setattr(transformer, "forward", forward)
    with pytest.raises(ValueError, match="returned no attention weights"):
        encoder_attention(encoder, TEXT)


def test_case_embeddings_enter_the_attention_maps(tiny_bert: Path, encoder: Model) -> None:
    cased = make_encoder(tiny_bert, max_length=16, stride=4, case_embeddings=True)
    question = "Who is in Paris?"
    plain = encoder_attention(encoder, TEXT, question=question)
    zero = encoder_attention(cased, TEXT, question=question)
    assert_allclose(zero.weights, plain.weights, atol=1e-6)
    torch.nn.init.normal_(hf_shim(cased).module.case_embeddings.weight)
    moved = encoder_attention(cased, TEXT, question=question)
    assert moved.input_ids.tolist() == plain.input_ids.tolist()
    assert not numpy.allclose(moved.weights, plain.weights, atol=1e-3)
