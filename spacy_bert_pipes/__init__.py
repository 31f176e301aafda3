"""spacy-bert-pipes: BERT components for spaCy.

Importing the package registers the factories (`bert_encoder`, `bert_textcat`,
`bert_ner`, `bert_qa`, `bert_vectors`) and the architectures, loaders, scorers
and the training logger;
spaCy also finds them through the package's entry points. torch and transformers
are imported only when a component is built.
"""

from . import scorers, training_log
from .about import __version__
from .models.encoder import bert, listener, loaders, trf
from .models.heads import linear, prototypes
from .models.types import DocEncoding
from .pipeline import pair_batches
from .pipeline.encoder import BertEncoderPipe, make_bert_encoder
from .pipeline.ner import BertEntityRecognizer, make_bert_ner
from .pipeline.qa import BertQuestionAnswerer, make_bert_qa
from .pipeline.textcat import BertTextCategorizer, make_bert_textcat
from .pipeline.vectors import BertVectors, make_bert_vectors

__all__ = [
    "__version__",
    "BertEncoderPipe",
    "BertEntityRecognizer",
    "BertQuestionAnswerer",
    "BertTextCategorizer",
    "BertVectors",
    "DocEncoding",
    "bert",
    "linear",
    "listener",
    "loaders",
    "make_bert_encoder",
    "make_bert_ner",
    "make_bert_qa",
    "make_bert_textcat",
    "make_bert_vectors",
    "pair_batches",
    "prototypes",
    "scorers",
    "training_log",
    "trf",
]
