"""Out-of-scope scores from every layer of the trained router's own encoder, and
combinations of them, on BANKING77-OOS (not a test): do the lower and middle
layers of the fine-tuned encoder, less sharpened around the 50 known intents
than the top one, separate the near misses (ID-OOS) better?

    spacy project run route-banking            # the router and its predictions
    OMP_NUM_THREADS=1 python bench/banking77_oos_layers.py --project . \\
        --output bench/results/banking77_oos_layers_seed0.json

From one project folder that ran `route-banking`, the routed pipeline
(training/route-banking/model-routed) is loaded and its `bert_textcat`'s own
fine-tuned transformer is run once over every query of train, val, test_id and
test_ood (corpus/banking77_oos), with its own tokenizer and max_length, in
fp32, returning the hidden states of every layer (0: the embeddings, then each
transformer layer; the last is what the router pools). Each layer's states are
pooled as the router pools its top layer (`prototypes.sentence_vectors`: the
mean over [CLS], the wordpieces and [SEP], then unit length).

Per layer L, a query's score is the cosine of its layer-L vector with its k-th
nearest training query (the 50 in-scope intents; k as the router's fit, 1),
turned into a percentile among val's in-scope queries (the share of them with
a lower cosine), as bench/banking77_oos_views.py does for the frozen view.
Two more views, percentiles as well:

    router     the router's own confidence (`route.confidence`: its stored kNN
               fit and reference, applied to its top layer; checked against
               metrics/route_banking_{id,ood}_predictions.jsonl)
    frozen     the default encoder's frozen sentence vector, nearest training
               query (banking77_oos_views.py's "frozen")

A row is the mean of the percentiles of a set of views: each single layer;
layers {m..top} for every m; the best single layer with the router, with the
frozen view, and with both; router + frozen. AUROC and FPR95 with the in-scope
queries as the positive class, on val (in scope against its ID-OOS queries,
from the training split of the 27 held-out intents, and against CLINC150's
oos_val) and on test_id and test_ood. No out-of-scope query is used to fit
anything; the best single layer and the reported combination are chosen on
val's ID-OOS AUROC (ties: val's ID-OOS FPR95), never on test. On val the
in-scope queries are the percentiles' own reference (a monotone map, so single
views' val figures are exact; combinations see uniform in-scope percentiles).

Routing is not changed: the in-scope accuracy is the router's, from its
predictions files. Writes --output (bench/results/banking77_oos_layers_seed<S>.json).
--limit N keeps N queries of each intent and N of each out-of-scope kind per
file: a check that the script runs, not a result.
"""

import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import numpy
import typer
from spacy.pipeline import TrainablePipe
from thinc.api import Model

sys.path.insert(0, str(Path(__file__).resolve().parent))

import banking77_oos_baselines as baselines  # noqa: E402
from banking77_oos_baselines import embed  # noqa: E402
from banking77_oos_views import percentile  # noqa: E402

from spacy_bert_pipes.confidence import auroc, fpr_at_recall  # noqa: E402
from spacy_bert_pipes.loading import load_pipeline  # noqa: E402
from spacy_bert_pipes.models.encoder.bert import hf_shim  # noqa: E402
from spacy_bert_pipes.models.heads.scope import (  # noqa: E402
    confidence,
    get_fit,
    knn_scores,
    unit_rows,
)

RESULTS = Path(__file__).resolve().parent / "results"
SPLITS = ("train", "val", "test_id", "test_ood")
KINDS = ("in_scope", "id_oos", "ood_oos")
# (name, split, out-of-scope kind): in-scope queries against one kind
EVALS = (
    ("val_id", "val", "id_oos"),
    ("val_ood", "val", "ood_oos"),
    ("test_id", "test_id", "id_oos"),
    ("test_ood", "test_ood", "ood_oos"),
)
PREDICTIONS = {"test_id": "route_banking_id", "test_ood": "route_banking_ood"}


def read_split(
    path: Path, counts: Dict[str, int], limit: int
) -> Tuple[List[str], List[Optional[str]], List[str]]:
    """The texts, gold intents (None: out of scope) and kinds of a converted
    file, whose docs `convert banking77-oos` writes kind after kind (KINDS, the
    counts of banking77_oos.json); with `limit`, the first `limit` of each
    intent and of each out-of-scope kind."""
    texts, gold = baselines.read_split(path, 0)
    kinds = [kind for kind in KINDS for _ in range(counts[kind])]
    if len(kinds) != len(texts):
        raise SystemExit(f"{path}: {len(texts)} docs, banking77_oos.json counts {len(kinds)}")
    kept: List[int] = []
    seen: Counter = Counter()
    for i, (text, label, kind) in enumerate(zip(texts, gold, kinds)):
        if (label is None) != (kind != "in_scope"):
            raise SystemExit(f"{path}: doc {text!r} is {kind} but has label {label!r}")
        seen[label or kind] += 1
        if not limit or seen[label or kind] <= limit:
            kept.append(i)
    return [texts[i] for i in kept], [gold[i] for i in kept], [kinds[i] for i in kept]


