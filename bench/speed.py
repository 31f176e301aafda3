"""Throughput and peak memory: our pipes against the bare encoder, spacy-transformers
and Hugging Face pipelines, on the same texts and the same weights (not a test).

    python bench/speed.py --workload short|news|long [--limit N]
        [--precision default|fp32|bf16|int8|auto|tf32] [--trained DIR]
        [--threads 2] [--max-batch-tokens 4096] [--batch-size 128]
        [--systems bare,ours-textcat,...] [--repeats 1] [--gpu 0] [--data DIR]
        [--output FILE]

Every system runs in a fresh subprocess (this script again, with `--system NAME`),
so that its peak RSS is its own; a system that fails records its error and the
others still run. Each one is warmed up on the first texts (about 8,000 characters),
then timed over all texts. "Words" are spaCy tokens of the input texts
(`spacy.blank("en")`), whatever the system tokenizes internally.

Systems (default encoder all-MiniLM-L6-v2 everywhere; ours-textcat, ours-ner and
ours-textcat-ner are bench/trained.py's pipelines, heads trained on Banking77 and
CoNLL-2003 over the frozen encoder, their test scores recorded in the JSON; the
others' heads are untrained, with realistic labels: Banking77's 77 intents, CoNLL's
PER/ORG/LOC/MISC):
  bare              Hugging Face AutoModel forward over the windows our encoder runs
                    (same tokenizer, max_length, stride, and the same length-sorted
                    batches under max_batch_tokens, per --batch-size texts), under
                    torch.inference_mode, outputs discarded: the practical limit.
                    Tokenizing and building the batches happen before timing
                    (pinned host tensors on CUDA); timed are the copies and forwards.
  bare-device       the device ceiling: the same forwards over batches already on the
                    device, timed with CUDA events on a GPU (wall clock on the CPU).
  ours-device       our encoder's own forward (HFShim.predict, with its precision
                    handling) over the same batches already on the device: what our
                    forward costs, without the host work around it.
  bare-qa           the same for question/context windows (max_seq_len 384, doc_stride 128).
  ours-textcat      bert_textcat (mean pooling) on its own encoder.
  ours-ner          bert_ner (first wordpiece, case features) on its own encoder.
  ours-textcat-ner  bert_encoder + bert_textcat + bert_ner listening to it (one pass).
  ours-qa           bert_qa with 3 fixed questions per text (untrained head).
  ours-pipeline     the saved pipeline --trained names (any pipeline: a `make run`
                    pipeline or its `bert-pipes shrink` student), every head, at its
                    saved windows and batch budget.
  trf-textcat-ner   spacy-transformers `transformer` (strided spans sized to our window,
                    see `trf_window`) + spaCy `textcat` (TextCatReduce, mean) and `ner`
                    (TransitionBasedParser, as en_core_web_trf) on TransformerListeners.
  hf-textcat        transformers pipeline("text-classification"), 77 labels, truncated
                    to the first max_length wordpieces.
  hf-ner            pipeline("token-classification"), 9 BIO tags, windows of max_length
                    with `stride` overlap, aggregation_strategy="first".
  hf-textcat-ner    both of the above in one process, seconds summed.
  hf-qa             pipeline("question-answering"), the same 3 questions per text.

With `--gpu N` every system runs on CUDA device N (ours and spacy-transformers through
`spacy.require_gpu`, bare and Hugging Face on the same device), the timed region ends
with a device synchronize, and the peak GPU memory of the run is recorded beside the
RSS (thinc's allocations go through PyTorch's, so one counter holds both).

Writes bench/results/speed_<workload>_<precision>_t<threads>_mbt<budget>.json (plus
the system list when it is not the default one; `gpu_speed_...` on a GPU);
`bench/speed_table.py` renders the CPU ones.

This file is the command line; its parts are modules of `bench/speedlib/`:
`workloads` (the texts and the settings), `systems` (ours and the bare forward)
and `references` (spacy-transformers, Hugging Face), `timing` (one system in a
fresh process: warm-up, timed runs, peak memory) and `table` (the record it
writes, the ratios, and the tables `bench/speed_table.py` renders).
"""

import json
import time
import traceback
from pathlib import Path
from typing import Any, Dict, Literal, Optional

import extras  # bench/extras.py: the references apart (Makefile)
import typer
from speedlib import table, timing
from speedlib.systems import NOTES, SYSTEMS, build, trained_module
from speedlib.workloads import DEFAULT_DATA, DEFAULT_LIMITS, Settings, count_words, load_texts

extras.use()  # spacy-transformers, the baseline


