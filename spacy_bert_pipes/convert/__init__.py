"""Read labelled data into spaCy Docs and `.spacy` files.

Text classification: the readers yield `TextcatRow`s, and `rows_to_docs` turns
them into Docs with a score in `doc.cats` for every label. Named entities:
`read_ner_docs` (or one of the readers it dispatches to) yields Docs with
`doc.ents` set, from CoNLL columns, JSONL texts with character offsets, or
spaCy v2 JSON. Question answering: `read_squad` and `read_restaurant8k` yield
a Doc per context with its questions in `doc._.questions` and their reference
answers in `doc._.gold_answers`. `write_docbin` saves any kind (with
`store_user_data=True` for the QA extensions). Every problem with the data
raises a `ConversionError` whose message starts with the place it was found,
`"{path}:{line}: "` (`"{path}:record {n}: "` for a JSON list), so no row,
token or entity is ever dropped or guessed at silently.

fields.py      the helpers every reader shares (text and JSON files, JSON fields)
textcat.py     TextcatRow, read_textcat_rows, read_nluplusplus, read_clinc150, rows_to_docs ...
dev_split.py   split_dev: labelled rows into train and dev, stratified by label (--dev-share)
banking77_oos.py  build_banking77_oos: BANKING77-OOS rebuilt from Banking77 and CLINC150
clinc150_discover.py  build_clinc150_discover: CLINC150 with intents held out, and traffic
ner.py         read_ner_docs, read_conll_ner, read_entity_jsonl, read_spacy_json
qa.py          read_squad, read_restaurant8k
docbin.py      write_docbin
steps.py       training_steps: epochs of a converted corpus as spacy train's steps
"""

from ..io.errors import ConversionError
from .banking77_oos import Banking77OOS, build_banking77_oos, read_intent_list
from .clinc150_discover import Clinc150Discover, build_clinc150_discover, held_out_intents
from .dev_split import DevSplit, split_dev
from .docbin import write_docbin
from .ner import (
    AUTO_SPANS_FIELDS,
    CONLL_DOCSTART,
    NER_SUFFIXES,
    NerFileFormat,
    read_conll_ner,
    read_entity_jsonl,
    read_ner_docs,
    read_spacy_json,
)
from .qa import RESTAURANT8K_QUESTIONS, RESTAURANT8K_SLOTS, read_restaurant8k, read_squad
from .steps import TrainingSteps, count_docs, training_steps
from .textcat import (
    AUTO_LABEL_COLUMNS,
    CLINC150_SPLITS,
    CSV_LABEL_SEPARATOR,
    NLUPLUSPLUS_DOMAINS,
    TextcatRow,
    nluplusplus_labels,
    read_clinc150,
    read_labels_file,
    read_nluplusplus,
    read_textcat_rows,
    rows_to_docs,
)

__all__ = [
    "AUTO_LABEL_COLUMNS",
    "AUTO_SPANS_FIELDS",
    "CLINC150_SPLITS",
    "CONLL_DOCSTART",
    "CSV_LABEL_SEPARATOR",
    "NER_SUFFIXES",
    "NLUPLUSPLUS_DOMAINS",
    "RESTAURANT8K_QUESTIONS",
    "RESTAURANT8K_SLOTS",
    "Banking77OOS",
    "Clinc150Discover",
    "ConversionError",
    "DevSplit",
    "NerFileFormat",
    "TextcatRow",
    "TrainingSteps",
    "build_banking77_oos",
    "build_clinc150_discover",
    "count_docs",
    "held_out_intents",
    "nluplusplus_labels",
    "read_clinc150",
    "read_conll_ner",
    "read_entity_jsonl",
    "read_intent_list",
    "read_labels_file",
    "read_ner_docs",
    "read_nluplusplus",
    "read_restaurant8k",
    "read_spacy_json",
    "read_squad",
    "read_textcat_rows",
    "rows_to_docs",
    "split_dev",
    "training_steps",
    "write_docbin",
]