def layer_vectors(encoder: Model, texts: List[str], batch_size: int) -> numpy.ndarray:
    """Every layer's pooled vector of each text from a BertEncoder's transformer
    (the router's own): the mean over [CLS], the wordpieces and [SEP], unit
    length. (n_layers + 1, n_texts, width)"""
    import torch

    shim = hf_shim(encoder)
    transformer, tokenizer = shim.module.transformer, shim.tokenizer
    transformer.eval()
    max_length = encoder.attrs["max_length"]
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    batches: List[numpy.ndarray] = []
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            inputs = tokenizer(
                [texts[i] for i in batch],
                truncation=True,
                max_length=max_length,
                padding=True,
                return_tensors="pt",
            )
            states = transformer(**inputs, output_hidden_states=True).hidden_states
            hidden = torch.stack(states)  # (n_layers + 1, batch, length, width)
            mask = inputs["attention_mask"][None, :, :, None].float()  # (1, batch, length, 1)
            means = (hidden * mask).sum(2) / mask.sum(2)  # (n_layers + 1, batch, width)
            means = torch.nn.functional.normalize(means, dim=-1)
            batches.append(means.numpy())
    pooled = numpy.concatenate(batches, axis=1)  # (n_layers + 1, n_texts, width), sorted
    return pooled[:, numpy.argsort(order)]


def figures(scores: numpy.ndarray, in_scope: numpy.ndarray) -> Dict[str, float]:
    pos, neg = scores[in_scope], scores[~in_scope]
    return {"auroc": auroc(pos, neg), "fpr95": fpr_at_recall(pos, neg, 0.95)}


def best(rows: Dict[str, Dict[str, Any]], names: Sequence[str]) -> str:
    """The row of `names` with the highest val ID-OOS AUROC (then lowest FPR95)."""
    return max(names, key=lambda n: (rows[n]["val_id"]["auroc"], -rows[n]["val_id"]["fpr95"]))


