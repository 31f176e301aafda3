"""From text to wordpieces: tokenization, sentence segments, windows and alignment.

tokens.py         the fast tokenizer once per batch of texts; a batch of docs cut
                  into what is encoded apart
casing.py         the casing class of each wordpiece (`case_embeddings`)
segments.py       what the encoder reads apart: the whole doc or each sentence
splitter.py       a sentence splitter learned from the training docs
windows.py        windows of at most `max_length` wordpieces, with stride, and
                  the merge of their vectors
window_layout.py  a batch's windows as arrays (ids, masks, positions)
align.py          wordpieces to spaCy tokens, by character offsets
No torch here.
"""
