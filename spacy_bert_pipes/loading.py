"""Loading a trained pipeline, checked, optionally with its bert encoders at
another precision.

`load_pipeline` loads a folder in spaCy's own steps and turns whatever fails
(a foreign folder, a broken config.cfg, damaged weights or tokenizer files) into
one PipelineLoadError naming the folder, the component and the file.

Prediction precision is a setting of the encoder (`predict_precision` of
`spacy-bert-pipes.BertEncoder.v2`, `precision` of v1, which uses one precision for
training and prediction), so a saved pipeline keeps the one it was configured
with. `load_pipeline(path, precision=...)` overrides it in every encoder of the
pipeline (a `bert_encoder` component's model, or a head's own `model.encoder`) at
load time; listeners follow the encoder they listen to.
"""

import configparser
import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import spacy
import srsly
from confection import ConfigValidationError
from spacy.language import Language
from spacy.vocab import Vocab
from thinc.api import Model

from .models.transformer.serial import DamagedEncoderError, check_saved_tokenizers, one_line
from .models.types import Precision

T = TypeVar("T")

ENCODER_ARCHITECTURE = "spacy-bert-pipes.BertEncoder.v1"
# The setting that holds each encoder version's prediction precision.
PREDICT_PRECISION_KEYS = {
    ENCODER_ARCHITECTURE: "precision",
    "spacy-bert-pipes.BertEncoder.v2": "predict_precision",
}


def encoder_config_paths(config: Dict[str, Any]) -> List[str]:
    """The dotted config paths of every BertEncoder (v1, v2) in a pipeline's config,
    e.g. ["components.bert_encoder.model", "components.bert_ner.model.encoder"].
    """
    return list(_encoders(config))


def _encoders(config: Dict[str, Any]) -> Dict[str, str]:
    """{dotted path: architecture} of every BertEncoder in a pipeline's config."""
    paths = {}
    for name, component in config.get("components", {}).items():
        model = component.get("model") or {}
        if model.get("@architectures") in PREDICT_PRECISION_KEYS:
            paths[f"components.{name}.model"] = model["@architectures"]
        encoder = model.get("encoder") or {}
        if isinstance(encoder, dict) and encoder.get("@architectures") in PREDICT_PRECISION_KEYS:
            paths[f"components.{name}.model.encoder"] = encoder["@architectures"]
    return paths


class PipelineLoadError(ValueError):
    """A pipeline that cannot be loaded: missing, not a pipeline, or damaged.

    path (str): The pipeline folder (or package name).
    component (Optional[str]): The component whose files are broken, if one is.
    file (Optional[Path]): The broken file, e.g. `<path>/bert_ner/model`.
    reason (str): What is wrong, on one line.
    """

    def __init__(
        self,
        path: Union[str, Path],
        component: Optional[str],
        file: Optional[Union[str, Path]],
        reason: str,
    ):
        self.path = str(path)
        self.component = component
        self.file = None if file is None else str(file)
        self.reason = one_line(reason)
        where = f"Cannot load the pipeline {self.path}"
        if component is not None:
            where += f": component '{component}'"
        if self.file is not None:
            where += f", file {self.file}" if component is not None else f": file {self.file}"
        super().__init__(f"{where}: {self.reason}")


def load_pipeline(
    pipeline: Union[str, Path],
    *,
    precision: Optional[Precision] = None,
    config: Optional[Dict[str, Any]] = None,
    vocab: Optional[Vocab] = None,
    exclude: Sequence[str] = (),
    reproducible: bool = False,
) -> Language:
    """Load a pipeline, optionally with every bert encoder at another precision.

    A folder is loaded in spaCy's own steps (config.cfg, meta.json, the Language
    and its vocab, then each component's files), each checked, so a damaged or
    foreign pipeline fails before any input is read, with one line naming the
    folder, the component and the file.

    pipeline (Union[str, Path]): A folder saved with `nlp.to_disk`, or a package name.
    precision (Optional[Precision]): The prediction precision: "fp32", "bf16",
        "fp16", "int8", "tf32" or "auto"; None keeps the one each encoder was saved
        with. (A v1 encoder's `precision`, a v2 encoder's `predict_precision`.)
    config (Optional[Dict[str, Any]]): Further config overrides, as for `spacy.load`.
    vocab (Optional[Vocab]): A vocab to share, as for `spacy.load` (None: its own).
    exclude (Sequence[str]): What not to read from the folder, as for `spacy.load`
        (e.g. "lookups" when the vocab is shared).
    reproducible (bool): Batch every bert encoder's windows so that a doc's
        output does not depend on the other docs of its batch (see
        `set_reproducible`).
    RETURNS (Language): The loaded pipeline.
    RAISES (PipelineLoadError): No such folder or package, a folder that is not
        a pipeline, a damaged file.
    RAISES (ValueError): A precision (or reproducible) was asked for, but the
        pipeline has no bert encoder.
    """
    nlp = _load(pipeline, precision, config, vocab, exclude)
    if reproducible:
        set_reproducible(nlp, str(pipeline))
    return nlp


