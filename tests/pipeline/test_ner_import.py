"""Importing a fine-tuned Hugging Face ...ForTokenClassification into bert_ner."""

from pathlib import Path
from typing import Any, Sequence

import numpy
import pytest
import spacy
from helpers import NER_TEXTS, hf_first_piece_probs, ner_examples, write_tiny_bert
from spacy.language import Language

HF_TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]


def write_token_classifier(path: Path, tags: Sequence[str], base: Any = None) -> Path:
    """A BertForTokenClassification with a random head whose logits vary a lot."""
    import torch
    from transformers import AutoTokenizer, BertForTokenClassification

    if base is None:
        base = write_tiny_bert(path / "base")
    config_source = Path(base)
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(config_source)
    config.num_labels = len(tags)
    config.id2label = dict(enumerate(tags))
    config.label2id = {t: i for i, t in enumerate(tags)}
    torch.manual_seed(1)
    model = BertForTokenClassification.from_pretrained(config_source, config=config)
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 1.0)
        model.classifier.bias.normal_(0.0, 1.0)
    out = path / "token_classifier"
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(config_source).save_pretrained(out)
    return out


def imported_nlp(folder: Path, **config: Any) -> Language:
    nlp = spacy.blank("en")
    # fp32, as the transformers pipeline it is compared with
    encoder = {"max_length": 128, "stride": 32, "predict_precision": "fp32"}
    nlp.add_pipe("bert_ner", config={"model": {"encoder": encoder}, **config})
    nlp.config["initialize"]["components"]["bert_ner"] = {
        "encoder_loader": {"@misc": "spacy-bert-pipes.HFCheckpoint.v1", "source": str(folder)}
    }
    nlp.initialize(lambda: ner_examples(nlp))
    return nlp


def test_import_gives_transformers_word_labels(tmp_path: Path) -> None:
    folder = write_token_classifier(tmp_path, HF_TAGS)
    nlp = imported_nlp(folder)
    ner = nlp.get_pipe("bert_ner")
    assert ner.labels == ("PER", "LOC", "ORG")  # the checkpoint's order
    texts = [t for t, _ in NER_TEXTS] + ["international bank of london", "what is my pin ?"]
    docs = [nlp.make_doc(t) for t in texts]
    ours = ner.predict(docs)
    theirs = hf_first_piece_probs(folder, docs)
    order = [HF_TAGS.index(tag) for tag in ner.tag_set.tags]
    n_labels = set()
    for a, b in zip(ours, theirs):
        b = b[:, order]
        numpy.testing.assert_allclose(a, b, atol=1e-5)
        assert list(a.argmax(axis=1)) == list(b.argmax(axis=1))
        n_labels.update(b.argmax(axis=1).tolist())
    assert len(n_labels) > 2  # the random head really predicts several tags


def test_import_then_train_further(tmp_path: Path) -> None:
    folder = write_token_classifier(tmp_path, HF_TAGS)
    nlp = imported_nlp(folder)
    examples = ner_examples(nlp)
    optimizer = nlp.resume_training()
    optimizer.learn_rate = 2e-3
    for _ in range(60):
        nlp.update(examples, sgd=optimizer)
    for text, gold in NER_TEXTS:
        assert [(e.start_char, e.end_char, e.label_) for e in nlp(text).ents] == gold


def test_import_with_a_different_scheme_is_a_clear_error(tmp_path: Path) -> None:
    folder = write_token_classifier(tmp_path, ["O", "B-PER", "I-PER", "L-PER", "U-PER"])
    with pytest.raises(ValueError, match="BIO scheme"):
        imported_nlp(folder)
    nlp = imported_nlp(folder, scheme="BILUO")
    assert nlp.get_pipe("bert_ner").labels == ("PER",)


def test_import_labels_must_match_given_labels(tmp_path: Path) -> None:
    folder = write_token_classifier(tmp_path, HF_TAGS)
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_ner", config={"model": {"encoder": {"max_length": 64, "stride": 16}}})
    nlp.config["initialize"]["components"]["bert_ner"] = {
        "encoder_loader": {"@misc": "spacy-bert-pipes.HFCheckpoint.v1", "source": str(folder)},
        "labels": ["LOC"],
    }
    with pytest.raises(ValueError, match="differ from the imported"):
        nlp.initialize(lambda: ner_examples(nlp))
