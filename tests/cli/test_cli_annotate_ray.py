"""`bert-pipes annotate --engine ray`: a local Ray started and stopped by the
command, the same output as the local engine, and the options it refuses."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from annotate_helpers import TEXTS, save_tiny_pipeline
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app

pytestmark = pytest.mark.xdist_group("ray")  # one Ray at a time on the machine (make test -n 2)

torch.set_num_threads(1)  # as in Ray's actors: the same float sums
runner = CliRunner()


@pytest.fixture(scope="module")
def pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("pipeline") / "nlp"
    return str(save_tiny_pipeline(path, tiny_bert, qa=False))


def test_help_names_the_ray_options() -> None:
    result = runner.invoke(app, ["annotate", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in (
        "--engine",
        "--ray-address",
        "--ray-workers",
        "--cpus-per-worker",
        "--gpu-per-worker",
    ):
        assert option in result.output


@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="Ray is an optional extra: pip install 'spacy-bert-pipes[ray]'",
)
def test_engine_ray_starts_a_local_ray_and_gives_the_local_rows(
    pipeline: str, tmp_path: Path
) -> None:
    import ray

    assert not ray.is_initialized()
    input_path = tmp_path / "in.jsonl"
    lines = [json.dumps({"id": str(i), "text": text}) for i, text in enumerate(TEXTS * 4)]
    lines.insert(3, '{"id": "null", "text": null}')
    input_path.write_text("\n".join(lines) + "\n", encoding="utf8")
    outputs = {}
    for engine in ("local", "ray"):
        output = tmp_path / f"{engine}.jsonl"
        args = ["annotate", pipeline, str(input_path), str(output), "--chunk-size", "6"]
        engine_args = (
            ["--engine", engine, "--ray-workers", "2"] if engine == "ray" else ["--workers", "1"]
        )
        result = runner.invoke(app, args + engine_args)
        assert result.exit_code == 0, result.output
        assert "Input rows: 21 = output rows 20" in result.output
        outputs[engine] = (output.read_bytes(), Path(f"{output}.errors.jsonl").read_bytes())
    assert outputs["ray"] == outputs["local"]
    assert not ray.is_initialized()  # stopped by the command that started it


@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None or torch.cuda.is_available(),
    reason="needs Ray, on a machine without a GPU",
)
def test_gpu_per_worker_without_a_gpu_fails_at_once(pipeline: str, tmp_path: Path) -> None:
    """Instead of waiting forever for GPUs that a local Ray will never have."""
    import ray

    input_path = tmp_path / "in.jsonl"
    input_path.write_text('{"text": "hello"}\n', encoding="utf8")
    args = ["annotate", pipeline, str(input_path), str(tmp_path / "out.jsonl")]
    result = runner.invoke(app, args + ["--engine", "ray", "--gpu-per-worker", "0.5"])
    assert result.exit_code == 1
    assert "2 workers with 0.5 GPU each need 1 GPUs; this machine has 0" in result.output
    assert not ray.is_initialized()


def test_local_engine_options_are_refused_with_ray(pipeline: str, tmp_path: Path) -> None:
    input_path = tmp_path / "in.jsonl"
    input_path.write_text('{"text": "hello"}\n', encoding="utf8")
    for option in (["--n-process", "2"], ["--gpu-id", "0"]):
        args = ["annotate", pipeline, str(input_path), str(tmp_path / "out.jsonl")]
        result = runner.invoke(app, args + ["--engine", "ray"] + option)
        assert result.exit_code == 1
        assert "--gpu-per-worker and --ray-workers" in result.output
