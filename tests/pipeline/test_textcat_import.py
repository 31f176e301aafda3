"""Initialising bert_textcat from a fine-tuned ...ForSequenceClassification."""

import random
from pathlib import Path

import numpy
import pytest
import spacy
from helpers import WORDS, write_tiny_bert
from spacy.language import Language


def random_texts(n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(0, 30))]
        texts.append(" ".join(words).capitalize() + rng.choice(["", "?", "!", "."]))
    return texts


def imported_nlp(checkpoint: Path, **model: object) -> Language:
    nlp = spacy.blank("en")
    config = {"model": {"pooler_activation": "tanh", **model}}
    nlp.add_pipe("bert_textcat", config=config)
    nlp.config["initialize"]["components"]["bert_textcat"] = {
        "encoder_loader": {"@misc": "spacy-bert-pipes.HFCheckpoint.v1", "source": str(checkpoint)}
    }
    nlp.initialize()
    return nlp


def hf_probabilities(checkpoint: Path, texts: list, multi_label: bool = False) -> numpy.ndarray:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint).eval()
    with torch.no_grad():
        batch = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
        logits = model(**batch).logits
    probs = torch.sigmoid(logits) if multi_label else torch.softmax(logits, -1)
    return probs.numpy()


def test_imported_head_predicts_what_transformers_predicts(tmp_path: Path) -> None:
    checkpoint = write_tiny_bert(tmp_path / "clf", num_labels=3, seed=3)
    nlp = imported_nlp(checkpoint, encoder={"max_length": 128})
    textcat = nlp.get_pipe("bert_textcat")
    assert list(textcat.labels) == ["LABEL_A", "LABEL_B", "LABEL_C"]
    texts = random_texts(200)
    expected = hf_probabilities(checkpoint, texts)
    ours = numpy.asarray([[doc.cats[lb] for lb in textcat.labels] for doc in nlp.pipe(texts)])
    numpy.testing.assert_allclose(ours, expected, atol=1e-4)
    assert (ours.argmax(1) == expected.argmax(1)).all()


def test_imported_multilabel_head(tmp_path: Path) -> None:
    from transformers import AutoConfig

    checkpoint = write_tiny_bert(tmp_path / "ml", num_labels=4, seed=5)
    config = AutoConfig.from_pretrained(checkpoint)
    config.problem_type = "multi_label_classification"
    config.save_pretrained(checkpoint)
    nlp = imported_nlp(checkpoint, exclusive_classes=False)
    textcat = nlp.get_pipe("bert_textcat")
    texts = random_texts(50, seed=1)
    expected = hf_probabilities(checkpoint, texts, multi_label=True)
    ours = numpy.asarray([[doc.cats[lb] for lb in textcat.labels] for doc in nlp.pipe(texts)])
    numpy.testing.assert_allclose(ours, expected, atol=1e-4)


def test_mismatched_head_config_is_a_clear_error(tmp_path: Path) -> None:
    checkpoint = write_tiny_bert(tmp_path / "clf", num_labels=3)
    with pytest.raises(ValueError, match="pooler_activation"):
        imported_nlp(checkpoint, pooler_activation="none")
    with pytest.raises(ValueError, match="exclusive_classes = true"):
        imported_nlp(checkpoint, exclusive_classes=False)


def test_imported_head_trains_further_and_round_trips(tmp_path: Path) -> None:
    from spacy.training import Example

    checkpoint = write_tiny_bert(tmp_path / "clf", num_labels=3)
    nlp = imported_nlp(checkpoint, encoder={"max_length": 32, "stride": 8})
    labels = list(nlp.get_pipe("bert_textcat").labels)
    examples = [
        Example.from_dict(nlp.make_doc(t), {"cats": {lb: float(lb == g) for lb in labels}})
        for t, g in [("my card", "LABEL_A"), ("exchange rate", "LABEL_B"), ("hello", "LABEL_C")]
    ]
    optimizer = nlp.resume_training()
    optimizer.learn_rate = 2e-3
    for _ in range(80):
        nlp.update(examples, sgd=optimizer)
    for eg in examples:
        cats = nlp(eg.reference.text).cats
        assert max(cats, key=cats.get) == max(eg.reference.cats, key=eg.reference.cats.get)
    nlp.to_disk(tmp_path / "out")
    loaded = spacy.load(tmp_path / "out")
    for eg in examples:
        a, b = nlp(eg.reference.text).cats, loaded(eg.reference.text).cats
        assert all(a[k] == pytest.approx(b[k], abs=1e-6) for k in a)


def test_labels_added_before_an_import_must_be_the_checkpoints(tmp_path: Path) -> None:
    checkpoint = write_tiny_bert(tmp_path / "clf", num_labels=3)

    def added(label: str) -> Language:
        nlp = spacy.blank("en")
        nlp.add_pipe("bert_textcat", config={"model": {"pooler_activation": "tanh"}})
        loader = {"@misc": "spacy-bert-pipes.HFCheckpoint.v1", "source": str(checkpoint)}
        nlp.config["initialize"]["components"]["bert_textcat"] = {"encoder_loader": loader}
        nlp.get_pipe("bert_textcat").add_label(label)
        return nlp

    nlp = added("LABEL_B")
    nlp.initialize()  # in the checkpoint's order, whatever was added first
    assert nlp.get_pipe("bert_textcat").labels == ("LABEL_A", "LABEL_B", "LABEL_C")
    with pytest.raises(ValueError, match=r"\['card'\] added to 'bert_textcat'"):
        added("card").initialize()
