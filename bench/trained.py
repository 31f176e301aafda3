"""Trained pipelines for the benchmarks (not a test): heads trained on real data on
top of the default encoder, so that the benches time what users run (trained
heads write real entities and labels), cached on disk.

    python bench/trained.py [--out /work/trained] [--textcat-steps 600]
        [--ner-steps 600] [--precisions fp32,bf16] [--force]

The heads are trained with the project's own commands (`bert-pipes convert`,
`spacy train` on configs/textcat.cfg and configs/ner.cfg, `bert-pipes assemble`,
`bert-pipes evaluate`), changed in two ways so that both fit a 2-core CPU in a
few minutes and can share one encoder pass: the encoder is frozen
(`frozen_layers = "all"`: feature-based, so the heads of two trainings sit on the
same, pretrained, encoder weights) and the heads listen to a `bert_encoder`
component. NER reads whole docs (`context = "doc"`, as the benches' news texts)
without case embeddings (they need a trainable encoder); its head keeps the
tokens' case features. The learning rate is 1e-3 (heads only).

Writes under OUT:
  corpus/                  Banking77 and CoNLL-2003 as .spacy (train, a dev
                           sample, test)
  train/textcat, train/ner `spacy train` outputs (model-last is used)
  textcat-ner/             bert_encoder + bert_textcat + bert_ner listening to it
                           (one encoder pass; the benches' ours-textcat-ner)
  textcat/, ner/           each head alone with its own copy of the encoder
                           (`bert-pipes assemble`; the benches' ours-textcat,
                           ours-ner)
  metrics/                 `bert-pipes evaluate` outputs, per precision
  trained.json             steps, seconds, test scores (Banking77 accuracy,
                           CoNLL-2003 entity F1) per pipeline and precision
  README                   what each folder is, and the test scores
  READY                    touched last: the folders above are complete
No QA pipeline: the benches' ours-qa keeps its untrained head.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import typer

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = Path("/work/trained")
DEFAULT_DATA = REPO.parent / "shared" / "datasets"
LISTENER = {"@architectures": "spacy-bert-pipes.EncoderListener.v1", "upstream": "*"}
# The pipelines the benches load, by bench system name.
PIPELINES = {
    "ours-textcat-ner": "textcat-ner",
    "ours-textcat": "textcat",
    "ours-ner": "ner",
}


def default_out() -> Path:
    """$BERT_PIPES_TRAINED, else /work/trained."""
    return Path(os.environ.get("BERT_PIPES_TRAINED", str(DEFAULT_OUT)))


def is_ready(out: Path) -> bool:
    return (out / "READY").exists()


def pipeline_path(out: Path, system: str) -> Path:
    """The trained pipeline a bench system loads."""
    if system not in PIPELINES:
        raise KeyError(f"No trained pipeline for {system!r}: {', '.join(PIPELINES)}")
    return out / PIPELINES[system]


def ensure(out: Optional[Path] = None) -> Path:
    """The trained pipelines' folder, training them first when it is not READY."""
    out = out or default_out()
    if not is_ready(out):
        build(out)
    return out


