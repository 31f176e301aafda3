"""Checks on what a saved encoder's bytes say, before anything acts on it.

A pipeline folder is input like any other: `spacy.load` (and every Ray worker)
reads the encoder's serialized tokenizer files, their names and their settings
from it. Nothing read from those bytes may pick a path on this machine.
No torch here: the pipeline loader imports these to name a damaged file.

Our encoder checks its own bytes (`HFShim.from_bytes`); `check_saved_tokenizers`
checks, before they load, the bytes of spacy-transformers' `transformer`
components, whose loader writes each saved tokenizer file name it finds into a
temporary folder unchecked and passes saved arguments to `from_pretrained`.
"""

import os
from typing import Any, Optional

import srsly

# Tokenizer settings that name a file to open. Saved tokenizers never carry them
# (`save_pretrained` drops them; the files are found by name in the folder), but
# a crafted or stale tokenizer_config.json could point them anywhere.
_FILE_SETTING_SUFFIXES = ("_file", "_files")
_MAX_NAME_LENGTH = 255


class DamagedEncoderError(ValueError):
    """A part of a saved encoder (its Hugging Face config, weights or tokenizer)
    that cannot be read back.

    part (str): "config", "weights" or "tokenizer".
    reason (str): What is wrong with it, on one line.
    """

    def __init__(self, part: str, reason: str):
        self.part = part
        self.reason = one_line(reason)
        super().__init__(f"the encoder's {part} cannot be read: {self.reason}")


def one_line(text: str, limit: int = 300) -> str:
    """The first non-blank line of an error text, shortened to `limit` characters."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def safe_file_name(name: object) -> str:
    """A file name read from serialized bytes, checked to stay inside its folder.

    name (object): The name as the bytes hold it.
    RETURNS (str): The name, unchanged, when it is a plain file name.
    RAISES (DamagedEncoderError): The name is not a string, empty, has a NUL, a
        path separator or a drive, is "." or "..", or is absolute.
    """
    problem: Optional[str] = None
    if not isinstance(name, str):
        problem = f"is a {type(name).__name__}, not a string"
    elif not name or name in (".", ".."):
        problem = "is empty or a directory reference"
    elif "\x00" in name:
        problem = "contains a NUL character"
    elif any(sep in name for sep in ("/", "\\", ":")) or os.path.isabs(name):
        problem = "is a path, not a plain file name"
    elif len(name) > _MAX_NAME_LENGTH:
        problem = f"is longer than {_MAX_NAME_LENGTH} characters"
    if problem is not None:
        raise DamagedEncoderError(
            "tokenizer",
            f"refusing the saved tokenizer file name {name!r}: it {problem} "
            "(a pipeline may only name files inside its own folder)",
        )
    return str(name)


def without_file_settings(settings: dict) -> dict:
    """A tokenizer_config.json's settings without those that name a file to open
    (e.g. "vocab_file": "/etc/passwd"): the tokenizer files are read from the
    folder they were written to, by their own names."""
    return {k: v for k, v in settings.items() if not str(k).endswith(_FILE_SETTING_SUFFIXES)}


# The only saved tokenizer argument spacy-transformers writes.
_TRF_TOKENIZER_KWARGS = {"use_fast"}


def check_saved_tokenizers(model_bytes: bytes) -> None:
    """Check the tokenizer files that the shims inside a thinc model's bytes
    would write when loaded: every name a plain file name, and no saved
    `from_pretrained` arguments but `use_fast` (no `trust_remote_code`).

    model_bytes (bytes): A component's `model` file (thinc `Model.to_bytes`).
    RAISES (DamagedEncoderError): A name or argument is refused.
    RAISES (ValueError): The bytes are not msgpack.
    """
    msg = srsly.msgpack_loads(model_bytes)
    for node_shims in msg.get("shims", []) if isinstance(msg, dict) else []:
        for shim_bytes in node_shims:
            shim: Any = srsly.msgpack_loads(shim_bytes) if isinstance(shim_bytes, bytes) else None
            files = shim.get("tokenizer") if isinstance(shim, dict) else None
            if not isinstance(files, dict):
                continue
            for name, value in files.items():
                if name == "kwargs":
                    keys = set(value) if isinstance(value, dict) else None
                    if keys is None or keys - _TRF_TOKENIZER_KWARGS:
                        raise DamagedEncoderError(
                            "tokenizer",
                            f"refusing the saved tokenizer arguments {value!r}: only "
                            f"{sorted(_TRF_TOKENIZER_KWARGS)} may be saved",
                        )
                else:
                    safe_file_name(name)
