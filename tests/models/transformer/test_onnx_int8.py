"""The int8 backend: the module exported to ONNX, quantized and run by ONNX Runtime,
serving what the fp32 module serves (hidden-layer combinations, casing
embeddings, branches), built from the weights in memory and never from a file."""

import numpy
import pytest
import spacy
import torch
from numpy.testing import assert_allclose
from transformers import BertModel

from spacy_bert_pipes.loading import load_pipeline
from spacy_bert_pipes.models.transformer import onnx_int8
from spacy_bert_pipes.models.transformer.onnx_int8 import Int8Module, Int8Unavailable
from spacy_bert_pipes.models.transformer.transformer_module import TransformerModule
from tests.helpers import loader_config

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["my card still not arrived", "", "why is my card not working? " * 12]


def module(tiny_bert, hidden_layers="last", case_embeddings=False, branch=False):
    transformer = BertModel.from_pretrained(tiny_bert)
    mod = TransformerModule(transformer, hidden_layers, "fp32", case_embeddings).eval()
    if case_embeddings:  # zeros at first: give them values the graph must carry
        torch.nn.init.normal_(mod.case_embeddings.weight)
    if branch:
        mod.add_branch("intents", 1)
    return mod


def batch(n_inputs):
    torch.manual_seed(1)
    ids = torch.randint(5, 60, (3, 11))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # a padded window
    ids[1, 6:] = 0
    inputs = [ids, mask, torch.zeros_like(ids)]
    if n_inputs == 4:
        inputs.append(torch.randint(0, 3, ids.shape))
    return inputs


@pytest.mark.parametrize(
    "hidden_layers,case_embeddings,branch",
    [("last", False, False), ("concat_last_four", False, False), ("last", True, True)],
)
def test_int8_module_computes_what_the_module_computes(
    tiny_bert, hidden_layers, case_embeddings, branch
):
    # concat_last_four needs 4 layers: the tiny BERT has 2, so build a deeper one
    if hidden_layers != "last":
        from tests.helpers import write_tiny_bert

        tiny_bert = write_tiny_bert(tiny_bert.parent / "tiny_bert_4", num_hidden_layers=4)
    mod = module(tiny_bert, hidden_layers, case_embeddings, branch)
    inputs = batch(4 if case_embeddings else 3)
    with torch.inference_mode():
        expected = mod(*inputs).numpy()
    got = Int8Module.build(mod)(*inputs).numpy()
    # (batch, length, width), width with the branch's output beside the shared one
    assert got.shape == expected.shape and got.dtype == numpy.float32
    assert not numpy.array_equal(got, expected)  # really quantized
    mask = inputs[1].numpy().astype(bool)
    a, b = got[mask], expected[mask]
    cosine = (a * b).sum(-1) / numpy.linalg.norm(a, axis=-1) / numpy.linalg.norm(b, axis=-1)
    assert cosine.min() > 0.98


def test_building_leaves_the_module_computing_what_it_did(tiny_bert):
    mod = module(tiny_bert, branch=True)
    inputs = batch(3)
    with torch.inference_mode():
        before = mod(*inputs).numpy()
    Int8Module.build(mod)
    with torch.inference_mode():
        assert mod(*inputs).numpy().tobytes() == before.tobytes()
        assert mod(*inputs).numpy().tobytes() == before.tobytes()


def test_case_ids_are_an_input_of_the_graph_only_when_the_module_has_them(tiny_bert):
    assert Int8Module.build(module(tiny_bert)).input_names == [
        "input_ids",
        "attention_mask",
        "token_type_ids",
    ]
    with_cases = Int8Module.build(module(tiny_bert, case_embeddings=True))
    assert with_cases.input_names[-1] == "case_ids"
    with pytest.raises(ValueError, match="needs the inputs"):
        with_cases(*batch(3))


def test_a_session_per_thread_count_and_the_same_bytes_on_each(tiny_bert):
    int8 = Int8Module.build(module(tiny_bert))
    inputs = batch(3)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = int8(*inputs).numpy()
        torch.set_num_threads(2)
        two = int8(*inputs).numpy()
    finally:
        torch.set_num_threads(before)
    assert sorted(int8._sessions) == [1, 2]
    assert one.tobytes() == two.tobytes()


