"""Near misses made from the training data, for `bert_textcat`'s near_miss_weight.

A query worded like a known intent but lacking what makes it that intent ("my
virtual card" where only physical cards have an intent) is routed with
confidence after fine-tuning: the router learns the intents' shared wording as
well as their keywords. Here each label's keywords are the words that set its
training docs apart from the others', and a training doc without its label's
keywords is a near miss that belongs to no label; the component trains such
docs towards no label (outlier exposure on synthetic negatives).
"""

import math
from collections import Counter
from typing import FrozenSet, List, Optional, Sequence

from spacy.tokens import Doc

# per label: how many keywords, and in how many of its docs a keyword must be
KEYWORDS_PER_LABEL = 5
MIN_DOCS = 3


def label_keywords(
    docs: Sequence[Doc],
    label_ids: Sequence[int],
    n_labels: int,
    top: int = KEYWORDS_PER_LABEL,
    min_docs: int = MIN_DOCS,
) -> List[FrozenSet[str]]:
    """For each label, its `top` keywords: lowercased alphabetic words in at
    least `min_docs` of its docs, ranked by p(w | label) * log(p(w | label) /
    p(w)), the share of the label's docs that have the word, weighted by how
    much more often they have it than docs in general. Docs with a label id
    below 0 (no label) are not counted.

    RETURNS (List[FrozenSet[str]]): The keywords of each label id.
    """
    per_label: List[Counter] = [Counter() for _ in range(n_labels)]
    overall: Counter = Counter()
    label_docs = [0] * n_labels
    for doc, label in zip(docs, label_ids):
        if label < 0:
            continue
        words = {token.lower_ for token in doc if token.is_alpha}
        per_label[label].update(words)
        overall.update(words)
        label_docs[label] += 1
    total = max(sum(label_docs), 1)
    keywords = []
    for label, counts in enumerate(per_label):
        scored = []
        for word, count in counts.items():
            if count < min_docs:
                continue
            p_label = count / label_docs[label]
            scored.append((p_label * math.log(p_label * total / overall[word]), word))
        scored.sort(key=lambda item: (-item[0], item[1]))
        keywords.append(frozenset(word for _, word in scored[:top]))
    return keywords


def without_keywords(doc: Doc, keywords: FrozenSet[str]) -> Optional[Doc]:
    """The doc without the tokens that are keywords (case-insensitive), a new
    Doc; None when it has none of them, or no word is left."""
    kept = [token for token in doc if token.lower_ not in keywords]
    if len(kept) == len(doc) or not any(token.is_alpha for token in kept):
        return None
    return Doc(
        doc.vocab,
        words=[token.text for token in kept],
        spaces=[bool(token.whitespace_) for token in kept],
    )
