"""The family matrix: every encoder family the README promises, in every component.

For each family (tests/families.py: BERT cased and uncased, RoBERTa, XLM-R,
DistilBERT, ALBERT, ELECTRA, DeBERTa-v3), a tiny random checkpoint with a
tokenizer trained here:
- the encoder computes what transformers' own forward computes;
- pair windows are what the checkpoint's own tokenizer makes of (question, context);
- imported sequence, token and QA heads predict what transformers predicts;
- textcat and NER (case embeddings, at the checkpoint's embedding size) listening to a
  shared encoder, and QA on its own, train, predict on long docs (strided windows),
  round-trip through to_disk / spacy.load, and predict in int8 and bf16;
- `spacy train` runs the shipped configs (`TRAINED`);
- frozen bottom layers, own top layers (branches) and attention pictures of pairs;
- `annotate` writes the same bytes locally and with two workers (XLM-R; the Ray
  engine: tests/annotate/test_ray.py).
"""

from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy
import pytest
import spacy
import torch
from families import (
    FACTORIZED,
    FAMILIES,
    QUESTION,
    SMALL,
    family_pipeline,
    labelled,
    write_family,
)
from helpers import hf_first_piece_probs, loader_config
from numpy.testing import assert_allclose
from spacy.language import Language
from spacy.training import Example

from spacy_bert_pipes.loading import load_pipeline
from spacy_bert_pipes.models.encoder.bert import BertEncoderV2, hf_shim, pair_template
from spacy_bert_pipes.models.encoder.loaders import HFCheckpoint
from spacy_bert_pipes.pipeline.common import ensure_qa_extensions

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "John Smith is in Paris, my card did not arrive!"
LONG = " ".join(["John Smith is in Paris with my card."] * 8)

Build = Callable[..., Path]


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """family, head=None, labels=None -> the path of that tiny checkpoint, built once."""
    built: Dict[Any, Path] = {}

    def get(family: str, head: Any = None, labels: Any = None) -> Path:
        key = (family, head, tuple(labels or ()))
        if key not in built:
            folder = tmp_path_factory.mktemp(f"{family}-{head or 'base'}")
            built[key] = write_family(family, folder, head=head, labels=labels)
        return built[key]

    return get


def hf_model(path: Path, auto: Any = None) -> Any:
    from transformers import AutoModel

    return (auto or AutoModel).from_pretrained(path).eval()


def hf_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_encoder_computes_what_transformers_computes(family: str, build: Build) -> None:
    path = build(family)
    encoder = BertEncoderV2(predict_precision="fp32")
    HFCheckpoint(str(path)).load_encoder(encoder)
    encoder.initialize()
    (enc,) = encoder.predict([spacy.blank("en")(TEXT)])
    inputs = hf_tokenizer(path)(TEXT, return_tensors="pt", return_offsets_mapping=True)
    offsets = inputs.pop("offset_mapping")[0, 1:-1].numpy()
    inputs.pop("token_type_ids", None)
    with torch.no_grad():
        expected = hf_model(path)(**inputs).last_hidden_state[0].numpy()
    assert_allclose(enc.cls, expected[0], atol=1e-5)
    assert_allclose(enc.wordpieces, expected[1:-1], atol=1e-5)
    assert enc.offsets.tolist() == offsets.tolist()


@pytest.mark.parametrize("family", FAMILIES)
def test_pairs_are_laid_out_as_the_checkpoints_tokenizer_lays_them(
    family: str, build: Build
) -> None:
    path = build(family)
    encoder = BertEncoderV2()
    HFCheckpoint(str(path)).load_encoder(encoder)
    tokenizer = hf_tokenizer(path)
    question = tokenizer(QUESTION, add_special_tokens=False)["input_ids"]
    context = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    pair = tokenizer(QUESTION, TEXT, return_token_type_ids=True)
    template = pair_template(encoder)
    ids = [template.cls_id, *question, *template.middle, *context, *template.end]
    assert ids == pair["input_ids"]
    module = hf_shim(encoder).module
    # segment ids where the model has segment embeddings (DeBERTa-v3 has none)
    segments = getattr(module.transformer.config, "type_vocab_size", 0)
    types = pair["token_type_ids"] if module.uses_token_types and segments > 1 else [0] * len(ids)
    n_first = 1 + len(question) + len(template.middle)
    assert types[:n_first] == [0] * n_first
    assert set(types[n_first:]) == {template.second_type}


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_pictures_of_a_pair_show_the_pair_the_model_reads(
    family: str, build: Build
) -> None:
    from spacy_bert_pipes.explain.attention import encoder_attention

    path = build(family)
    encoder = BertEncoderV2(predict_precision="fp32", case_embeddings=family in FACTORIZED)
    HFCheckpoint(str(path)).load_encoder(encoder)
    encoder.initialize()
    maps = encoder_attention(encoder, TEXT, question=QUESTION, max_length=64)
    pair = hf_tokenizer(path)(QUESTION, TEXT)
    assert maps.input_ids.tolist() == pair["input_ids"]
    assert maps.weights.shape[-1] == len(pair["input_ids"])


