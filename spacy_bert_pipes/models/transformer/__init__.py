"""The Hugging Face transformer in torch, behind a thinc Shim.

transformer_module.py  the torch module the encoder runs (an AutoModel, one
                       matrix per window, frozen layers, case embeddings)
branches.py            a head's own copy of the top layers
precision.py           fp32 / bf16 / fp16 / int8: names, "auto", torch settings
onnx_int8.py           int8 prediction: the module exported to ONNX, quantized, run
                       by ONNX Runtime
hf_shim.py             the thinc Shim: forward, backward, devices, bytes
hf_bytes.py            a saved transformer and tokenizer read back, checked
serial.py              checks on a saved encoder's bytes before anything acts on them
fused_adam.py          thinc's Adam step on all of the module's weights at once
"""
