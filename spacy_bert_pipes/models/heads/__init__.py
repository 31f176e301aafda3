"""Task heads on the encoder's output: classes, prototypes, tags and answers.

linear.py      `TextCatModel.v1` (a doc's pooled vector) and `TokenTaggerModel.v1`
               (each token's vectors) through a linear layer
prototypes.py  `PrototypeCatModel.v1`: labels as prototypes, by cosine
tags.py        tag schemes and constrained (Viterbi) decoding
qa.py          `QAModel.v1`: question/context windows, start and end logits
qa_types.py    the plain data between the QA model and its decoding
qa_decode.py   QA training targets and the decoding of logits into answers
slots.py       `SlotQAModel.v1`: fixed questions answered from the doc's own encoding
scope.py       out-of-scope scores and their calibration (max_prob, mahalanobis, knn)
fixed_order.py products whose bits depend on their own rows alone, for scores that
               must not depend on the batch or the BLAS threads
guard.py, vector_losses.py  the new-label guard; pair and anchor losses
"""