@pytest.mark.parametrize("family", FAMILIES)
def test_an_imported_sequence_head_predicts_what_transformers_predicts(
    family: str, build: Build
) -> None:
    from transformers import AutoModelForSequenceClassification

    path = build(family, "sequence", ["card", "fx", "other"])
    nlp = spacy.blank("en")
    encoder = {"max_length": 64, "predict_precision": "fp32"}
    model = {"encoder": encoder, "pooler_activation": imported_activation(path)}
    nlp.add_pipe("bert_textcat", config={"model": model})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(path)
    nlp.initialize()
    texts = [TEXT, "what exchange rate is this ?", "hello"]
    ours = numpy.array([list(doc.cats.values()) for doc in nlp.pipe(texts)])
    hf = hf_model(path, AutoModelForSequenceClassification)
    tokenizer = hf_tokenizer(path)
    with torch.no_grad():
        batch = tokenizer(texts, return_tensors="pt", padding=True)
        expected = hf(**batch).logits.softmax(-1).numpy()
    assert list(nlp.get_pipe("bert_textcat").labels) == ["card", "fx", "other"]
    assert_allclose(ours, expected, atol=1e-5)


def imported_activation(path: Path) -> str:
    head = HFCheckpoint(str(path)).sequence_classifier()
    assert head is not None
    return head.pooler_activation


