"""Task heads on the encoder's output: classes, prototypes, tags and answers.

linear.py      `TextCatModel.v1` (a doc's pooled vector) and `TokenTaggerModel.v1`
               (each token's vectors) through a linear layer
prototypes.py  `PrototypeCatModel.v1`: labels as prototypes, by cosine
tags.py        tag schemes and constrained (Viterbi) decoding
qa.py          `QAModel.v1`: question/context windows, start and end logits
qa_decode.py   QA training targets and the decoding of logits into answers
slots.py       `SlotQAModel.v1`: fixed questions answered from the doc's own encoding
"""
