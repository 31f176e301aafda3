"""Shared fixtures: a tiny random BERT checkpoint built in the test session.

Unit tests never touch the network or the real encoder; tests marked `slow` use
the real pretrained encoder and datasets, tests marked `gpu` need CUDA.
"""

import string
from pathlib import Path
from typing import Iterator

import pytest
from helpers import WORDS


def write_tiny_bert(path: Path, *, num_labels: int = 0, seed: int = 0) -> Path:
    """A random 2-layer BERT (width 32) with a small WordPiece vocabulary."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    words = sorted(set(WORDS) - set(chars))
    vocab = specials + chars + ["##" + c for c in chars] + words
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf8")
    tokenizer = BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(path)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    torch.manual_seed(seed)
    if num_labels:
        from transformers import BertForSequenceClassification

        config.num_labels = num_labels
        config.id2label = {i: f"LABEL_{chr(65 + i)}" for i in range(num_labels)}
        config.label2id = {v: k for k, v in config.id2label.items()}
        model = BertForSequenceClassification(config)
    else:
        model = BertModel(config)
    model.save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests never touch the network."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    yield


@pytest.fixture(autouse=True)
def seeded() -> None:
    """Every test starts from the same random state (thinc, numpy, torch): the
    tiny models' random heads then train the same way on every run."""
    from thinc.api import fix_random_seed

    fix_random_seed(0)


LABELS = ["card", "fx", "other"]
TRAIN_TEXTS = [
    ("my card still not arrived", "card"),
    ("why is my card not working", "card"),
    ("exchange rate for cash", "fx"),
    ("what exchange rate is this", "fx"),
    ("hello world", "other"),
    ("this is new york", "other"),
]


def textcat_examples(nlp, data=TRAIN_TEXTS, labels=LABELS):  # type: ignore[no-untyped-def]
    from spacy.training import Example

    return [
        Example.from_dict(nlp.make_doc(text), {"cats": {lb: float(lb == gold) for lb in labels}})
        for text, gold in data
    ]


def loader_config(path: Path) -> dict:
    return {"encoder_loader": {"@misc": "spacy-bert-pipes.HFCheckpoint.v1", "source": str(path)}}


SMALL_ENCODER = {"max_length": 16, "stride": 4, "max_batch_tokens": 256}


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """GPU tests run on the device machine; elsewhere they are reported as skipped."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run `make gpu` on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


NER_LABELS = ["LOC", "ORG", "PER"]
# (text, [(start_char, end_char, label)])
NER_TEXTS = [
    ("john smith is in paris", [(0, 10, "PER"), (17, 22, "LOC")]),
    ("apple is a company in london", [(0, 5, "ORG"), (22, 28, "LOC")]),
    ("hello john", [(6, 10, "PER")]),
    ("google is in new york", [(0, 6, "ORG"), (13, 21, "LOC")]),
    ("the bank of london", [(12, 18, "LOC")]),
    ("what is my pin", []),
]


def ner_examples(nlp, data=NER_TEXTS):  # type: ignore[no-untyped-def]
    from spacy.training import Example

    return [Example.from_dict(nlp.make_doc(text), {"entities": ents}) for text, ents in data]
