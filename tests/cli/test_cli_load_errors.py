"""Damaged or foreign pipelines fail with one line naming the folder, the
component and the broken file, before any input is read (`loading.load_pipeline`,
as every command that loads a pipeline uses it)."""

import json
import random
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
import spacy
from damage import rewrite_encoder
from helpers import NER_TEXTS, SMALL_ENCODER, loader_config, ner_examples
from spacy.tokens import DocBin
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app
from spacy_bert_pipes.loading import PipelineLoadError, load_pipeline

runner = CliRunner()


@pytest.fixture(scope="module")
def saved(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("load_errors")
    nlp = spacy.blank("en")
    for name in ("bert_textcat", "bert_ner"):
        nlp.add_pipe(name, config={"model": {"encoder": SMALL_ENCODER}})
        nlp.config["initialize"]["components"][name] = loader_config(tiny_bert)
    examples = ner_examples(nlp)
    for example in examples:
        example.reference.cats = {"card": 1.0, "other": 0.0}
    nlp.initialize(lambda: examples)
    nlp.to_disk(root / "pipe")
    docs = [eg.reference for eg in examples]
    DocBin(docs=docs).to_disk(root / "data.spacy")
    assert len(docs) == len(NER_TEXTS)
    return {"pipe": root / "pipe", "data": root / "data.spacy", "hf": tiny_bert}


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def garble(path: Path) -> None:
    path.write_bytes(b"\x93\xff not msgpack \x00" * 40)


def set_encoder(key: str, value: Any) -> Callable[[Path], None]:
    def change(model_file: Path) -> None:
        rewrite_encoder(model_file, lambda msg: msg.__setitem__(key, value))

    return change


def without_tokenizer_files(model_file: Path) -> None:
    rewrite_encoder(model_file, lambda msg: msg.__setitem__("tokenizer", {}))


def garbled_tokenizer_files(model_file: Path) -> None:
    def change(msg: Dict[str, Any]) -> None:
        files = msg["tokenizer"]
        assert {"tokenizer.json", "vocab.txt"} <= set(files)
        # vocab.txt alone can rebuild a fast tokenizer: garble it too
        msg["tokenizer"] = {
            name: b"\xff\xfe{[ garbage" if name in ("tokenizer.json", "vocab.txt") else data
            for name, data in files.items()
        }

    rewrite_encoder(model_file, change)


def broken_config(path: Path) -> None:
    lines = path.read_text(encoding="utf8").splitlines()
    lines.insert(4, "this line is not config")  # line 5
    path.write_text("\n".join(lines), encoding="utf8")


def headerless_config(path: Path) -> None:
    path.write_text("this is not a config [[[", encoding="utf8")


def random_bytes(path: Path) -> None:
    path.write_bytes(random.Random(0).randbytes(2000))


def cut_config(path: Path) -> None:
    """Cut off inside a section header, as a copy that stopped half way."""
    text = path.read_text(encoding="utf8")
    path.write_text(text[: text.index("[components.bert_ner]") + 8], encoding="utf8")


def replace_in_config(old: str, new: str) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        text = path.read_text(encoding="utf8")
        assert old in text
        path.write_text(text.replace(old, new), encoding="utf8")

    return change


# (damage, the file it is applied to, the component named, the file named, words of the reason)
CASES: Dict[str, Tuple[Callable[[Path], object], str, Optional[str], Optional[str], str]] = {
    "truncated_weights": (truncate, "bert_ner/model", "bert_ner", "bert_ner/model", "damaged"),
    "garbled_model_file": (
        garble,
        "bert_textcat/model",
        "bert_textcat",
        "bert_textcat/model",
        "damaged",
    ),
    "garbled_safetensors": (
        set_encoder("weights", b"\x00" * 64),
        "bert_ner/model",
        "bert_ner",
        "bert_ner/model",
        "encoder's weights",
    ),
    "garbled_hf_config": (
        set_encoder("config", "{not json"),
        "bert_textcat/model",
        "bert_textcat",
        "bert_textcat/model",
        "encoder's config",
    ),
    "missing_tokenizer_files": (
        without_tokenizer_files,
        "bert_ner/model",
        "bert_ner",
        "bert_ner/model",
        "encoder's tokenizer",
    ),
    "garbled_tokenizer_files": (
        garbled_tokenizer_files,
        "bert_textcat/model",
        "bert_textcat",
        "bert_textcat/model",
        "encoder's tokenizer",
    ),
    "missing_model_file": (
        lambda p: p.unlink(),
        "bert_ner/model",
        "bert_ner",
        "bert_ner/model",
        "missing",
    ),
    "garbled_component_cfg": (garble, "bert_ner/cfg", "bert_ner", "bert_ner/cfg", "not valid JSON"),
    "broken_config_cfg": (broken_config, "config.cfg", None, "config.cfg", "at line 5"),
    "garbled_config_cfg": (garble, "config.cfg", None, "config.cfg", "UTF-8"),
    "headerless_config_cfg": (
        headerless_config,
        "config.cfg",
        None,
        "config.cfg",
        "at line 1, before any [section] header: 'this is not a config [[['",
    ),
    "random_bytes_config_cfg": (random_bytes, "config.cfg", None, "config.cfg", "UTF-8"),
    "cut_off_config_cfg": (cut_config, "config.cfg", None, "config.cfg", "'[compone'"),
    "unknown_function_in_config_cfg": (
        replace_in_config("spacy-bert-pipes.TokenTaggerModel.v1", "spacy-bert-pipes.Nope.v1"),
        "config.cfg",
        None,
        "config.cfg",
        "Could not find function 'spacy-bert-pipes.Nope.v1'",
    ),
    "wrong_type_in_config_cfg": (
        replace_in_config("max_length = 16", 'max_length = "sixteen"'),
        "config.cfg",
        None,
        "config.cfg",
        "max_length",
    ),
    "garbled_meta_json": (garble, "meta.json", None, "meta.json", "JSON"),
    "meta_json_without_lang": (
        lambda p: p.write_text('{"name": "x"}', encoding="utf8"),
        "meta.json",
        None,
        "meta.json",
        "'lang'",
    ),
}


def damaged_copy(saved: Dict[str, Path], tmp_path: Path, case: str) -> Path:
    pipe = Path(shutil.copytree(saved["pipe"], tmp_path / "pipe"))
    damage, target = CASES[case][:2]
    damage(pipe / target)
    return pipe


def assert_one_line(result: Any, *expected: str) -> str:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    for text in expected:
        assert text in lines[0], (text, lines[0])
    return lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_load_pipeline_names_the_broken_file(
    saved: Dict[str, Path], tmp_path: Path, case: str
) -> None:
    pipe = damaged_copy(saved, tmp_path, case)
    _, _, component, file, reason = CASES[case]
    with pytest.raises(PipelineLoadError) as info:
        load_pipeline(pipe)
    err = info.value
    assert err.path == str(pipe)
    assert err.component == component
    assert err.file == (None if file is None else str(pipe / file))
    assert reason in err.reason
    assert "\n" not in str(err)


@pytest.mark.parametrize("case", list(CASES))
def test_evaluate_fails_with_one_line(saved: Dict[str, Path], tmp_path: Path, case: str) -> None:
    pipe = damaged_copy(saved, tmp_path, case)
    _, _, component, file, _ = CASES[case]
    result = runner.invoke(app, ["evaluate", str(pipe), str(saved["data"])])
    expected = [f"Cannot load the pipeline {pipe}", str(pipe / file) if file else ""]
    if component is not None:
        expected.append(f"component '{component}'")
    assert_one_line(result, *expected)


@pytest.mark.parametrize(
    "case", ["truncated_weights", "broken_config_cfg", "missing_tokenizer_files"]
)
def test_explain_fails_with_one_line(saved: Dict[str, Path], tmp_path: Path, case: str) -> None:
    pipe = damaged_copy(saved, tmp_path, case)
    file = CASES[case][3]
    args = ["explain", str(pipe), "hello world", "-o", str(tmp_path / "out")]
    assert_one_line(runner.invoke(app, args), str(pipe / str(file)))
    assert not (tmp_path / "out").exists()


CONFIG_CASES = [case for case, (_, target, *_) in CASES.items() if target == "config.cfg"]


def command_line(command: str, pipe: Path, out: Path) -> List[str]:
    """A command that loads `pipe`, its other inputs written in `out`'s folder
    and its output at `out` (evaluate's is covered by the test above)."""
    if command == "annotate":
        texts = out.parent / "texts.csv"
        texts.write_text("text\nhello world\n", encoding="utf8")
        return ["annotate", str(pipe), str(texts), str(out)]
    if command == "assemble":
        return ["assemble", str(out), "--ner", str(pipe)]
    if command == "explain":
        return ["explain", str(pipe), "hello world", "-o", str(out)]
    assert command == "similar"
    vectors = out.parent / "vectors.jsonl"
    rows = [{"id": "a", "vector": [1.0, 0.0]}, {"id": "b", "vector": [0.0, 1.0]}]
    vectors.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf8")
    return ["similar", str(vectors), "hello world", "--pipeline", str(pipe)]


@pytest.mark.parametrize("command", ["annotate", "assemble", "explain", "similar"])
@pytest.mark.parametrize("case", CONFIG_CASES)
def test_a_damaged_config_cfg_is_one_line_in_every_command(
    saved: Dict[str, Path], tmp_path: Path, case: str, command: str
) -> None:
    pipe = damaged_copy(saved, tmp_path, case)
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, command_line(command, pipe, out))
    file = pipe / "config.cfg"
    assert_one_line(result, f"Cannot load the pipeline {pipe}: file {file}: ", CASES[case][4])
    assert not out.exists() and not (tmp_path / "out.jsonl.parts").exists()


