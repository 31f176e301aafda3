"""What several test modules share, imported as a module (`from helpers import ...`).

Fixtures stay in conftest.py, which pytest loads by itself; conftest is not
imported by the tests.
"""

import json
import random
import string
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy

WORDS = (
    "the a an of to in and is was for on with card my i you it this that what how why "
    "money bank transfer account payment refund pin new top up cash exchange rate "
    "hello world paris london new york apple google john smith is in city company "
    "not work working arrive arrived still waiting"
).split()

# Seen from the project root, the shared data sets are in ../shared/datasets.
DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def write_jsonl(path: Path, records: List[Any]) -> Path:
    return write(path, "\n".join(json.dumps(record) for record in records) + "\n")


def write_texts(path: Path, n: int = 60, seed: int = 0) -> Path:
    """A JSONL file of n random texts of WORDS, with ids "t0", "t1"..."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 30)))
        lines.append(json.dumps({"id": f"t{i}", "text": words}))
    path.write_text("\n".join(lines) + "\n", encoding="utf8")
    return path


def write_tiny_bert(
    path: Path,
    *,
    num_labels: int = 0,
    seed: int = 0,
    num_hidden_layers: int = 2,
    max_position_embeddings: int = 128,
    intermediate_size: int = 64,
) -> Path:
    """A random BERT (2 layers unless asked, width 32) with a small WordPiece vocabulary."""
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
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=2,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
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
# For tests that compare a doc's outputs across batchings (one by one against
# nlp.pipe, a batch against its parts): "auto" predicts in bf16 on CPUs that have
# it (and in int8 on others once `bert-pipes check-int8` marked the pipeline), and
# then a doc's outputs move a little with the other docs of its batch
# (docs/precision.md).
FP32_ENCODER = {**SMALL_ENCODER, "predict_precision": "fp32"}


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


def prototype_router(tiny_bert: Path, path: Path) -> Path:
    """A prototype bert_textcat on its own encoder and nothing else, as
    configs/route.cfg trains, initialized from the tiny BERT and saved to `path`."""
    import spacy

    nlp = spacy.blank("en")
    model = {
        "@architectures": "spacy-bert-pipes.PrototypeCatModel.v1",
        "encoder": {"@architectures": "spacy-bert-pipes.BertEncoder.v2", **SMALL_ENCODER},
    }
    nlp.add_pipe("bert_textcat", config={"model": model})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    nlp.to_disk(path)
    return path


def ner_examples(nlp, data=NER_TEXTS):  # type: ignore[no-untyped-def]
    from spacy.training import Example

    return [Example.from_dict(nlp.make_doc(text), {"entities": ents}) for text, ents in data]


def gold_answers(text: str, answers: Dict[str, Optional[str]]) -> Dict[str, List[Dict]]:
    """`doc._.gold_answers` for a text: each key's answer (a substring of the text,
    at its first occurrence), or an empty list (no answer) for None."""
    gold: Dict[str, List[Dict]] = {}
    for key, answer in answers.items():
        if answer is None:
            gold[key] = []
        else:
            start = text.index(answer)
            gold[key] = [{"text": answer, "start": start, "end": start + len(answer)}]
    return gold


def tiny_pipeline(tiny_bert: Path, *, qa: bool = True, sentencizer: bool = False) -> Any:
    """bert_textcat and bert_ner (and bert_qa), each on its own tiny encoder,
    initialized (not trained); with `sentencizer`, a sentencizer first."""
    import spacy
    from spacy.training import Example

    nlp = spacy.blank("en")
    if sentencizer:
        nlp.add_pipe("sentencizer")
    for name in ("bert_textcat", "bert_ner") + (("bert_qa",) if qa else ()):
        model: Dict[str, Any] = {"encoder": SMALL_ENCODER}
        if name == "bert_qa":
            model.update(max_seq_len=24, doc_stride=4, max_question_len=8)
        nlp.add_pipe(name, config={"model": model})
        nlp.config["initialize"]["components"][name] = loader_config(tiny_bert)
    cats = {"card": 1.0, "other": 0.0}
    examples = [
        Example.from_dict(nlp.make_doc(text), {"entities": ents, "cats": cats})
        for text, ents in NER_TEXTS
    ]
    nlp.initialize(lambda: examples)
    return nlp


def write_sentence_transformers_layout(
    path: Path, pooling: dict, *, normalize: bool, max_seq_length: Optional[int] = None
) -> Path:
    """Lay a checkpoint folder out as sentence-transformers does: modules.json
    (Transformer, Pooling, and Normalize if `normalize`), the pooling config and,
    with `max_seq_length`, sentence_bert_config.json."""
    kinds = ["Transformer", "Pooling"] + (["Normalize"] if normalize else [])
    folders = ["", "1_Pooling", "2_Normalize"]
    modules = [
        {"idx": i, "name": str(i), "path": folders[i], "type": f"sentence_transformers.models.{k}"}
        for i, k in enumerate(kinds)
    ]
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if normalize:
        (path / "2_Normalize").mkdir()
    if max_seq_length is not None:
        config = {"max_seq_length": max_seq_length}
        (path / "sentence_bert_config.json").write_text(json.dumps(config))
    return path


def count_calls(monkeypatch: Any, owner: Any, name: str) -> List[int]:
    """Wrap `owner.<name>` (until the test ends) so that each call appends 1 to the
    list returned."""
    calls: List[int] = []
    original = getattr(owner, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counting)
    return calls


# What `explain` writes for layers 0 and 1 (or 0 and -1 of a 2-layer encoder).
EXPLAIN_FILES_LAYERS_0_1 = [
    "attention_layer0.png",
    "attention_layer0_heads.png",
    "attention_layer1.png",
    "attention_layer1_heads.png",
    "cls_attention.png",
    "explain.html",
]


SHARED_DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


def copy_project(tmp_path: Path) -> Path:
    """A copy of the project (project.yml, configs, scripts) to run workflows in."""
    import shutil

    root = Path(__file__).resolve().parents[1]
    project = tmp_path / "project"
    project.mkdir()
    for name in ("project.yml", "configs", "scripts"):
        source = root / name
        if source.is_dir():
            shutil.copytree(source, project / name)
        else:
            shutil.copy(source, project / name)
    return project


def run_workflow(project: Path, workflow: str, variables: dict) -> str:
    """`spacy project run WORKFLOW` in `project` with --vars overrides; what it
    printed. In this process (spaCy's CLI, as the command runs it): each command of
    the workflow is a process of its own anyway, and a process more for the runner
    would only import spaCy again (~3 s a call). The commands' own output goes to
    the test's captured output."""
    from spacy.cli import app
    from typer.testing import CliRunner

    overrides = [f"--vars.{k}={v}" for k, v in variables.items()]
    result = CliRunner().invoke(app, ["project", "run", workflow, str(project), *overrides])
    assert result.exit_code == 0, f"{result.output[-3000:]}\n{result.exception!r}"
    return result.output


def yaml_workflow(name: str) -> list:
    """The steps of a workflow of project.yml."""
    import srsly

    root = Path(__file__).resolve().parents[1]
    return list(srsly.read_yaml(root / "project.yml")["workflows"][name])


def unit(rows: numpy.ndarray) -> numpy.ndarray:
    """Each row scaled to length 1, float32."""
    return (rows / numpy.linalg.norm(rows, axis=1, keepdims=True)).astype("f")


def numeric_grad(f, x: numpy.ndarray, eps: float = 1e-3) -> numpy.ndarray:  # type: ignore[no-untyped-def]
    """The central-difference gradient of the scalar f at x (changed and restored)."""
    grad = numpy.zeros_like(x, dtype="f8")
    for idx in numpy.ndindex(*x.shape):
        old = x[idx]
        x[idx] = old + eps
        up = f(x)
        x[idx] = old - eps
        down = f(x)
        x[idx] = old
        grad[idx] = (up - down) / (2 * eps)
    return grad


def hf_first_piece_probs(folder: Path, docs: List[Any]) -> List[numpy.ndarray]:
    """transformers' own model: softmax at each spaCy token's first wordpiece."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForTokenClassification.from_pretrained(folder).eval()
    out = []
    for doc in docs:
        enc = tokenizer(doc.text, return_offsets_mapping=True, return_tensors="pt")
        offsets = enc.pop("offset_mapping")[0].tolist()
        with torch.no_grad():
            probs = model(**enc).logits[0].softmax(-1).numpy()
        rows = []
        for token in doc:
            first = next(
                i
                for i, (s, e) in enumerate(offsets)
                if e > s and s < token.idx + len(token) and e > token.idx
            )
            rows.append(probs[first])
        out.append(numpy.stack(rows))
    return out
