"""The `discover` loop under other rules for a new label (not a test): how the
held-out intents' test queries and the known intents' would be routed if
`add-label` gave a discovered cluster its bias, its out-of-scope memory or its
logits another way.

    python bench/discover_loop_variants.py PROJECT \
        --output bench/results/discover_loop_variants_seed0.json \
        [--variants guard,examples 1.0 quantile 0.0005] [--spacings 0.95,0.85]

PROJECT is a project folder after `spacy project run discover` (its corpus,
training/discover/model-routed, annotations/discover_clusters and
metrics/discover.json). The router's features of the test queries, its
training queries and the clusters' representatives are computed once; every
variant then adds the review's clusters as labels in order, as `add-label
--review --accept-all` does (each label's prototype the mean of its
representatives, as `label_prototypes` makes it, its bias set against the docs
the out-of-scope fit remembers), and routes the features. Variants:

- `guard`: the shipped rule (`guard_bias`: no remembered doc changes its top label);
- `shift D`: that bias raised by D logits (at most 0);
- `quantile Q`: the bias at which a share Q of the remembered docs would change;
- `centre`: the "knn" memory also keeps the unit mean of each label's examples;
- `examples W`: the head's nearest-examples term (`example_weight` W, the mean
  cosine with a label's 2 nearest remembered docs added to the prototype's),
  with the training queries remembered, and the guard computed with it (a
  training query leaves itself out);
- `contrast S:N`: each new prototype with S times its components along its N
  most similar known prototypes taken out (what sets it apart from them);
- `ceiling C`: the bias may rise to C (default 0);
- `new only`: with `examples W`, the term for the new labels alone;
- `top T`: with `examples W`, the mean of a label's T nearest docs (default 2);
- `reach 1`: each new label's examples with their reach in the "knn" memory
  (`add-label --scope-correction`, `ScopeRouter.example_reach`);
- and their combinations, such as `examples 1.0 quantile 0.0005`.

`--spacings 0.95,0.85` also runs every variant with each cluster's
representatives picked again from all its docs in the pool, as `discover` picks
them (`representatives`, none with a cosine of the spacing or more with one
before), as many as the review shows. Beside the test figures, each run scores
the traffic the workflow discovered from (`traffic`): the held-out intents'
training queries that are not representatives, routed as the test queries are,
and the accuracy on the known intents' val queries; choose rules on these, not
on test. Every run also routes CLINC150's `oos_test` (from the project's
assets) and reports the share routed (`oos_test_routed`, the base router's
beside it): what a rule costs in out-of-scope recall; and the near misses
(`near_miss_test`): the held-out intents' test queries of intents no new label
stands for, with the share the extended router abstains on.

The shipped rule reproduces the workflow's figures within a few queries (bf16
features differ a little with the batch).
"""

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy
import spacy
import srsly
import typer
from spacy.tokens import DocBin

from spacy_bert_pipes.convert.clinc150_discover import TEST_HELD_OUT
from spacy_bert_pipes.discover.describe import centroid, representatives
from spacy_bert_pipes.discover.review import read_review, review_examples
from spacy_bert_pipes.models.heads.guard import GUARD_EPSILON
from spacy_bert_pipes.models.heads.prototypes import unit_with_norms
from spacy_bert_pipes.models.heads.scope import confidence, extend_fit, knn_scores

BATCH = 256
# nearest examples averaged by the head's term (the `example_top` of the configs)
EXAMPLE_TOP = 2
VARIANTS = (
    "guard",
    "shift 0.5",
    "shift 1.0",
    "quantile 0.0005",
    "quantile 0.001",
    "quantile 0.005",
    "centre",
    "contrast 0.5:1",
    "contrast 1.0:1",
    "contrast 0.5:3",
    "examples 0.25",
    "examples 0.5",
    "examples 1.0",
    "examples 1.0 new only",
    "examples 1.0 ceiling 9",
    "examples 1.0 shift 3.0",
    "examples 1.0 quantile 0.0005",
)


def unit(X: numpy.ndarray) -> numpy.ndarray:
    return unit_with_norms(numpy.asarray(X, dtype="f"))[0]


def in_scope(docs: List[Any], labels: List[str]) -> Tuple[List[str], List[int]]:
    """The texts of docs with a gold label among `labels`, and its index."""
    texts, gold = [], []
    for doc in docs:
        cats = {k: v for k, v in doc.cats.items() if k in labels}
        if cats and max(cats.values()) >= 0.5:
            texts.append(doc.text)
            gold.append(labels.index(max(cats, key=cats.__getitem__)))
    return texts, gold