@pytest.mark.parametrize("command", ["evaluate", "explain"])
def test_foreign_folder_is_not_a_pipeline(
    saved: Dict[str, Path], tmp_path: Path, command: str
) -> None:
    """A Hugging Face checkpoint folder, an empty folder and a file."""
    empty = tmp_path / "empty"
    empty.mkdir()
    a_file = tmp_path / "file.txt"
    a_file.write_text("hello")
    for folder, file in ((saved["hf"], "config.cfg"), (empty, "config.cfg"), (a_file, None)):
        if command == "evaluate":
            args = ["evaluate", str(folder), str(saved["data"])]
        else:
            args = ["explain", str(folder), "hello", "-o", str(tmp_path / "out")]
        line = assert_one_line(runner.invoke(app, args), f"Cannot load the pipeline {folder}")
        if file:
            assert f"file {folder / file}: missing: not a spaCy pipeline folder" in line


def test_missing_pipeline(saved: Dict[str, Path], tmp_path: Path) -> None:
    args = ["evaluate", str(tmp_path / "nope"), str(saved["data"])]
    assert_one_line(runner.invoke(app, args), str(tmp_path / "nope"), "no such folder")


def test_intact_pipeline_loads_as_spacy_load_does(saved: Dict[str, Path]) -> None:
    ours = load_pipeline(saved["pipe"])
    theirs = spacy.load(saved["pipe"])
    assert ours.pipe_names == theirs.pipe_names
    assert ours.config == theirs.config
    for text, _ in NER_TEXTS:
        a, b = ours(text), theirs(text)
        assert a.cats == pytest.approx(b.cats, abs=1e-6)
        assert [(e.start_char, e.end_char, e.label_) for e in a.ents] == [
            (e.start_char, e.end_char, e.label_) for e in b.ents
        ]