def main(
    project: Path = typer.Option(Path("."), help="A project folder that ran route-banking"),
    seed: int = typer.Option(0, help="The route_banking_seed it ran with (for the file name)"),
    output: Path = typer.Option(None, help="Results JSON"),
    limit: int = typer.Option(0, help="Keep N queries of each intent and kind a file (a check)"),
    batch_size: int = typer.Option(64, help="Texts per transformer batch"),
) -> None:
    import torch

    started = time.perf_counter()
    corpus = project / "corpus" / "banking77_oos"
    counts = json.loads((corpus / "banking77_oos.json").read_text(encoding="utf8"))["counts"]
    splits = {name: read_split(corpus / f"{name}.spacy", counts[name], limit) for name in SPLITS}
    texts = list(dict.fromkeys(t for texts_, _, _ in splits.values() for t in texts_))
    model_path = project / "training" / "route-banking" / "model-routed"
    nlp = load_pipeline(model_path)
    textcat = cast(TrainablePipe, nlp.get_pipe("bert_textcat"))
    encoder = textcat.model.get_ref("encoder")
    fit = get_fit(textcat.model)
    shim = hf_shim(encoder)
    if fit is None or fit.method != "knn" or fit.vectors is None:
        raise SystemExit(f"{model_path}: bert_textcat has no kNN out-of-scope fit")
    start = time.perf_counter()
    layers = layer_vectors(encoder, texts, batch_size)  # (n_layers + 1, n_texts, width)
    router_seconds = time.perf_counter() - start
    start = time.perf_counter()
    frozen_vectors = embed(texts, "fp32", 256)
    frozen_seconds = time.perf_counter() - start
    index = {t: i for i, t in enumerate(texts)}
    rows_of = {name: numpy.asarray([index[t] for t in s[0]]) for name, s in splits.items()}
    val_texts, val_gold, val_kinds = splits["val"]
    val_in = rows_of["val"][numpy.asarray([k == "in_scope" for k in val_kinds])]

    # each view: a percentile among val's in-scope queries for every text
    views: Dict[str, numpy.ndarray] = {}
    k = fit.k
    for layer in range(layers.shape[0]):
        train = unit_rows(layers[layer][rows_of["train"]])
        cosine = 1.0 - knn_scores(layers[layer], train, k)
        views[f"L{layer}"] = percentile(cosine[val_in], cosine)
    router = confidence(fit, "knn", knn_scores(layers[-1], fit.vectors, k))
    views["router"] = router
    train = unit_rows(frozen_vectors[rows_of["train"]])
    cosine = 1.0 - knn_scores(frozen_vectors, train, 1)
    views["frozen"] = percentile(cosine[val_in], cosine)

    # the router's confidence as its predictions files have it (4 decimals)
    check: Dict[str, Any] = {}
    for name, stem in PREDICTIONS.items():
        path = project / "metrics" / f"{stem}_predictions.jsonl"
        lines = [json.loads(line) for line in path.read_text(encoding="utf8").splitlines()]
        saved = {row["text"]: row["components"]["bert_textcat"] for row in lines}
        test_texts, gold, _ = splits[name]
        theirs = numpy.asarray([saved[t]["route"]["confidence"] for t in test_texts])
        ours = router[rows_of[name]]
        right = [saved[t]["predicted"] == [g] for t, g in zip(test_texts, gold) if g is not None]
        check[name] = {
            "router_confidence_max_abs_diff": float(numpy.abs(theirs - ours).max()),
            "in_scope_accuracy": float(numpy.mean(right)),
        }

    layer_names = [f"L{layer}" for layer in range(layers.shape[0])]
    top = len(layer_names) - 1
    candidates: Dict[str, List[str]] = {name: [name] for name in (*layer_names, "router", "frozen")}
    for low in range(top):
        candidates[f"L{low}..L{top}"] = layer_names[low:]
    candidates["router+frozen"] = ["router", "frozen"]

    def evaluate(names: List[str]) -> Dict[str, Any]:
        scores = numpy.mean([views[name] for name in names], axis=0)
        result: Dict[str, Any] = {"views": names}
        for name, split, kind in EVALS:
            kinds = numpy.asarray(splits[split][2])
            keep = (kinds == "in_scope") | (kinds == kind)
            rows = rows_of[split][keep]
            result[name] = figures(scores[rows], kinds[keep] == "in_scope")
        return result

    rows = {name: evaluate(names) for name, names in candidates.items()}
    best_layer = best(rows, layer_names)
    for extra in (["router"], ["frozen"], ["router", "frozen"]):
        name = "+".join(["best layer", *extra])
        rows[name] = evaluate([best_layer, *extra])
    chosen = best(rows, list(rows))

    header = "row (mean of percentiles)  " + "  ".join(f"{n:>15s}" for n, _, _ in EVALS)
    print(f"{len(texts)} texts; k = {k}; best single layer on val: {best_layer}")
    print(f"all, for the ablation (AUROC / FPR95):\n{header}")
    for name, result in rows.items():
        cells = "  ".join(
            f"{result[n]['auroc']:.4f} / {100 * result[n]['fpr95']:4.1f}%" for n, _, _ in EVALS
        )
        print(f"{name:26s} {cells}")
    print(f"chosen on val (ID-OOS AUROC): {chosen} = {rows[chosen]['views']}")
    for name, _, _ in EVALS:
        f = rows[chosen][name]
        print(f"  {name:9s} AUROC {f['auroc']:.4f} FPR95 {100 * f['fpr95']:.1f}%")
    for name, result in check.items():
        print(
            f"{name}: router in-scope accuracy {100 * result['in_scope_accuracy']:.2f}, "
            f"confidence max |diff| {result['router_confidence_max_abs_diff']:.4f}"
        )
    output = output or RESULTS / f"banking77_oos_layers_seed{seed}.json"
    report = {
        "command": "python " + " ".join(sys.argv),
        "seed": seed,
        "project": str(project),
        "limit": limit,
        "pipeline": str(model_path),
        "torch_threads": torch.get_num_threads(),
        "router_prediction_precision": shim.prediction_precision,
        "k": k,
        "texts": len(texts),
        "docs": {name: dict(Counter(s[2])) for name, s in splits.items()},
        "seconds": {
            "router_layers": round(router_seconds, 1),
            "frozen": round(frozen_seconds, 1),
            "total": round(time.perf_counter() - started, 1),
        },
        "router_check": check,
        "chosen_on_val": {
            "best_layer": best_layer,
            "row": chosen,
            "views": rows[chosen]["views"],
            "figures": {n: rows[chosen][n] for n, _, _ in EVALS},
        },
        "all_rows_for_the_ablation": rows,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    print(f"wrote {output}")


if __name__ == "__main__":
    typer.run(main)
