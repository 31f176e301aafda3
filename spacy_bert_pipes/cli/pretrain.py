"""`bert-pipes pretrain`: masked-LM continued pretraining of an encoder."""

from pathlib import Path
from typing import Literal, Optional

import typer

from ..io.errors import ConversionError
from ..io.readers import InputFormat
from ..models.encoder.loaders import DEFAULT_ENCODER
from ..pretrain import PretrainError, PretrainPrecision, PretrainSettings, pretrain
from .common import app, fail, input_format_option, text_column_option

Masking = Literal["wordpiece", "whole-word"]


@app.command("pretrain")
def pretrain_cli(
    input_path: Path = typer.Argument(
        ...,
        help="The texts: a .csv file with a header row, a .jsonl file of JSON objects, "
        "a .parquet file, or a folder of .txt files (one text per file)",
        metavar="INPUT",
        exists=True,
    ),
    output_dir: Path = typer.Argument(
        ...,
        help="The output folder: checkpoints, log, metrics and the trained encoder "
        "(OUTPUT/encoder)",
        metavar="OUTPUT",
        file_okay=False,
    ),
    encoder: str = typer.Option(
        DEFAULT_ENCODER,
        "--encoder",
        help="The encoder to start from: a folder with a Hugging Face checkpoint, an "
        "installed model package, or a hub name",
    ),
    input_format: InputFormat = input_format_option(),
    text_column: str = text_column_option(),
    id_column: Optional[str] = typer.Option(
        None,
        "--id-column",
        help="The column or field of each row's id, used in messages about unreadable rows",
        show_default=False,
    ),
    epochs: int = typer.Option(
        3, "--epochs", min=0, help="Passes over the texts; 0: no limit (set --max-steps)"
    ),
    max_steps: int = typer.Option(
        0, "--max-steps", min=0, help="Stop after this many steps if sooner; 0: no limit"
    ),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Windows per step"),
    max_length: int = typer.Option(
        128,
        "--max-length",
        min=3,
        help="Wordpieces per window, special tokens included; longer texts are cut "
        "into several windows",
    ),
    learning_rate: float = typer.Option(
        5e-5, "--learning-rate", min=0.0, help="The peak learning rate (AdamW)"
    ),
    warmup: float = typer.Option(
        0.06,
        "--warmup",
        min=0.0,
        max=0.99,
        help="The share of the steps with a linear warmup; the rate then decays linearly to 0",
    ),
    weight_decay: float = typer.Option(0.01, "--weight-decay", min=0.0, help="AdamW weight decay"),
    mlm_probability: float = typer.Option(
        0.15, "--mlm-probability", min=0.01, max=0.99, help="The share of wordpieces chosen"
    ),
    masking: Masking = typer.Option(
        "wordpiece",
        "--masking",
        help="What is chosen with --mlm-probability: single wordpieces, or whole words "
        "(all wordpieces of a chosen word are predicted)",
    ),
    precision: PretrainPrecision = typer.Option(
        "fp32",
        "--precision",
        help="fp32, bf16 autocast, or auto (bf16 where the GPU or CPU computes it fast)",
    ),
    gpu_id: int = typer.Option(-1, "--gpu-id", help="The GPU to use; -1 runs on the CPU"),
    checkpoint_every: int = typer.Option(
        500, "--checkpoint-every", min=0, help="Steps between checkpoints; 0: none"
    ),
    keep_checkpoints: int = typer.Option(
        2, "--keep-checkpoints", min=1, help="How many of the latest checkpoints to keep"
    ),
    log_every: int = typer.Option(
        10, "--log-every", min=1, help="Steps between lines of OUTPUT/pretrain_log.jsonl"
    ),
    held_out: int = typer.Option(
        500,
        "--held-out",
        min=0,
        help="Texts held out to measure the masked-LM loss before and after training "
        "(at most a tenth of the texts); 0: none",
    ),
    seed: int = typer.Option(0, "--seed", help="Seeds the held-out sample, batches and masks"),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Discard an earlier run in OUTPUT, finished or not"
    ),
) -> None:
    """Continue the masked-LM pretraining of an encoder on a text collection.

    Each step chooses 15% of the wordpieces (never special tokens): 80% of
    them become [MASK], 10% a random wordpiece and 10% stay, and the model
    learns to predict the original pieces. The trained encoder is saved in
    OUTPUT/encoder; point a component at it with
    [initialize.components.<name>.encoder_loader] source = "OUTPUT/encoder"
    (or --paths.encoder OUTPUT/encoder with the shipped configs).

    Checkpoints are written every --checkpoint-every steps: after a crash or a
    kill, run the same command again to resume from the latest one.
    """
    settings = PretrainSettings(
        encoder=encoder,
        input_format=input_format,
        text_column=text_column,
        id_column=id_column,
        epochs=epochs,
        max_steps=max_steps,
        batch_size=batch_size,
        max_length=max_length,
        learning_rate=learning_rate,
        warmup=warmup,
        weight_decay=weight_decay,
        mlm_probability=mlm_probability,
        whole_word_masking=masking == "whole-word",
        precision=precision,
        gpu_id=gpu_id,
        checkpoint_every=checkpoint_every,
        keep_checkpoints=keep_checkpoints,
        log_every=log_every,
        held_out=held_out,
        seed=seed,
        overwrite=overwrite,
    )
    try:
        summary = pretrain(input_path, output_dir, settings, progress=True, report=typer.echo)
    except (ConversionError, PretrainError) as err:
        fail(str(err))
    except (OSError, ValueError) as err:  # the encoder cannot be loaded or trained
        fail(f"{encoder}: {err}")
    if summary.already_finished:
        typer.echo(
            f"{output_dir} already holds a finished run with this input and these "
            "settings; use --overwrite to train again"
        )
    if summary.perplexity_before is not None and summary.perplexity_after is not None:
        typer.echo(
            f"Held-out masked-LM loss: {summary.held_out_loss_before:.4f} -> "
            f"{summary.held_out_loss_after:.4f} (perplexity {summary.perplexity_before:.2f}"
            f" -> {summary.perplexity_after:.2f}) on {summary.held_out_texts} texts"
        )
    typer.secho(
        f"Trained {summary.steps} steps; the encoder is in {summary.encoder_path}",
        fg="green",
    )
