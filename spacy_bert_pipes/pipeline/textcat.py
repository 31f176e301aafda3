"""`bert_textcat`: document classification on a BERT encoder.

The factory and what a config sets: the default model
(`DEFAULT_TEXTCAT_MODEL`), each setting with its default and its meaning
(`make_bert_textcat`), the scores training reports. The pipe the factory makes,
`BertTextCategorizer`, is `textcat_pipe.py`; the defaults of the routing and
label-prototype settings live with the code that reads them
(`textcat_scope.SCOPE_SETTINGS`, `label_prototypes.PROTOTYPE_SETTINGS`).
"""

from typing import Callable, List, Optional

from spacy.language import Language
from spacy.tokens import Doc
from thinc.api import Config, Model
from thinc.types import Floats2d

from ..models.heads.scope import ScopeMethod
from ..scorers import ROUTING_SCORE_KEYS
from .label_descriptions import LabelDescriptions
from .label_prototypes import PROTOTYPE_SETTINGS
from .textcat_pipe import BertTextCategorizer
from .textcat_scope import SCOPE_SETTINGS
from .textcat_targets import ClassWeights

__all__ = ["DEFAULT_TEXTCAT_MODEL", "BertTextCategorizer", "make_bert_textcat"]

DEFAULT_TEXTCAT_MODEL = """
[model]
@architectures = "spacy-bert-pipes.TextCatModel.v1"
exclusive_classes = true
pooling = "cls"
pooler_activation = "none"
dropout = 0.1
nO = null

[model.encoder]
@architectures = "spacy-bert-pipes.BertEncoder.v2"
max_length = 128
stride = 32
max_batch_tokens = 4096
precision = "fp32"
predict_precision = "auto"
frozen_layers = 0
hidden_layers = "last"
"""
DEFAULT_TEXTCAT_CONFIG = Config().from_str(DEFAULT_TEXTCAT_MODEL)["model"]


