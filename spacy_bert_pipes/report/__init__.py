"""`report`: an evaluation report, in Markdown and HTML, with plots.

Reads the metrics JSONs that `spacy evaluate` and `bert-pipes evaluate` write
(one run per file, named by its stem: `metrics/textcat.json` is the run
"textcat"), the timing JSONs of the workflow (`<run>_train_time.json`, written
by scripts/timed.py; any other `*_time.json` is listed on its own),
optionally the per-doc predictions of `bert-pipes evaluate --predictions`
(`<run>_predictions.jsonl`, found beside the metrics or given explicitly) and
the outputs of `bert-pipes annotate` (an annotated collection: what was
predicted how often, its error rows and, from `<stem>_time.json`, its speed).

Writes into an output folder:
* `report.md`: tables per run and task (overall scores, per-label P/R/F,
  timings) and links to the pictures;
* `report.html`: the same, one self-contained page with the pictures embedded;
* the PNGs: per-label F1 bars (textcat, NER), the confusion matrix of an
  exclusive classifier (its most confused labels, and all labels), NER error
  types per label, QA exact match and F1 with and without an answer, per
  question and per answer length; a router's risk-coverage curves (in-scope
  and all docs) and reliability diagrams (routing confidence, top probability);
  for an annotated collection, bars of its most frequent categories (a router's
  routing decisions), its entities per label and its answers per question,
  and, with a vector column (`annotate --vectors`), a 2-D map of its rows.

What a run reports depends on the keys of its metrics: `cats_*` (text
classification), `ents_*` or `spans_<key>_*` (NER), `qa_*` (question
answering); a pipeline with several components has several sections.

Where things live:

inputs.py      ReportError, Run, Collection, Inputs and their readers
analysis.py    analyses of predictions (confusions, entity errors, QA groups)
document.py    the blocks, their cells' formatting, to_markdown and to_html
plots.py       the PNGs (matplotlib) and `Figures`, which draws them for a section
textcat.py, ner.py, qa.py, collection.py
               one section per task, and one for an annotated collection
similarity.py  an annotated collection's map (PCA of its doc vectors, coloured
               by predicted intent) and near-duplicates (`similar-collection`)
build.py       write_report: the sections in order, the files written
"""

from .analysis import (
    LENGTH_BUCKETS,
    NER_ERRORS,
    TOP_CONFUSED_LABELS,
    answer_length,
    confusion_counts,
    most_confused,
    ner_errors,
    qa_groups,
    qa_questions,
)
from .build import Report, write_report
from .document import MAX_EXAMPLES, Block, Heading, Image, Paragraph, Table, to_html, to_markdown
from .inputs import (
    CATEGORY_THRESHOLD,
    PREDICTIONS_SUFFIX,
    TIME_SUFFIX,
    TRAIN_TIME,
    Collection,
    Inputs,
    ReportError,
    Run,
    ner_prefixes,
    read_collection,
    read_inputs,
    read_predictions,
)

__all__ = [
    "CATEGORY_THRESHOLD",
    "LENGTH_BUCKETS",
    "MAX_EXAMPLES",
    "NER_ERRORS",
    "PREDICTIONS_SUFFIX",
    "TIME_SUFFIX",
    "TOP_CONFUSED_LABELS",
    "TRAIN_TIME",
    "Block",
    "Collection",
    "Heading",
    "Image",
    "Inputs",
    "Paragraph",
    "Report",
    "ReportError",
    "Run",
    "Table",
    "answer_length",
    "confusion_counts",
    "most_confused",
    "ner_errors",
    "ner_prefixes",
    "qa_groups",
    "qa_questions",
    "read_collection",
    "read_inputs",
    "read_predictions",
    "to_html",
    "to_markdown",
    "write_report",
]