def set_reproducible(nlp: Language, name: str = "the pipeline") -> None:
    """Make each bert encoder of a loaded pipeline pad every window to a width
    of its own (its length rounded up to a multiple of 16) and batch windows
    of one width together (`windows.pack_reproducible`): a doc then gets the
    same output alone and inside any batch, at any precision, for a little
    speed (more, smaller batches). Prediction only; training is unchanged.

    nlp (Language): The pipeline.
    name (str): How errors name it.
    RAISES (ValueError): The pipeline has no bert encoder.
    """
    models = [getattr(component, "model", None) for _, component in nlp.components]
    encoders = [
        node
        for model in models
        if isinstance(model, Model)
        for node in model.walk()
        if node.name == "bert_encoder"
    ]
    if not encoders:
        names = ", ".join(nlp.pipe_names) or "none"
        raise ValueError(
            f"reproducible batches were asked for, but {name} has no bert encoder to "
            f"batch (its components: {names})"
        )
    for encoder in encoders:
        encoder.attrs["reproducible"] = True


def _load(
    pipeline: Union[str, Path],
    precision: Optional[Precision],
    config: Optional[Dict[str, Any]],
    vocab: Optional[Vocab],
    exclude: Sequence[str],
) -> Language:
    overrides = dict(config or {})
    folder = Path(pipeline)
    if folder.exists():
        if not folder.is_dir():
            raise PipelineLoadError(folder, None, None, "not a folder")
        saved = _saved_config(folder)
    elif not spacy.util.is_package(str(pipeline)):
        raise PipelineLoadError(
            pipeline, None, None, "no such folder, and no installed pipeline package of that name"
        )
    if precision is not None:
        if not folder.exists():  # a package: load it once as it is to read its config
            saved = _loaded(str(pipeline), lambda: dict(spacy.load(pipeline).config))
        paths = _encoders(saved)
        if not paths:
            names = ", ".join(saved.get("nlp", {}).get("pipeline", [])) or "none"
            raise ValueError(
                f"precision {precision!r} was asked for, but the pipeline {pipeline} has no "
                f"{ENCODER_ARCHITECTURE} whose precision it could set (its components: {names})"
            )
        overrides.update(
            {f"{path}.{PREDICT_PRECISION_KEYS[arch]}": precision for path, arch in paths.items()}
        )
    shared: Union[Vocab, bool] = True if vocab is None else vocab
    if not folder.exists():
        return _loaded(
            str(pipeline),
            lambda: spacy.load(pipeline, config=overrides, vocab=shared, exclude=list(exclude)),
        )
    return _load_folder(folder, overrides, shared, exclude)


def _load_folder(
    folder: Path, overrides: Dict[str, Any], vocab: Union[Vocab, bool], exclude: Sequence[str]
) -> Language:
    """What `spacy.load(folder)` does (`spacy.util.load_model_from_path`), step
    by step, so that each failure names its file."""
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        raise PipelineLoadError(folder, None, meta_path, _NOT_A_PIPELINE)
    try:
        json.loads(meta_path.read_text(encoding="utf8"))
    except ValueError as err:  # JSON and UnicodeDecodeError
        raise PipelineLoadError(folder, None, meta_path, f"not valid JSON ({err})") from err
    try:
        # as spacy.load reads it: checks "lang" and "name", warns about spaCy versions
        meta = spacy.util.load_meta(meta_path)
    except ValueError as err:
        raise PipelineLoadError(folder, None, meta_path, str(err)) from err
    config_path = folder / "config.cfg"
    dotted = spacy.util.dict_to_dot(overrides, for_overrides=True)
    try:
        config = spacy.util.load_config(config_path, overrides=dotted)
        nlp = spacy.util.load_model_from_config(
            config, vocab=vocab, exclude=list(exclude), meta=meta
        )
    except Exception as err:  # confection, registry and factory errors: all about this file
        raise PipelineLoadError(folder, None, config_path, _config_reason(err)) from err
    # Components are loaded one by one below; this reads the rest (config, meta,
    # vocab, tokenizer) and links listeners to their encoders.
    own_files = [name for name, proc in nlp.components if hasattr(proc, "from_disk")]
    try:
        nlp.from_disk(folder, exclude=own_files + list(exclude), overrides=dotted)
    except Exception as err:  # vocab or tokenizer files; spaCy names no file
        raise PipelineLoadError(folder, None, None, f"{type(err).__name__}: {err}") from err
    for name in own_files:
        component_path = folder / name
        try:
            if nlp.get_pipe_meta(name).factory in UNCHECKED_FACTORIES:
                _check_before_loading(component_path / "model")
            component: Any = nlp.get_pipe(name)  # any component with files of its own
            component.from_disk(component_path, exclude=["vocab"])
        except Exception as err:  # msgpack, safetensors, torch, tokenizers: all damage
            file, reason = _broken_file(component_path, err)
            raise PipelineLoadError(folder, name, file, reason) from err
    return nlp