@pytest.mark.parametrize("family", FAMILIES)
def test_an_imported_token_head_tags_what_transformers_tags(family: str, build: Build) -> None:
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    path = build(family, "token", tags)
    nlp = spacy.blank("en")
    encoder = {"max_length": 64, "predict_precision": "fp32"}
    nlp.add_pipe("bert_ner", config={"model": {"encoder": encoder}})
    nlp.config["initialize"]["components"]["bert_ner"] = loader_config(path)
    nlp.initialize()
    ner = nlp.get_pipe("bert_ner")
    docs = [nlp.make_doc(text) for text in (TEXT, "Paris is in London .")]
    order = [tags.index(tag) for tag in ner.tag_set.tags]
    for ours, theirs in zip(ner.predict(docs), hf_first_piece_probs(path, docs)):
        assert_allclose(ours, theirs[:, order], atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_an_imported_qa_head_answers_what_transformers_answers(family: str, build: Build) -> None:
    from transformers import AutoModelForQuestionAnswering, pipeline

    path = build(family, "qa")
    settings = {"max_seq_len": 40, "doc_stride": 8, "max_question_len": 20}
    nlp = spacy.blank("en")
    model: Dict[str, Any] = dict(settings, encoder={"predict_precision": "fp32"})
    nlp.add_pipe("bert_qa", config={"model": model, "top_k": 2})
    nlp.config["initialize"]["components"]["bert_qa"] = loader_config(path)
    nlp.initialize(lambda: [Example(nlp.make_doc("x"), nlp.make_doc("x"))])
    qa = pipeline(
        "question-answering",
        model=hf_model(path, AutoModelForQuestionAnswering),
        tokenizer=hf_tokenizer(path),
    )
    for context in (TEXT, LONG):
        doc = nlp.make_doc(context)
        doc._.questions = {"q": QUESTION}
        ours = [(a["text"], a["start"], a["end"]) for a in nlp(doc)._.answers]
        theirs = qa(question=QUESTION, context=context, top_k=2, **settings)
        if isinstance(theirs, dict):  # the pipeline returns a lone answer bare
            theirs = [theirs]
        assert ours == [(a["answer"], a["start"], a["end"]) for a in theirs], context
        scores = [a["score"] for a in nlp(doc)._.answers]
        assert scores == pytest.approx([a["score"] for a in theirs], abs=1e-5)


def predictions(nlp: Language) -> List[Dict[str, Any]]:
    out = []
    for doc in nlp.pipe([TEXT, LONG, ""]):
        out.append(
            {
                "cats": numpy.array(list(doc.cats.values())),
                "ents": [(e.start_char, e.end_char, e.label_) for e in doc.ents],
                "answers": doc._.answers,
            }
        )
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_components_train_predict_round_trip_and_run_in_int8_and_bf16(
    family: str, build: Build, tmp_path: Path
) -> None:
    nlp = family_pipeline(build(family))
    optimizer = nlp.initialize(lambda: labelled(nlp))
    for _ in range(2):
        losses: Dict[str, float] = {}
        nlp.update(labelled(nlp), sgd=optimizer, losses=losses)
    assert all(numpy.isfinite(loss) for loss in losses.values()), losses
    assert set(losses) >= {"bert_textcat", "bert_ner", "bert_qa"}
    before = predictions(nlp)
    nlp.to_disk(tmp_path / "nlp")
    after = predictions(spacy.load(tmp_path / "nlp"))
    for a, b in zip(before, after):
        assert_allclose(a["cats"], b["cats"], atol=1e-6)
        assert a["ents"] == b["ents"]
        assert a["answers"] == b["answers"]
    for precision in ("int8", "bf16"):
        reduced = predictions(load_pipeline(tmp_path / "nlp", precision=precision))
        for a, b in zip(before, reduced):
            assert_allclose(a["cats"], b["cats"], atol=0.1, err_msg=f"{family} {precision}")
            assert {answer["key"] for answer in b["answers"]} <= {"who"}


@pytest.mark.parametrize("family", FACTORIZED)
def test_case_embeddings_live_at_the_embedding_size(family: str, build: Build) -> None:
    encoder = BertEncoderV2(case_embeddings=True)
    HFCheckpoint(str(build(family))).load_encoder(encoder)
    module = hf_shim(encoder).module
    assert module.case_embeddings is not None
    width = module.transformer.get_input_embeddings().embedding_dim
    assert module.case_embeddings.embedding_dim == width < module.width


def write_corpus(nlp: Language, path: Path, questions: bool) -> Path:
    """The labelled docs (entities, cats, and with `questions` a question and its
    gold answers) as a DocBin."""
    from spacy.tokens import DocBin

    ensure_qa_extensions()
    bin_ = DocBin(store_user_data=True)
    for example in labelled(nlp, questions):
        doc = example.reference
        if not questions:
            pass
        elif "Paris" in doc.text:
            start = doc.text.index("Paris")
            doc._.gold_answers = {"who": [{"text": "Paris", "start": start, "end": start + 5}]}
        else:
            doc._.gold_answers = {"who": []}
        bin_.add(doc)
    bin_.to_disk(path)
    return path


SMALL_QA = {"max_seq_len": 40, "doc_stride": 8, "max_question_len": 16}
ROOT = Path(__file__).parent.parent
# The shipped configs whose encoder paths differ: case embeddings (ner), pairs
# (qa), a shared encoder with branches, slots and vectors (multitask: its heads are
# textcat's, textcat_multilabel's and qa_slots'), label prototypes (route: also
# textcat_fewshot's model). Every family trains each; the other configs (but the
# one on spacy-transformers' encoder) train on BERT.
FAMILY_CONFIGS = ("ner.cfg", "qa.cfg", "multitask.cfg", "route.cfg")
OTHER_CONFIGS = sorted(
    p.name
    for p in (ROOT / "configs").glob("*.cfg")
    if p.name not in FAMILY_CONFIGS and p.name != "textcat_trf.cfg"
)
TRAINED = [(f, c) for f in FAMILIES for c in FAMILY_CONFIGS] + [
    ("bert-uncased", c) for c in OTHER_CONFIGS
]


def small_overrides(config_name: str) -> Dict[str, Any]:
    """Overrides that make a shipped config's encoders and QA windows tiny."""
    from spacy.util import load_config

    config = load_config(ROOT / "configs" / config_name)
    overrides: Dict[str, Any] = {}
    for name, component in config["components"].items():
        model = component.get("model", {})
        for where, block in (("model", model), ("model.encoder", model.get("encoder", {}))):
            if str(block.get("@architectures", "")).startswith("spacy-bert-pipes.BertEncoder"):
                prefix = f"components.{name}.{where}"
                overrides.update({f"{prefix}.{k}": v for k, v in SMALL.items()})
        if "max_seq_len" in model:
            overrides.update({f"components.{name}.model.{k}": v for k, v in SMALL_QA.items()})
    corpora = [key for key in config["paths"] if key.endswith(("train", "dev"))]
    return {"corpora": corpora, **overrides}


@pytest.mark.parametrize("family,config", TRAINED)
def test_spacy_train_runs_the_shipped_config(
    family: str, config: str, build: Build, tmp_path: Path
) -> None:
    """Every shipped config, trained 2 steps on the family's checkpoint, gives
    a pipeline that predicts (configs/ner.cfg: case embeddings; qa.cfg: pairs)."""
    from spacy.cli.train import train

    # questions that come with a doc need a bert_qa with a pass of its own
    questions = config == "qa.cfg"
    corpus = write_corpus(spacy.blank("en"), tmp_path / "train.spacy", questions)
    small = small_overrides(config)
    overrides: Dict[str, Any] = {
        **{f"paths.{key}": str(corpus) for key in small.pop("corpora")},
        "paths.encoder": str(build(family)),
        "training.max_steps": 2,
        "training.eval_frequency": 2,
        **small,
    }
    if family == "albert" and config == "multitask.cfg":
        # its vectors and intents own top layers, which ALBERT's shared layer forbids
        with pytest.raises(ValueError, match="ALBERT runs one shared layer.*own_layers = 0"):
            train(ROOT / "configs" / config, tmp_path / "out", overrides=overrides)
        return
    train(ROOT / "configs" / config, tmp_path / "out", overrides=overrides)
    nlp = spacy.load(tmp_path / "out" / "model-last")
    doc = nlp.make_doc(LONG)
    if questions:
        doc._.questions = {"who": QUESTION}
    doc = nlp(doc)
    if "bert_qa" in nlp.pipe_names or "slots" in nlp.pipe_names:
        assert doc._.answers is not None
    assert doc.cats or "bert_ner" in nlp.pipe_names or "bert_qa" in nlp.pipe_names


@pytest.mark.parametrize("family", FAMILIES)
def test_a_branch_of_every_layer_starts_out_computing_the_shared_output(
    family: str, build: Build
) -> None:
    """A head's own copy of the top layers (own_layers), run on a padded batch:
    a copy of all the layers computes what the transformer computes, where the
    family can have one (ALBERT shares one layer: a clear error)."""
    from spacy_bert_pipes.models.transformer.transformer_module import TransformerModule

    module = TransformerModule(hf_model(build(family)), "last", "fp32").eval()
    if family == "albert":
        with pytest.raises(ValueError, match="ALBERT runs one shared layer.*own_layers = 0"):
            module.add_branch("intents", 2)
        return
    module.add_branch("intents", 2)
    ids = torch.tensor([[5, 50, 51, 6, 0, 0, 0, 0], [5, 50, 51, 52, 53, 54, 55, 6]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0, 0], [1] * 8])
    with torch.no_grad():
        out = module(ids, mask, torch.zeros_like(ids))
    width = module.width
    real = mask.bool()
    torch.testing.assert_close(out[..., width:][real], out[..., :width][real])


