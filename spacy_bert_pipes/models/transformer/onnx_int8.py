"""int8 prediction on the CPU: the encoder's module run by ONNX Runtime, quantized.

What `predict_precision = "int8"` runs (`hf_shim.HFShim` asks `Int8Module.build`
for it on first use and drops it when the weights change):

1. the `TransformerModule` (the transformer with its hidden-layer combination,
   casing embeddings and branches, so the one output every head reads) is
   traced to an ONNX graph in memory, from the fp32 weights the shim holds;
2. ONNX Runtime's dynamic quantization turns its matrix products with weights
   into int8 ones: weights with a scale per output channel, activations
   quantized per batch; attention, layer norms and softmax stay fp32;
3. an ONNX Runtime session runs the graph, one per intra-op thread count
   (ONNX Runtime fixes the count when a session is made, and `annotate` runs
   every process on one thread, see `runtime/threads.py`).

Nothing is read from a pipeline folder or written beside it: the graph is built
from the weights that `from_bytes` checked (safetensors, no pickle), so a
pipeline stays data and a stray or tampered graph file has no way in. The build
costs a few seconds on first use (docs/precision.md) and nothing is cached on
disk. Training never runs here: the fp32 module stays what trains and is saved.
"""

import copy
import io
import logging
import os
import tempfile
import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch

from .precision import int8_available
from .transformer_module import TransformerModule

# Names of the graph's inputs, in TransformerModule.forward's order.
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids", "case_ids")
OPSET = 17


class Int8Unavailable(RuntimeError):
    """ONNX Runtime or onnx is not installed."""


class _Traced(torch.nn.Module):
    """The module's forward with positional inputs and fp32, as the tracer wants it."""

    def __init__(self, module: TransformerModule):
        super().__init__()
        self.module = module

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.module(*inputs, precision="fp32")


class Int8Module(torch.nn.Module):
    """A quantized ONNX copy of a TransformerModule, called like it.

    It holds no torch parameters; `forward` takes the same (batch, length) long
    tensors and returns the same (batch, length, width) float32 tensor.
    """

    def __init__(self, graph: bytes, input_names: List[str]):
        super().__init__()
        self.graph = graph
        self.input_names = input_names
        self._sessions: Dict[int, Any] = {}

    def __getstate__(self) -> Dict[str, Any]:
        """Copies and pickles (a frozen copy of the encoder for `vector_anchor`,
        `nlp.pipe(n_process=...)`) carry the graph, not its sessions, which
        cannot be copied: each copy opens its own on first use."""
        state = dict(super().__getstate__())
        state["_sessions"] = {}
        return state

    @classmethod
    def build(cls, module: TransformerModule) -> "Int8Module":
        """Export `module` (on the CPU, in eval mode) and quantize it."""
        if not int8_available():
            raise Int8Unavailable(
                "predict_precision = 'int8' needs onnxruntime and onnx: "
                "pip install onnxruntime onnx (or use 'fp32' or 'bf16')"
            )
        fp32_graph, names = export_fp32(module)
        return cls(quantize(fp32_graph), names)

    def session(self) -> Any:
        """The ONNX Runtime session for torch's current intra-op thread count."""
        threads = torch.get_num_threads()
        session = self._sessions.get(threads)
        if session is None:
            import onnxruntime

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
            # Idle threads sleep between batches: the host work around the
            # forward (tokenizing, the heads) runs on the same cores.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.log_severity_level = 3
            session = onnxruntime.InferenceSession(
                self.graph, options, providers=["CPUExecutionProvider"]
            )
            self._sessions[threads] = session
        return session

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        case_ids: Optional[torch.Tensor] = None,
        precision: Optional[str] = None,
    ) -> torch.Tensor:
        """precision: ignored (always int8); kept so the shim calls both alike."""
        # input_ids, attention_mask, token_type_ids, case_ids: (batch, length)
        given = (input_ids, attention_mask, token_type_ids, case_ids)
        feed = {
            name: tensor.detach().cpu().numpy()
            for name, tensor in zip(INPUT_NAMES, given)
            if name in self.input_names and tensor is not None
        }
        if len(feed) != len(self.input_names):
            raise ValueError(f"The int8 encoder needs the inputs {self.input_names}")
        (hidden,) = self.session().run(None, feed)
        # (batch, length, width)
        return torch.from_numpy(hidden)


