"""thinc Models and the torch they run, by concern (lower floors first).

types.py      the plain data between the encoder and the heads (no torch)
text/         from text to wordpieces: tokens, segments, windows, alignment
transformer/  the Hugging Face transformer in torch, behind a thinc Shim
encoder/      the encoders heads read from, and where their weights come from
heads/        the task heads: classes, prototypes, tags, answers
"""
