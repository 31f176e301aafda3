"""Move a trained pipeline between machines at half the size (not a test).

    python bench/half_pipeline.py pack PIPELINE OUT_DIR [--chunk-mb 15]
    python bench/half_pipeline.py unpack IN_DIR DEST

`pack` stores every encoder's weights in fp16 and writes the pipeline as a tar
split into chunks of at most `--chunk-mb` MB (for transfers that limit file
sizes); `unpack` joins them, loads the pipeline and writes it back with fp32
encoder weights (the fp16 rounding stays: use it for speed measurements, not
for accuracy).
"""

import io
import tarfile
import tempfile
from pathlib import Path
from typing import Iterator

import spacy
import torch
import typer

from spacy_bert_pipes.models.transformer.hf_shim import HFShim

app = typer.Typer(add_completion=False)


def encoder_shims(nlp: spacy.Language) -> Iterator[HFShim]:
    for _, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        if model is None:
            continue
        for node in model.walk():
            for shim in node.shims:
                if isinstance(shim, HFShim) and shim._model is not None:
                    yield shim


def cast(nlp: spacy.Language, dtype: torch.dtype) -> int:
    n = 0
    for shim in encoder_shims(nlp):
        transformer = shim.module.transformer
        shim.module.to(dtype)
        transformer.config.torch_dtype = dtype
        n += 1
    return n


@app.command()
def pack(pipeline: Path, out_dir: Path, chunk_mb: int = 15) -> None:
    nlp = spacy.load(pipeline)
    n = cast(nlp, torch.float16)
    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp:
        nlp.to_disk(Path(tmp) / "pipeline")
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(Path(tmp) / "pipeline", arcname="pipeline")
    data = buffer.getvalue()
    out_dir.mkdir(parents=True, exist_ok=True)
    size = chunk_mb * 1_000_000
    for i in range(0, len(data), size):
        (out_dir / f"pipeline.tar.{i // size:02d}").write_bytes(data[i : i + size])
    typer.echo(f"{pipeline}: {n} encoder(s) in fp16, {len(data) / 1e6:.1f} MB in {out_dir}")


@app.command()
def unpack(in_dir: Path, dest: Path) -> None:
    chunks = sorted(in_dir.glob("pipeline.tar.*"))
    if not chunks:
        raise typer.BadParameter(f"no pipeline.tar.* chunks in {in_dir}")
    data = b"".join(p.read_bytes() for p in chunks)
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")
        nlp = spacy.load(Path(tmp) / "pipeline")
        n = cast(nlp, torch.float32)
        nlp.to_disk(dest)
    typer.echo(f"{dest}: {n} encoder(s) back in fp32 (weights rounded to fp16)")


if __name__ == "__main__":
    app()