@pytest.fixture(scope="module")
def engines_run(build: Build, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """An XLM-R pipeline (SentencePiece, </s></s> pairs, one segment) saved, an
    input of 24 rows, and the bytes the local engine writes of it."""
    from annotate_helpers import run, word_rows, write_input

    folder = tmp_path_factory.mktemp("engines")
    family_pipeline(build("xlm-roberta")).to_disk(folder / "nlp")
    records = [dict(row, text=row["text"].title()) for row in word_rows(24, 5, 3, 30)]
    input_path = write_input(folder, "jsonl", records)
    options = {"batch_size": 4, "chunk_size": 8, "precision": "fp32"}
    run(str(folder / "nlp"), input_path, folder / "local.jsonl", **options)
    return {
        "pipeline": str(folder / "nlp"),
        "input": input_path,
        "options": options,
        "local": (folder / "local.jsonl").read_bytes(),
    }


def test_two_workers_write_the_local_engines_bytes(
    engines_run: Dict[str, Any], tmp_path: Path
) -> None:
    from annotate_helpers import run

    output = tmp_path / "workers.jsonl"
    run(engines_run["pipeline"], engines_run["input"], output, **engines_run["options"], workers=2)
    assert output.read_bytes() == engines_run["local"]


@pytest.mark.parametrize("family", FAMILIES)
def test_frozen_bottom_layers_get_no_gradients(family: str, build: Build) -> None:
    """frozen_layers = 1: the embeddings and the first layer stop training, the
    rest train (ALBERT, one shared layer: a clear error)."""
    from spacy_bert_pipes.models.transformer.transformer_module import set_frozen_layers

    transformer = hf_model(build(family))
    if family == "albert":
        with pytest.raises(ValueError, match="ALBERT runs one shared layer.*frozen_layers = 0"):
            set_frozen_layers(transformer, 1)
        return
    set_frozen_layers(transformer, 1)
    trains = {name for name, p in transformer.named_parameters() if p.requires_grad}
    frozen = {name for name, p in transformer.named_parameters() if not p.requires_grad}
    assert any("embeddings" in name for name in frozen)
    assert any(".0." in name for name in frozen) and not any(".0." in name for name in trains)
    assert any(".1." in name for name in trains)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_cut_stack_computes_what_the_smaller_checkpoint_computes(
    family: str, build: Build, tmp_path: Path
) -> None:
    """`shrink`'s cut (`keep_layers`): the bottom layer kept is what transformers
    computes with the checkpoint loaded at one layer, and it saves and loads as
    a one-layer model of its family (ALBERT, one shared layer: a clear error)."""
    from spacy_bert_pipes.models.transformer.transformer_module import keep_layers, layer_count

    path = build(family)
    transformer = hf_model(path)
    if family == "albert":
        assert layer_count(transformer) == 0
        with pytest.raises(ValueError, match="ALBERT shares one layer"):
            keep_layers(transformer, [0])
        return
    assert layer_count(transformer) >= 2
    keep_layers(transformer, [0])
    assert layer_count(transformer) == 1
    inputs = hf_tokenizer(path)(TEXT, return_tensors="pt")
    inputs.pop("token_type_ids", None)
    layers_attr = "n_layers" if family == "distilbert" else "num_hidden_layers"
    from transformers import AutoModel

    one = AutoModel.from_pretrained(path, **{layers_attr: 1}).eval()
    transformer.save_pretrained(tmp_path / "cut")
    saved = AutoModel.from_pretrained(tmp_path / "cut").eval()
    assert getattr(saved.config, layers_attr) == 1
    with torch.no_grad():
        cut = transformer(**inputs).last_hidden_state
        assert_allclose(cut.numpy(), one(**inputs).last_hidden_state.numpy(), atol=1e-5)
        assert_allclose(cut.numpy(), saved(**inputs).last_hidden_state.numpy(), atol=1e-5)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "albert"])