def run(args: List[str], log: Path) -> None:
    """A project command in a subprocess, its output appended to `log`."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    with log.open("a", encoding="utf8") as file_:
        file_.write("$ " + " ".join(args) + "\n")
        file_.flush()
        proc = subprocess.run(args, stdout=file_, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:5])} ... failed ({proc.returncode}); see {log}")


def head_config(kind: str, steps: int, out: Path) -> Path:
    """configs/<kind>.cfg with a frozen, shared-able encoder: a bert_encoder component
    (frozen_layers "all") that the head listens to."""
    from spacy.util import load_config

    source = REPO / "configs" / ("textcat.cfg" if kind == "textcat" else "ner.cfg")
    config = load_config(source, interpolate=False)
    head = "bert_textcat" if kind == "textcat" else "bert_ner"
    encoder = dict(config["components"][head]["model"]["encoder"])
    encoder["frozen_layers"] = "all"
    encoder.pop("case_embeddings", None)
    encoder.pop("context", None)  # "doc": whole texts, as the benches run them
    # The benches' windows (configs/ner.cfg reads 256): one encoder serves both heads.
    encoder.update(max_length=128, stride=32, max_batch_tokens=4096)
    config["nlp"]["pipeline"] = ["bert_encoder", head]
    config["components"]["bert_encoder"] = {"factory": "bert_encoder", "model": encoder}
    config["components"][head]["model"]["encoder"] = dict(LISTENER)
    init = config["initialize"]["components"]
    init["bert_encoder"] = {"encoder_loader": init[head].pop("encoder_loader")}
    training = config["training"]
    training["max_steps"] = steps
    training["eval_frequency"] = steps  # the test sets score it afterwards
    training["logger"]["progress_bar"] = None  # ConsoleLogger.v3: no bar
    rate = training["optimizer"]["learn_rate"]
    rate["warmup_steps"] = max(1, steps // 10)
    rate["initial_rate"] = 0.001
    path = out / "configs" / f"{kind}.cfg"
    path.parent.mkdir(parents=True, exist_ok=True)
    config.to_disk(path)
    return path


def share(out: Path) -> Path:
    """One pipeline: the textcat training's bert_encoder, its bert_textcat, and the
    ner training's bert_ner, both heads listening to that encoder. The two trainings
    froze the same pretrained weights, so the heads see the encoder they were
    trained on."""
    import spacy

    textcat = spacy.load(out / "train" / "textcat" / "model-last")
    ner = spacy.load(out / "train" / "ner" / "model-last")
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", source=textcat)
    nlp.add_pipe("bert_textcat", source=textcat)
    nlp.add_pipe("bert_ner", source=ner)
    encoder: Any = nlp.get_pipe("bert_encoder")
    if sorted(encoder.listening_components) != ["bert_ner", "bert_textcat"]:
        raise RuntimeError(
            f"Heads not linked to the shared encoder: {encoder.listening_components}"
        )
    path = out / "textcat-ner"
    if path.exists():
        shutil.rmtree(path)
    nlp.to_disk(path)
    return path


def evaluate(out: Path, pipeline: str, data: str, precision: str, log: Path) -> Dict[str, Any]:
    metrics = out / "metrics" / f"{pipeline}_{Path(data).parent.name}_{precision}.json"
    metrics.parent.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "spacy_bert_pipes", "evaluate", str(out / pipeline)]
    args += [str(out / data), "--output", str(metrics), "--precision", precision]
    start = time.perf_counter()
    run(args, log)
    scores = json.loads(metrics.read_text(encoding="utf8"))
    # cats_accuracy: the top label's accuracy (exclusive classes; textcat_scorer)
    names = ("cats_accuracy", "cats_macro_f", "ents_f", "ents_p", "ents_r")
    keep = {k: scores[k] for k in names if scores.get(k) is not None}
    keep["seconds"] = round(time.perf_counter() - start, 1)
    return keep


def build(
    out: Path,
    textcat_steps: int = 600,
    ner_steps: int = 600,
    precisions: str = "fp32,bf16",
    data: Path = DEFAULT_DATA,
    corpus_only: bool = False,
) -> Dict[str, Any]:
    """Convert, train, assemble and evaluate; see the module docstring."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "READY").unlink(missing_ok=True)
    log = out / "trained.log"
    py = sys.executable
    convert = [py, "-m", "spacy_bert_pipes", "convert"]
    sample = [py, str(REPO / "scripts" / "sample_docs.py")]
    b77, conll, corpus = data / "banking77", data / "conll2003", out / "corpus"
    labels = ["--label-column", "category", "--labels", str(b77 / "categories.json")]
    record: Dict[str, Any] = {"benchmark": "trained", "command": " ".join(sys.argv), "steps": {}}
    start = time.perf_counter()
    # Steps whose output exists are skipped (a run cut short goes on where it was).
    for split in ("train", "test"):
        target = corpus / "banking77" / f"{split}.spacy"
        if not target.exists():
            run([*convert, "textcat", str(b77 / f"{split}.csv"), str(target), *labels], log)
    for name, source in (("banking77", "train"), ("conll2003", "valid")):
        if name == "conll2003":
            for split in ("train", "valid", "test"):
                target = corpus / "conll2003" / f"{split}.spacy"
                if not target.exists():
                    args = [str(conll / f"{split}.txt"), str(target), "--n-sents", "1"]
                    run([*convert, "ner", *args], log)
        dev = corpus / name / "dev.spacy"
        if not dev.exists():
            run([*sample, str(corpus / name / f"{source}.spacy"), str(dev), "300"], log)
    record["seconds_convert"] = round(time.perf_counter() - start, 1)
    if corpus_only:
        return record
    for kind, steps, name in (
        ("textcat", textcat_steps, "banking77"),
        ("ner", ner_steps, "conll2003"),
    ):
        config = head_config(kind, steps, out)
        record["steps"][kind] = steps
        start = time.perf_counter()
        if (out / "train" / kind / "model-last").exists():
            continue
        run(
            [py, "-m", "spacy", "train", str(config), "--output", str(out / "train" / kind)]
            + ["--paths.train", str(corpus / name / "train.spacy")]
            + ["--paths.dev", str(corpus / name / "dev.spacy")],
            log,
        )
        record[f"seconds_train_{kind}"] = round(time.perf_counter() - start, 1)
    share(out)
    assemble = [py, "-m", "spacy_bert_pipes", "assemble"]
    run([*assemble, str(out / "textcat"), "--textcat", str(out / "train/textcat/model-last")], log)
    run([*assemble, str(out / "ner"), "--ner", str(out / "train/ner/model-last")], log)
    # The pipelines are complete: READY now (the benches need no scores), the test
    # scores follow in trained.json and README.
    record["pipelines"] = {system: str(pipeline_path(out, system)) for system in PIPELINES}
    record["test_scores_textcat_ner"] = {}
    (out / "trained.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    write_readme(out, record)
    (out / "READY").touch()
    scores: Dict[str, Dict[str, Any]] = record["test_scores_textcat_ner"]
    for precision in [p.strip() for p in precisions.split(",") if p.strip()]:
        scores[precision] = {
            "banking77_test": evaluate(
                out, "textcat-ner", "corpus/banking77/test.spacy", precision, log
            ),
            "conll2003_test": evaluate(
                out, "textcat-ner", "corpus/conll2003/test.spacy", precision, log
            ),
        }
        (out / "trained.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
        write_readme(out, record)
    return record


def write_readme(out: Path, record: Dict[str, Any]) -> None:
    lines = [
        "Trained benchmark pipelines, written by bench/trained.py of spacy-bert-pipes",
        f"(command: {record['command']}).",
        "",
        "Heads trained on real data over the frozen default encoder (all-MiniLM-L6-v2,",
        'frozen_layers = "all"), so that two heads trained apart can share one encoder pass:',
        f"  bert_textcat: Banking77 train, {record['steps']['textcat']} steps of 32 queries",
        f"  bert_ner:     CoNLL-2003 train, {record['steps']['ner']} steps of ~500 words",
        "",
        "Folders:",
        "  textcat-ner/  bert_encoder + bert_textcat + bert_ner (one encoder pass)",
        "  textcat/      bert_textcat alone (its own encoder copy)",
        "  ner/          bert_ner alone (its own encoder copy)",
        "  train/        the spacy train outputs; configs/ their configs",
        "  corpus/       Banking77 and CoNLL-2003 as .spacy; metrics/ evaluate outputs",
        "",
        "Test scores of textcat-ner (bert-pipes evaluate --precision P; filled in after",
        "READY, one precision at a time):",
    ]
    for precision, tests in record["test_scores_textcat_ner"].items():
        acc = tests["banking77_test"].get("cats_accuracy")
        f1 = tests["conll2003_test"].get("ents_f")
        lines.append(f"  {precision}: Banking77 accuracy {acc}, CoNLL-2003 entity F1 {f1}")
    lines += ["", "READY is touched when the pipelines are complete."]
    (out / "README").write_text("\n".join(lines) + "\n", encoding="utf8")


def main(
    out: Path = typer.Option(DEFAULT_OUT, help="Where to write the pipelines"),
    textcat_steps: int = typer.Option(600, help="Training steps of bert_textcat (batch 32)"),
    ner_steps: int = typer.Option(600, help="Training steps of bert_ner (~500 words each)"),
    precisions: str = typer.Option("fp32,bf16", help="Precisions to evaluate the tests at"),
    data: Path = typer.Option(DEFAULT_DATA, help="The datasets folder"),
    force: bool = typer.Option(False, help="Train again even if OUT/READY exists"),
    corpus_only: bool = typer.Option(False, help="Only convert the corpus (OUT/corpus)"),
) -> None:
    if corpus_only:
        build(out, data=data, corpus_only=True)
        typer.echo(f"Wrote {out / 'corpus'}")
        return
    if is_ready(out) and not force:
        typer.echo(f"{out} is READY (use --force to train again)")
        return
    record = build(out, textcat_steps, ner_steps, precisions, data)
    shutil.copy(out / "trained.json", REPO / "bench" / "results" / "trained.json")
    typer.echo(json.dumps(record["test_scores_textcat_ner"], indent=2))


if __name__ == "__main__":
    typer.run(main)
