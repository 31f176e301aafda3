"""The encoders heads read from: Docs in, one DocEncoding per Doc out.

bert.py      `BertEncoder.v1/v2`: the BERT encoder as a thinc Model
listener.py  `EncoderListener.v1-v3`: a head's stand-in for a shared `bert_encoder`
trf.py       `TrfListenerEncoder.v1`: a spacy-transformers `transformer`'s output
pooling.py   the checkpoint's sentence-embedding pooling of the vectors
anchor.py    keeps a fine-tuned encoder's doc vectors near the checkpoint's
oom.py       a prediction batch that does not fit in device memory, split
loaders.py   `HFCheckpoint.v1`: where pretrained weights (and imported heads) come from
"""