def test_without_onnxruntime_int8_says_what_to_install(tiny_bert, monkeypatch):
    monkeypatch.setattr(onnx_int8, "int8_available", lambda: False)
    with pytest.raises(Int8Unavailable, match="pip install onnxruntime onnx"):
        Int8Module.build(module(tiny_bert))


def test_the_graph_follows_the_weights(tiny_bert):
    mod = module(tiny_bert)
    inputs = batch(3)
    before = Int8Module.build(mod)(*inputs).numpy()
    with torch.no_grad():
        for param in mod.parameters():
            param.mul_(1.5)
    after = Int8Module.build(mod)(*inputs).numpy()
    assert not numpy.allclose(before, after, atol=1e-3)


def tiny_textcat(tiny_bert, path):
    nlp = spacy.blank("en")
    textcat = nlp.add_pipe("bert_textcat")
    for label in ("card", "fx"):
        textcat.add_label(label)
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    nlp.initialize()
    nlp.to_disk(path)
    return path


def predictions(nlp):
    return [list(doc.cats.values()) for doc in nlp.pipe(TEXTS)]


def test_a_foreign_graph_in_the_pipeline_folder_is_never_read(tiny_bert, tmp_path):
    path = tiny_textcat(tiny_bert, tmp_path / "pipeline")
    clean = predictions(load_pipeline(path, precision="int8"))
    # Files a backend might be expected to find, in every folder of the pipeline:
    # a graph whose weights say something else, and a pickle that would run code.
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    import pickle

    foreign = Int8Module.build(module(tiny_bert, case_embeddings=True)).graph
    for folder in [path, *[p for p in path.rglob("*") if p.is_dir()]]:
        for name in ("model.onnx", "int8.onnx", "encoder_int8.onnx"):
            (folder / name).write_bytes(foreign)
        (folder / "int8.pkl").write_bytes(pickle.dumps(Payload()))
    tampered = predictions(load_pipeline(path, precision="int8"))
    assert tampered == clean
    assert not marker.exists()


def test_int8_pipeline_matches_fp32_closely(tiny_bert, tmp_path):
    path = tiny_textcat(tiny_bert, tmp_path / "pipeline")
    fp32 = predictions(load_pipeline(path, precision="fp32"))
    int8 = predictions(load_pipeline(path, precision="int8"))
    assert_allclose(numpy.array(int8), numpy.array(fp32), atol=0.05)


def test_the_feed_forward_down_projections_stay_fp32(tiny_bert):
    import onnx

    mod = module(tiny_bert)
    fp32_graph, _ = onnx_int8.export_fp32(mod)
    names = onnx_int8.down_projections(fp32_graph)
    # the tiny BERT: 2 layers, one intermediate -> hidden product each
    assert len(names) == 2 and all("output/dense" in name for name in names)
    quantized = onnx.load_from_string(Int8Module.build(mod).graph)
    kept = {node.name for node in quantized.graph.node if node.op_type == "MatMul"}
    assert set(names) <= kept
    # int8 per layer: query, key, value, attention output, intermediate
    integer = [n for n in quantized.graph.node if n.op_type == "MatMulInteger"]
    assert len(integer) == 2 * 5


def test_quantizing_keeps_the_log_quiet_and_other_records_pass(tiny_bert, caplog):
    """ONNX Runtime's advice to pre-process the graph is dropped at every build;
    a record logged meanwhile by anything else still reaches the log."""
    import logging

    fp32_graph, _ = onnx_int8.export_fp32(module(tiny_bert))
    with caplog.at_level(logging.WARNING):
        onnx_int8.quantize(fp32_graph)
        logging.warning("a warning of the user's own")
    messages = [record.getMessage() for record in caplog.records]
    assert not any("pre-processing" in message for message in messages)
    assert "a warning of the user's own" in messages
    assert onnx_int8._drop_preprocessing_advice not in logging.getLogger().filters


def test_a_copy_or_pickle_carries_the_graph_and_opens_its_own_session(tiny_bert):
    """A frozen copy of an encoder that has predicted in int8 (vector_anchor's
    teacher) copied its ONNX Runtime session, which cannot be copied."""
    import copy
    import pickle

    int8 = Int8Module.build(module(tiny_bert))
    inputs = batch(3)
    before = int8(*inputs)  # opens a session
    for other in (copy.deepcopy(int8), pickle.loads(pickle.dumps(int8))):
        assert other._sessions == {}
        torch.testing.assert_close(other(*inputs), before)
    assert int8._sessions  # the original keeps its own