# Components of other packages whose loading writes saved tokenizer file names
# unchecked (spacy-transformers' `transformer`): checked here first.
UNCHECKED_FACTORIES = ("transformer",)


def _check_before_loading(model_path: Path) -> None:
    if model_path.is_file():  # spacy-transformers also reads a folder of HF files
        check_saved_tokenizers(model_path.read_bytes())


_NOT_A_PIPELINE = "missing: not a spaCy pipeline folder (one saved with nlp.to_disk)"


def _broken_file(component_path: Path, err: Exception) -> Tuple[Path, str]:
    """Which of a component's files an error in its from_disk came from."""
    if isinstance(err, DamagedEncoderError):
        return component_path / "model", str(err)
    if isinstance(err, FileNotFoundError) and err.filename:
        return Path(err.filename), "missing"
    if not component_path.is_dir():
        return component_path, "missing"
    cfg = component_path / "cfg"
    if cfg.exists():
        try:
            srsly.read_json(cfg)
        except ValueError as cfg_err:
            return cfg, f"not valid JSON ({cfg_err})"
    # thinc's Model.from_bytes: truncated or garbled msgpack, or another model's
    # structure ("Cannot deserialize model: mismatched structure")
    return component_path / "model", f"damaged ({type(err).__name__}: {one_line(str(err))})"


def _config_reason(err: Exception) -> str:
    """One line for a config.cfg that cannot be read or built, with its line number
    where the parser gives one (confection reports the file as '<string>').

    Whatever the error, this gives a line and raises nothing: the caller is
    reporting a failure, and must not fail in turn.
    """
    parse_error = err if isinstance(err, configparser.Error) else err.__context__
    if isinstance(parse_error, configparser.Error):
        return _syntax_reason(parse_error)
    if isinstance(err, ConfigValidationError):
        return _validation_reason(err)
    if isinstance(err, UnicodeDecodeError):
        return f"not UTF-8 text ({_text(err)})"
    return f"{type(err).__name__}: {_text(err)}"


def _syntax_reason(error: configparser.Error) -> str:
    """configparser's error, with the line it names. A ParsingError lists
    (lineno, repr(line)) pairs in `errors`; its subclass MissingSectionHeaderError
    (text before the first [section]) has no `errors` but `lineno` and `line`."""
    errors = getattr(error, "errors", None)
    lineno, line = getattr(error, "lineno", None), getattr(error, "line", None)
    if isinstance(errors, list) and errors and isinstance(errors[0], tuple) and len(errors[0]) == 2:
        lineno, line = errors[0]  # line: the repr of the line
    elif isinstance(line, str):
        line = repr(line)
    if isinstance(lineno, int) and isinstance(line, str):
        where = f"at line {lineno}"
        if isinstance(error, configparser.MissingSectionHeaderError):
            where += ", before any [section] header"
        return f"not valid config syntax {where}: {line}"
    message = _text(error).replace("While reading from '<string>' ", "")
    if isinstance(lineno, int):  # a section or option given twice
        return f"not valid config syntax at line {lineno}: " + message.replace(
            f"[line {lineno:2d}]: ", ""
        )
    return f"not valid config syntax: {message}"


def _validation_reason(err: ConfigValidationError) -> str:
    """The first of confection's errors ({"loc": [...], "msg": ...}), or its
    description where it has none (e.g. a ${...} that names nothing)."""
    errors = getattr(err, "errors", None)
    first = errors[0] if isinstance(errors, (list, tuple)) and errors else None
    if isinstance(first, dict):
        loc = first.get("loc")
        location = ".".join(str(part) for part in loc) if isinstance(loc, (list, tuple)) else ""
        message = one_line(str(first.get("msg", "")))
        return f"{location}: {message}" if location else message
    return one_line(str(getattr(err, "desc", None) or "")) or f"{type(err).__name__}: {_text(err)}"


def _text(err: BaseException) -> str:
    """The first non-blank line of an error's message ("" if its __str__ fails)."""
    try:
        return one_line(str(err))
    except Exception:  # a message built from a broken value: the type still tells
        return ""


def _loaded(name: str, load: Callable[[], T]) -> T:
    """Run spaCy's own loading of an installed package, any failure as one line."""
    try:
        return load()
    except Exception as err:  # a damaged package: spaCy's loader knows no better
        raise PipelineLoadError(name, None, None, f"{type(err).__name__}: {err}") from err


def _saved_config(folder: Path) -> Dict[str, Any]:
    config_path = folder / "config.cfg"
    if not config_path.is_file():
        raise PipelineLoadError(folder, None, config_path, _NOT_A_PIPELINE)
    try:
        return dict(spacy.util.load_config(config_path, interpolate=False))
    except Exception as err:  # confection's errors, UnicodeDecodeError
        raise PipelineLoadError(folder, None, config_path, _config_reason(err)) from err
