"""A `bert_textcat`'s labels as a user writes them: names and descriptions.

* `check_label`: a label is one non-blank string (not a string of several);
* `read_label_descriptions`: the `label_descriptions` setting (inline, or a
  JSON file) as label -> phrases, with an error that names the file and the
  label;
* `name_description`: a label's name as a phrase, an error for a name
  without words.

What the phrases become (prototypes) is `label_prototypes.py`.
"""

import json
from pathlib import Path
from typing import Dict, List, Optional, Union

LabelDescriptions = Optional[Union[str, Dict[str, Union[str, List[str]]]]]


def read_label_descriptions(setting: LabelDescriptions, component: str) -> Dict[str, List[str]]:
    """label -> its description phrases, from the setting: a mapping (label ->
    a phrase or a list of phrases), or the path of a JSON file holding one."""
    if setting is None:
        return {}
    where = f"[components.{component}.label_descriptions]"
    data: object = setting
    if isinstance(setting, (str, Path)):
        path = Path(setting)
        where = str(path)
        try:
            data = json.loads(path.read_text(encoding="utf8"))
        except OSError as error:
            raise ValueError(
                f"{path}: cannot read the label descriptions of '{component}': {error}"
            ) from error
        except ValueError as error:
            raise ValueError(
                f"{path}: the label descriptions are not valid JSON: {error}"
            ) from error
    if not isinstance(data, dict):
        raise ValueError(
            f"{where}: expected an object of label -> description (or list of "
            f"descriptions), got {type(data).__name__}"
        )
    out: Dict[str, List[str]] = {}
    for label, value in data.items():
        phrases = [value] if isinstance(value, str) else value
        if (
            not isinstance(phrases, list)
            or not phrases
            or not all(isinstance(p, str) and p.strip() for p in phrases)
        ):
            raise ValueError(
                f"{where}: the description of label {label!r} must be a non-empty "
                f"string or a list of them, got {value!r}"
            )
        out[str(label)] = list(phrases)
    return out


def check_label(component: str, label: object) -> str:
    """The label, if it is one non-blank string; else an error naming the
    component and the value (labels given as one string, "a,b", or a list given
    where one label goes)."""
    if not isinstance(label, str) or not label.strip():
        raise ValueError(
            f"'{component}': a label must be one non-blank string, got {label!r} (add "
            "labels one at a time, or give several as a list of strings)"
        )
    return label


def name_description(component: str, label: str) -> str:
    """A label's name as a phrase: underscores as spaces ("card_arrival" -> "card
    arrival"); an error naming the component for a name with no words ("___")."""
    phrase = " ".join(label.replace("_", " ").split())
    if not phrase:
        raise ValueError(
            f"'{component}' describes its labels by their names, with underscores read as "
            f"spaces, and the label {label!r} has no words: give it a description in "
            f"[components.{component}.label_descriptions], or rename it"
        )
    return phrase
