"""Make the saved pipelines of `tests/test_saved_pipelines.py` (run once, by hand).

    .venv/bin/python tests/saved/make_saved.py

Each shipped config (textcat, ner, qa, few-shot textcat, multitask) is built on
a tiny random BERT (2 layers, width 32), trained a few steps on the test texts,
saved to `tests/saved/pipelines/<config>/`, and its predictions on TEXTS written
to `tests/saved/predictions.json`. The pipelines were saved by the code before
`models/` was split into subpackages; the test checks that the code of today
still loads them and predicts the same. Running this again replaces them with
pipelines saved by the code of today, which proves nothing about older ones.
"""

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

CONFIGS = ["textcat", "textcat_fewshot", "ner", "qa", "multitask"]
TEXTS = [
    "john smith says my card still not arrived in paris",
    "what exchange rate is this for cash",
    "hello world",
    "apple is a company in london and google is in new york",
]
QUESTIONS = {"who": "who is in paris ?", "where": "where is the company ?"}


def build(name: str, tiny_bert: Path) -> Any:
    import spacy
    from helpers import SMALL_ENCODER
    from spacy.util import load_config

    config = load_config(
        ROOT / "configs" / f"{name}.cfg",
        overrides={"paths.encoder": str(tiny_bert)},
        interpolate=True,
    )
    for component in config["components"].values():
        encoder = component.get("model", {}).get("encoder", component.get("model", {}))
        if encoder.get("@architectures", "").startswith("spacy-bert-pipes.BertEncoder."):
            encoder.update(SMALL_ENCODER)
            encoder["predict_precision"] = "fp32"  # the same figures on every CPU
    if "bert_qa" in config["components"]:
        qa_model = config["components"]["bert_qa"]["model"]
        qa_model.update({"max_seq_len": 64, "doc_stride": 16, "max_question_len": 16})
    return spacy.util.load_model_from_config(config, auto_fill=True, validate=True)


def examples(nlp: Any) -> List[Any]:
    from helpers import gold_answers, ner_examples, textcat_examples
    from spacy.training import Example

    out = []
    if any(name in nlp.pipe_names for name in ("bert_ner", "slots")):
        out += ner_examples(nlp)
    if any(pipe.__class__.__name__ == "BertTextCategorizer" for _, pipe in nlp.pipeline):
        out += textcat_examples(nlp)
    if "bert_qa" in nlp.pipe_names:
        text = "john smith is in paris and apple is a company in london"
        reference = nlp.make_doc(text)
        reference._.questions = QUESTIONS
        reference._.gold_answers = gold_answers(text, {"who": "john smith", "where": "london"})
        out.append(Example(nlp.make_doc(text), reference))
    return out


def predictions(nlp: Any) -> List[Dict[str, Any]]:
    out = []
    for text in TEXTS:
        doc = nlp.make_doc(text)
        if "bert_qa" in nlp.pipe_names:
            doc._.questions = QUESTIONS
        doc = nlp(doc)
        out.append(
            {
                "cats": doc.cats,
                "ents": [[e.start_char, e.end_char, e.label_] for e in doc.ents],
                "ent_scores": [e._.get("bert_ner_score") for e in doc.ents]
                if doc.ents and doc.ents[0].has_extension("bert_ner_score")
                else [],
                "answers": [
                    {k: a[k] for k in ("key", "text", "start", "end", "score")}
                    for a in (doc._.get("answers") or [])
                ]
                if doc.has_extension("answers")
                else [],
                "vector": [float(v) for v in doc.vector] if doc.has_vector else [],
            }
        )
    return out


def main() -> None:
    import torch
    from helpers import write_tiny_bert
    from thinc.api import fix_random_seed

    torch.set_num_threads(1)
    out = HERE / "pipelines"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    recorded: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tiny_bert = write_tiny_bert(Path(tmp) / "tiny_bert")
        for name in CONFIGS:
            fix_random_seed(0)
            nlp = build(name, tiny_bert)
            train = examples(nlp)
            optimizer = nlp.initialize(lambda train=train: train)
            if name == "multitask":  # its classifiers' labels are NLU++'s and Banking77's
                train = [eg for eg in train if not eg.reference.cats]
            for _ in range(8):
                nlp.update(train, sgd=optimizer, drop=0.0)
            nlp.to_disk(out / name)
            recorded[name] = predictions(nlp)
            print(name, "saved")
    (HERE / "predictions.json").write_text(json.dumps(recorded, indent=1) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "tests"))  # helpers, as the tests import it
    main()