@Language.factory(
    "bert_textcat",
    # doc.user_hooks: a router's (label prototypes) sentence vector as doc.vector
    assigns=["doc.cats", "doc.user_hooks"],
    default_config={
        "model": DEFAULT_TEXTCAT_CONFIG,
        "threshold": 0.5,
        "class_weights": None,
        "score_prefix": "cats",
        "scorer": {"@scorers": "spacy-bert-pipes.textcat_scorer.v1"},
        **SCOPE_SETTINGS,
        **PROTOTYPE_SETTINGS,
    },
    default_score_weights={
        "cats_score": 1.0,
        "cats_score_desc": None,
        "cats_micro_p": None,
        "cats_micro_r": None,
        "cats_micro_f": None,
        "cats_macro_p": None,
        "cats_macro_r": None,
        "cats_macro_f": None,
        "cats_macro_auc": None,
        "cats_f_per_type": None,
        "cats_accuracy": None,
        **{key: None for key in ROUTING_SCORE_KEYS},
    },
)
def make_bert_textcat(
    nlp: Language,
    name: str,
    model: Model[List[Doc], Floats2d],
    threshold: float,
    class_weights: ClassWeights,
    score_prefix: str,
    scorer: Optional[Callable],
    oos_method: ScopeMethod,
    oos_threshold: float,
    oos_label: Optional[str],
    ambiguity_margin: float,
    label_descriptions: LabelDescriptions,
    label_names_as_descriptions: bool,
    description_template: str,
    description_weight: float,
    similarity_threshold: float,
    contrastive_weight: float,
    contrastive_temperature: float,
    vector_anchor: float,
) -> BertTextCategorizer:
    """Classify documents with a BERT encoder; writes probabilities to `doc.cats`.

    model (Model[List[Doc], Floats2d]): A spacy-bert-pipes.TextCatModel.v1; its
        `exclusive_classes` picks softmax (one label per doc) or multi-label sigmoid.
    threshold (float): Multi-label only: a label is predicted when its probability
        is at least this (used by the scorer).
    class_weights (Optional[Union[str, Dict[str, float]]]): Loss weight per label for
        imbalanced data: a mapping, or "balanced" (n_docs / (n_labels * count), as in
        scikit-learn; for multi-label: n_negative / n_positive per label).
    score_prefix (str): The scores' keys start with it ("cats": spaCy's textcat
        keys, cats_score, cats_micro_f, ...); give a second classifier of the same
        pipeline its own prefix so their scores stay apart.
    scorer (Optional[Callable]): Scoring function, spaCy's textcat keys (and,
        for exclusive classes, the routing keys: docs/routing.md).
    The settings below route docs (exclusive classes; docs/routing.md): each doc
    gets `doc._.route` ({"label", "top", "confidence", "decision"}; a score_prefix
    other than "cats" writes `doc._.<prefix>_route`).
    oos_method (str): How sure the component is that a doc fits one of its
        labels: "max_prob" (the top probability), "mahalanobis" (distance to the
        nearest class mean of the training docs' vectors) or "knn" (cosine with
        the nearest training doc). The feature methods need `bert-pipes
        calibrate`, which also turns every method's score into a confidence in
        [0, 1] (the share of in-scope dev docs that look less typical); until
        then the confidence is the top probability.
    oos_threshold (float): A doc whose confidence is below it is not routed
        (decision "out_of_scope"); 0 routes every doc. Choose it with `spacy
        find-threshold` on dev data with out-of-scope docs, or for a coverage
        with `bert-pipes calibrate --coverage`.
    oos_label (Optional[str]): A label that means "none of these" (training
        data with out-of-scope examples): a doc whose top label it is, is out of
        scope; in evaluation data a doc with this label (or with no positive
        label) counts as out of scope.
    ambiguity_margin (float): A doc whose two most probable labels are closer
        than this is "ambiguous" and not routed (Rasa's FallbackClassifier
        ambiguity_threshold); 0 turns it off.
    The settings below need a spacy-bert-pipes.PrototypeCatModel.v1 model (labels
    from descriptions and few examples, docs/few_shot.md):
    label_descriptions (Optional[Union[str, Dict[str, Union[str, List[str]]]]]):
        label -> a phrase or a list of phrases describing it, or the path of a
        JSON file holding that mapping. A described label needs no examples. A
        label described here that a loaded pipeline lacks is added at load time.
    label_names_as_descriptions (bool): A label without a description is
        described by its name, underscores as spaces. With no descriptions and
        no initialize examples at all, the names describe the labels anyway.
    description_template (str): Each description goes through it ("{}" is the
        phrase), e.g. "a question about {}".
    description_weight (float): A prototype is the mean of its examples'
        vectors plus this times the mean of its descriptions' vectors.
    similarity_threshold (float): Multi-label: the cosine at which a label with
        no initialize example is predicted (labels with examples calibrate theirs).
    contrastive_weight (float): Weight of the pair loss in training (docs of the
        same label close, of different labels apart); 0 trains on the
        classifier's loss alone.
    contrastive_temperature (float): Temperature of the pair loss's softmax.
    vector_anchor (float): Weight of a loss that keeps each doc's sentence
        vector near the one a frozen copy of the encoder (as training started)
        gives it: weight * mean(1 - cos); 0 lets fine-tuning move them freely.
    """
    return BertTextCategorizer(
        nlp.vocab,
        model,
        name,
        threshold=threshold,
        class_weights=class_weights,
        score_prefix=score_prefix,
        scorer=scorer,
        oos_method=oos_method,
        oos_threshold=oos_threshold,
        oos_label=oos_label,
        ambiguity_margin=ambiguity_margin,
        label_descriptions=label_descriptions,
        label_names_as_descriptions=label_names_as_descriptions,
        description_template=description_template,
        description_weight=description_weight,
        similarity_threshold=similarity_threshold,
        contrastive_weight=contrastive_weight,
        contrastive_temperature=contrastive_temperature,
        vector_anchor=vector_anchor,
    )