def top_mean(C: numpy.ndarray, top: int = EXAMPLE_TOP) -> numpy.ndarray:
    """Each row's mean of its `top` largest values. (n,)"""
    k = min(top, C.shape[1])
    return numpy.partition(C, C.shape[1] - k, axis=1)[:, C.shape[1] - k :].mean(axis=1)


def label_terms(
    C: numpy.ndarray, row_labels: numpy.ndarray, n_labels: int, top: int = EXAMPLE_TOP
) -> numpy.ndarray:
    """The head's nearest-examples term: for each row of C (cosines with the
    remembered docs), per label, the mean of its `top` largest cosines with that
    label's docs. (n, n_labels)"""
    columns = [top_mean(C[:, row_labels == j], top) for j in range(n_labels)]
    return numpy.stack(columns, axis=1).astype("f")


def main(
    project: Path = typer.Argument(..., exists=True, file_okay=False),
    output: Path = typer.Option(..., dir_okay=False),
    variants: str = typer.Option(",".join(VARIANTS), help="Comma-separated variants"),
    spacings: str = typer.Option(
        "", help="Comma-separated spacings of representatives picked again (empty: the review's)"
    ),
) -> None:
    corpus = project / "corpus" / "clinc150_discover"
    nlp = spacy.load(project / "training" / "discover" / "model-routed")
    name = next(n for n, pipe in nlp.pipeline if hasattr(pipe, "add_described_label"))
    textcat: Any = nlp.get_pipe(name)
    known = list(textcat.labels)
    output_layer = textcat.model.get_ref("output")
    ops = textcat.model.ops
    W0 = unit(ops.to_numpy(output_layer.get_param("W")))
    b0 = ops.to_numpy(output_layer.get_param("b")).astype("f")
    scale = float(numpy.exp(ops.to_numpy(output_layer.get_param("log_scale"))[0]))
    fit = textcat.router.fit
    threshold = float(textcat.cfg["oos_threshold"])

    def features(texts: List[str]) -> numpy.ndarray:
        rows = [
            textcat.router.forward([nlp.make_doc(t) for t in texts[i : i + BATCH]])[0]
            for i in range(0, len(texts), BATCH)
        ]
        return numpy.concatenate(rows)

    def docs(path: Path) -> List[Any]:
        return list(DocBin().from_disk(path).get_docs(nlp.vocab))

    train_texts, train_gold = in_scope(docs(corpus / "train.spacy"), known)
    U_train = unit(features(train_texts))
    test_texts, test_gold = in_scope(docs(corpus / "test.spacy"), known)
    X_test = features(test_texts)
    held = list(srsly.read_jsonl(corpus / TEST_HELD_OUT))
    X_held = features([row["text"] for row in held])
    data = json.loads((project / "assets" / "clinc150" / "data_full.json").read_text("utf8"))
    X_oos = features([text for text, _ in data["oos_test"]])
    base_oos = confidence(fit, "knn", knn_scores(X_oos, fit.vectors, fit.k, fit.reach))
    held_intents = [row["intent"] for row in held]
    stands_for: Dict[str, str] = json.loads(
        (project / "metrics" / "discover.json").read_text(encoding="utf8")
    )["label_intents"]
    clusters = project / "annotations" / "discover_clusters"
    examples = review_examples(clusters / "review.jsonl", accept_all=True)
    new_labels = list(examples)
    labels = known + new_labels
    # the traffic: each row's text (the annotations keep it) and true intent
    text_of = {
        row["id"]: row["text"]
        for row in srsly.read_jsonl(project / "annotations" / "discover_traffic.jsonl")
    }
    traffic = list(srsly.read_jsonl(corpus / "traffic_gold.jsonl"))
    traffic_texts = [text_of[row["id"]] for row in traffic]
    X_traffic = features(traffic_texts)
    traffic_intents = [row["intent"] for row in traffic]
    # the representative sets: the review's, and those picked again per spacing
    sets: Dict[str, Dict[str, numpy.ndarray]] = {
        "review": {label: unit(features(texts)) for label, texts in examples.items()}
    }
    shown: Dict[str, set] = {"review": {t for texts in examples.values() for t in texts}}
    if spacings:
        cluster_of = {
            row["id"]: row["cluster"]
            for row in srsly.read_jsonl(clusters / "assignments.jsonl")
            if row["cluster"] >= 0
        }
        members: Dict[int, List[str]] = {}
        for row_id, cluster in cluster_of.items():
            members.setdefault(cluster, []).append(text_of[row_id])
        U_members = {c: unit(features(texts)) for c, texts in members.items()}
        rows = read_review(clusters / "review.jsonl")
        for spacing in spacings.split(","):
            picked: Dict[str, List[numpy.ndarray]] = {}
            chosen: set = set()
            for row in rows:
                U = U_members[row.cluster]
                picks = representatives(U, centroid(U), len(row.texts), float(spacing))
                picked.setdefault(row.name, []).append(U[picks])
                chosen.update(members[row.cluster][i] for i in picks)
            key = f"spacing {spacing}"
            sets[key] = {label: numpy.concatenate(picked[label]) for label in new_labels}
            shown[key] = chosen

    def contrasted(W: numpy.ndarray, strength: float, nearest: float) -> numpy.ndarray:
        """The new prototypes with `strength` times their components along their
        `nearest` most similar known prototypes taken out."""
        W = W.copy()
        for j in range(len(known), len(W)):
            for k in numpy.argsort(-(W0 @ W[j]))[: int(nearest)]:
                W[j] = W[j] - strength * float(W[j] @ W0[k]) * W0[k]
            W[j] = W[j] / numpy.linalg.norm(W[j])
        return W

    known_terms: Dict[int, numpy.ndarray] = {}  # the training docs' term per top, once

    def run(variant: str, U_examples: Dict[str, numpy.ndarray], chosen: set) -> Dict[str, Any]:
        words = variant.split()
        options = dict(zip(words[::2], words[1::2])) if words != ["guard"] else {}
        if words == ["centre"]:
            options = {"centre": "1"}
        shift = float(options.get("shift", 0.0))
        quantile = options.get("quantile")
        weight = float(options.get("examples", 0.0))
        top = int(options.get("top", EXAMPLE_TOP))
        contrast = options.get("contrast")
        ceiling = float(options.get("ceiling", 0.0))
        # the new prototypes, as label_prototypes makes them: the unit mean of unit rows
        means = numpy.stack([U_examples[n].mean(0) for n in new_labels])
        W_new = numpy.concatenate([W0, unit(means)])
        W = contrasted(W_new, *map(float, contrast.split(":"))) if contrast else W_new
        new_only = options.get("new") == "only"

        def mask(T: numpy.ndarray) -> numpy.ndarray:
            """The term with the known labels' columns at 0 for `new only`."""
            if new_only:
                T = T.copy()
                T[:, : len(known)] = 0.0
            return T

        b = list(b0)
        memory = U_train  # what the knn fit remembers: the guard's reference docs
        row_labels = numpy.asarray(train_gold)
        terms = numpy.zeros((len(memory), len(known)), dtype="f")
        if weight > 0:
            if top not in known_terms:
                C = U_train @ U_train.T
                numpy.fill_diagonal(C, -2.0)  # a remembered doc does not find itself
                known_terms[top] = label_terms(C, row_labels, len(known), top)
            terms = mask(known_terms[top])
        for i, label in enumerate(new_labels):
            j = len(known) + i
            added = U_examples[label]
            cos = memory @ W[:j].T
            if weight > 0:
                cos = cos + weight * terms
            best = cos * scale + numpy.asarray(b, dtype="f")
            new = memory @ W[j]
            if weight > 0:
                column = top_mean(memory @ added.T, top)
                new = new + weight * column
            margins = best.max(axis=1) - scale * new
            if quantile is not None:
                bias = float(numpy.quantile(margins, float(quantile))) - GUARD_EPSILON
            else:
                bias = float(margins.min()) - GUARD_EPSILON + shift
            bias = min(ceiling, bias)
            b.append(bias)
            if "centre" in options and len(added) >= 2:
                added = numpy.concatenate([added, unit(added.mean(axis=0, keepdims=True))])
            if weight > 0:  # the examples' own terms, and every doc's for the new label
                C = added @ numpy.concatenate([memory, added]).T
                C[numpy.arange(len(added)), len(memory) + numpy.arange(len(added))] = -2.0
                own_labels = numpy.append(row_labels, [j] * len(added))
                own = mask(label_terms(C, own_labels, j + 1, top))
                terms = numpy.concatenate([numpy.column_stack([terms, column]), own])
            memory = numpy.concatenate([memory, added])
            row_labels = numpy.append(row_labels, [j] * len(added))
        # the memory's labels play no part in its scores
        knn = extend_fit(replace(fit, labels=None), memory[len(U_train) :])
        if "reach" in options:  # each label's examples with their reach
            spans = [
                numpy.full(len(U_examples[n]), textcat.router.example_reach(len(U_examples[n])))
                for n in new_labels
            ]
            knn = replace(
                knn, reach=numpy.concatenate([numpy.ones(len(U_train))] + spans).astype("f")
            )
        bias_row = numpy.asarray(b, dtype="f")
        remembered = knn.vectors
        assert remembered is not None

        def route(X: numpy.ndarray) -> Tuple[numpy.ndarray, numpy.ndarray]:
            U = unit(X)
            cos = U @ W.T
            if weight > 0:
                cos = cos + weight * mask(label_terms(U @ memory.T, row_labels, len(labels), top))
            best = (cos * scale + bias_row).argmax(axis=1)
            return best, confidence(knn, "knn", knn_scores(X, remembered, knn.k, knn.reach))

        def loop(X: numpy.ndarray, intents: List[str]) -> Dict[str, float]:
            """Where the new intents' queries go, shares in %."""
            top_labels, conf = route(X)
            shares = dict.fromkeys(("right_new_label", "other_new_label", "known_label"), 0)
            shares["not_routed"] = 0
            for j, c, intent in zip(top_labels.tolist(), conf.tolist(), intents):
                label = labels[j]
                if c < threshold:
                    shares["not_routed"] += 1
                elif label not in stands_for:
                    shares["known_label"] += 1
                else:
                    right = stands_for[label] == intent
                    shares["right_new_label" if right else "other_new_label"] += 1
            return {k: round(100 * v / max(len(intents), 1), 2) for k, v in shares.items()}

        top_labels, _ = route(X_test)
        accuracy = float(numpy.mean(top_labels == numpy.asarray(test_gold)))
        # near misses: the held-out intents' test queries of intents no new label
        # stands for (in domain, and out of scope for the extended router)
        unlabelled = [i for i, intent in enumerate(held_intents) if intent not in labelled]
        _, near_conf = route(X_held[unlabelled]) if unlabelled else (None, numpy.zeros(0))
        near_abstained = float((near_conf < threshold).mean()) if unlabelled else 0.0
        # the traffic: the held-out intents' queries not shown as representatives,
        # and the known intents' val queries
        new_rows = [
            i
            for i, (text, intent) in enumerate(zip(traffic_texts, traffic_intents))
            if intent in held_set and text not in chosen
        ]
        known_rows = [i for i, intent in enumerate(traffic_intents) if intent in known]
        known_top, _ = route(X_traffic[known_rows])
        known_gold = [known.index(traffic_intents[i]) for i in known_rows]
        result = {
            "known_test_accuracy": round(100 * accuracy, 2),
            "oos_test_routed": round(100 * float((route(X_oos)[1] >= threshold).mean()), 2),
            "near_miss_test": {
                "queries": len(unlabelled),
                "abstained": round(100 * near_abstained, 2),
            },
            **loop(X_held, held_intents),
            "median_new_bias": round(float(numpy.median(b[len(known) :])), 3),
            "traffic": {
                "known_val_accuracy": round(100 * float(numpy.mean(known_top == known_gold)), 2),
                "held_out_queries": len(new_rows),
                **loop(X_traffic[new_rows], [traffic_intents[i] for i in new_rows]),
            },
        }
        print(variant, result, flush=True)
        return result

    held_set = set(held_intents)
    labelled = set(stands_for.values())
    runs = {
        key: {variant: run(variant, U_examples, shown[key]) for variant in variants.split(",")}
        for key, U_examples in sets.items()
    }
    report = {
        "project": str(project),
        "held_out_test_queries": len(held),
        "known_test_queries": len(test_gold),
        "new_labels": len(new_labels),
        "oos_test_routed_by_the_router": round(100 * float((base_oos >= threshold).mean()), 2),
        "variants": runs.pop("review"),
        **({"representatives_picked_again": runs} if runs else {}),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    print(f"wrote {output}")


if __name__ == "__main__":
    typer.run(main)