def main(
    workload: Literal["short", "news", "long"] = typer.Option(
        "short", help="short (Banking77 test), news (SQuAD dev contexts), long (COVID-QA)"
    ),
    limit: Optional[int] = typer.Option(
        None, help="Texts to use (0: all; default: 1000 short, 200 news, 5 long)"
    ),
    systems: str = typer.Option(",".join(SYSTEMS), help="Comma-separated systems to run"),
    precision: Literal["default", "fp32", "bf16", "int8", "auto", "tf32"] = typer.Option(
        "default",
        help="Prediction precision of ours and bare (trf and hf run fp32; bare's int8 is "
        "torch's dynamic int8); default: each system's own (ours: as saved, 'auto'; bare: fp32)",
    ),
    trained: Optional[Path] = typer.Option(
        None,
        help="bench/trained.py's folder of trained pipelines (default: $BERT_PIPES_TRAINED "
        "or /work/trained; trained first when not READY)",
    ),
    train: bool = typer.Option(
        True, help="Train the pipelines when TRAINED is not READY (--no-train: fail instead)"
    ),
    threads: int = typer.Option(2, help="torch.set_num_threads (0: torch's default)"),
    max_batch_tokens: int = typer.Option(4096, help="Padded wordpieces per batch (ours, bare)"),
    batch_size: int = typer.Option(128, help="Texts per nlp.pipe batch (ours, bare, trf)"),
    hf_batch_size: int = typer.Option(
        0, help="batch_size of the HF text/token pipelines (0: max_batch_tokens // max_length)"
    ),
    max_length: int = typer.Option(128, help="Wordpieces per window, specials included"),
    stride: int = typer.Option(32, help="Wordpieces shared by consecutive windows"),
    repeats: int = typer.Option(1, help="Timed runs per system (the fastest is kept)"),
    timeout: int = typer.Option(1800, help="Seconds allowed to each system"),
    output: Optional[Path] = typer.Option(None, help="JSON results (default bench/results/...)"),
    gpu: int = typer.Option(-1, help="CUDA device every system runs on (-1: the CPU)"),
    keep: str = typer.Option(
        "",
        help="ours-pipeline: the heads to run, comma-separated (the encoders they listen "
        "to come along; default: every component)",
    ),
    data: Path = typer.Option(DEFAULT_DATA, help="The datasets folder (../shared/datasets)"),
    system: Optional[str] = typer.Option(None, hidden=True, help="Run one system (internal)"),
    result_file: Optional[Path] = typer.Option(None, hidden=True, help="(internal)"),
) -> None:
    s = Settings(
        workload=workload,
        limit=DEFAULT_LIMITS[workload] if limit is None else limit,
        precision=precision,
        threads=threads,
        max_batch_tokens=max_batch_tokens,
        batch_size=batch_size,
        hf_batch_size=hf_batch_size or max(1, max_batch_tokens // max_length),
        max_length=max_length,
        stride=stride,
        repeats=repeats,
        gpu=gpu,
        data=str(data),
        trained=str(trained or ""),
        keep=keep,
    )
    if system is not None:  # the child: one system, result to a file
        try:
            result = timing.run_system(system, s, build)
            result["notes"] = NOTES.get(system, "")
        except Exception as error:  # recorded in the JSON; the parent goes on
            result = {
                "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc(),
            }
        assert result_file is not None
        result_file.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
        return

    chosen = [name.strip() for name in systems.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(SYSTEMS))
    if unknown:
        raise typer.BadParameter(f"Unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    if any(name in trained_module().PIPELINES for name in chosen):
        folder = trained or trained_module().default_out()
        if not train and not trained_module().is_ready(folder):
            raise typer.BadParameter(f"{folder} is not READY (bench/trained.py) and --no-train")
        s.trained = str(trained_module().ensure(folder))
        scores = json.loads((Path(s.trained) / "trained.json").read_text(encoding="utf8"))
    else:
        scores = {}
    texts = load_texts(s.workload, s.limit, data)
    n_words = count_words(texts)
    typer.echo(f"{s.workload}: {len(texts)} texts, {n_words} words (spaCy tokens)", err=True)
    started = time.time()
    info: Dict[str, Any] = {"machine": timing.machine(), "versions": timing.versions()}
    if s.gpu >= 0:
        import torch

        info["machine"]["gpu"] = torch.cuda.get_device_name(s.gpu)
    results: Dict[str, Dict[str, Any]] = {}
    for name in chosen:
        typer.echo(f"  {name} ...", err=True)
        result = timing.spawn(name, s, timeout)
        if "seconds" in result:
            table.add_rates(result, len(texts), n_words)
        typer.echo(table.summary(name, result), err=True)
        results[name] = result
    record = table.record(s, started, info, len(texts), n_words, scores, results)
    path = output or table.default_output(s, chosen)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    typer.echo(f"wrote {path}", err=True)
    for key, value in record["ratios"].items():
        typer.echo(f"  {key}: {value:.2f}", err=True)


if __name__ == "__main__":
    typer.run(main)