def _example_inputs(module: TransformerModule) -> List[torch.Tensor]:
    # Two windows of different lengths trace the same graph as one; the axes
    # are declared dynamic below. Ids 0-2 exist in every vocabulary.
    ids = torch.tensor([[1, 2, 2, 2, 2, 2, 2, 2], [1, 2, 2, 2, 0, 0, 0, 0]], dtype=torch.long)
    mask = (ids != 0).long()
    inputs = [ids, mask, torch.zeros_like(ids)]
    if module.case_embeddings is not None:
        inputs.append(torch.zeros_like(ids))
    return inputs


def export_fp32(module: TransformerModule) -> Tuple[bytes, List[str]]:
    """The module as an fp32 ONNX graph (TorchScript tracing, no file), and the
    names of the inputs it reads."""
    inputs = _example_inputs(module)
    if any(p.device.type != "cpu" for p in module.parameters()):
        raise ValueError(
            "predict_precision = 'int8' runs on the CPU only; use 'bf16' or 'fp16' on a GPU"
        )
    names = list(INPUT_NAMES[: len(inputs)])
    axes = {name: {0: "batch", 1: "length"} for name in [*names, "hidden"]}
    buffer = io.BytesIO()
    # Tracing changes the traced module itself: after an export, the same
    # module's torch forward gave other outputs from run to run (up to 2.0 in a
    # hidden unit of the default encoder). The copy is traced; the module that
    # trains and predicts in fp32 is left as it was.
    traced = copy.deepcopy(module).eval()
    with warnings.catch_warnings(), torch.no_grad():
        # The tracer warns about Python branches on shapes in the HF code
        # (mask handling), which the dynamic axes make general.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Traced(traced),
            tuple(inputs),
            buffer,
            input_names=names,
            output_names=["hidden"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    graph = buffer.getvalue()
    # The exporter drops inputs the graph never reads (DistilBERT's and
    # DeBERTa's segment ids): the session is fed those it has.
    return graph, graph_inputs(graph)


def graph_inputs(graph: bytes) -> List[str]:
    """The names of the graph's inputs, in order."""
    import onnx

    return [value.name for value in onnx.load_from_string(graph).graph.input]


def down_projections(graph: bytes) -> List[str]:
    """The matrix products whose weight has more inputs than outputs: in a BERT
    layer, the feed-forward block's second product (intermediate -> hidden),
    which reads the GELU's output, the activations with the widest range."""
    import onnx

    model = onnx.load_from_string(graph)
    shapes = {init.name: list(init.dims) for init in model.graph.initializer}
    return [
        node.name
        for node in model.graph.node
        if node.op_type == "MatMul"
        and len(shapes.get(node.input[1], [])) == 2
        and shapes[node.input[1]][0] > shapes[node.input[1]][1]
    ]


def _drop_preprocessing_advice(record: logging.LogRecord) -> bool:
    """ONNX Runtime's quantizer advises its shape pre-processing on the root logger
    at every call; the graph here is small and exported with its shapes, so the
    advice is noise on every int8 load. Every other record passes."""
    return not record.getMessage().startswith("Please consider to run pre-processing")


def quantize(graph: bytes, keep_down_projections: bool = True) -> bytes:
    """Dynamic int8 quantization of a graph's weighted matrix products, but for
    the down projections (`down_projections`), which stay fp32 unless
    `keep_down_projections` is false.

    Weights are signed int8 with a scale per output channel (per-tensor scales
    lost accuracy on the heads, as with torch's own dynamic quantization);
    activations are unsigned 8-bit with a scale per call, ONNX Runtime's u8s8
    kernels. One scale over a whole batch of GELU outputs is the weak point:
    with the down projections quantized, the default encoder's mean-pooled
    vectors of 300 Banking77 queries had a cosine to fp32 of 0.987 at the least
    (0.993 on average); kept in fp32, 0.992 (0.996), for about a quarter more
    time (docs/precision.md).
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="bert-pipes-int8-") as folder:
        source = os.path.join(folder, "fp32.onnx")
        target = os.path.join(folder, "int8.onnx")
        with open(source, "wb") as f:
            f.write(graph)
        root = logging.getLogger()
        root.addFilter(_drop_preprocessing_advice)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                quantize_dynamic(
                    source,
                    target,
                    per_channel=True,
                    weight_type=QuantType.QInt8,
                    op_types_to_quantize=["MatMul", "Gemm"],
                    nodes_to_exclude=down_projections(graph) if keep_down_projections else [],
                    extra_options={"MatMulConstBOnly": True},
                )
        finally:
            root.removeFilter(_drop_preprocessing_advice)
        quantized = onnx.load(target)
    return quantized.SerializeToString()