def test_a_cut_student_learns_the_teachers_hidden_states(
    family: str, build: Build, tmp_path: Path
) -> None:
    """`shrink --align-steps`: every encoder of a pipeline (the shared one, with
    case embeddings, and QA's own) cut to one layer learns its teacher's hidden
    states: the loss falls and the student still annotates with every head."""
    from spacy_bert_pipes.multitask.hidden_states import align
    from spacy_bert_pipes.multitask.shrink import cut, encoders

    nlp = family_pipeline(build(family))
    nlp.initialize(lambda: labelled(nlp))
    nlp.to_disk(tmp_path / "teacher")
    teacher = spacy.load(tmp_path / "teacher")
    student = spacy.load(tmp_path / "teacher")
    kept = cut(student, 1, "teacher")
    assert set(kept) == {"bert_encoder", "bert_qa"}
    docs = [student.make_doc(text) for text in [TEXT, LONG, "my card", "who is in paris"] * 2]
    for name, layers in kept.items():
        summary = align(
            encoders(teacher)[name],
            encoders(student)[name],
            layers,
            docs,
            30,
            batch_size=4,
            learn_rate=1e-3,
            name=name,
            progress=False,
        )
        assert summary.loss_last < summary.loss_first, (name, summary)
    doc = student(TEXT)
    assert doc.cats and doc.has_annotation("ENT_IOB") and doc._.answers is not None
