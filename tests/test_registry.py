"""Every registered name is an entry point, and every entry point resolves."""

import configparser
from pathlib import Path

import spacy
from spacy.util import registry

SETUP_CFG = Path(__file__).parent.parent / "setup.cfg"
REGISTRIES = {
    "spacy_factories": None,
    "spacy_architectures": registry.architectures,
    "spacy_misc": registry.misc,
    "spacy_scorers": registry.scorers,
    "spacy_readers": registry.readers,
    "spacy_batchers": registry.batchers,
    "spacy_loggers": registry.loggers,
}


def entry_points() -> dict:
    parser = configparser.ConfigParser()
    parser.read(SETUP_CFG)
    section = parser["options.entry_points"]
    out = {}
    for group in REGISTRIES:
        lines = [ln.strip() for ln in section.get(group, "").splitlines() if ln.strip()]
        out[group] = dict(tuple(p.strip() for p in ln.split("=", 1)) for ln in lines)
    return out


def test_every_entry_point_resolves_to_the_registered_function() -> None:
    import importlib

    import spacy_bert_pipes  # noqa: F401  (registers everything)

    for group, names in entry_points().items():
        assert names, f"no entry points for {group}"
        for name, target in names.items():
            module, attr = target.split(":")
            func = getattr(importlib.import_module(module), attr)
            if group == "spacy_factories":
                assert spacy.Language.has_factory(name), name
                assert spacy.Language.get_factory_meta(name).factory == name
            else:
                assert REGISTRIES[group].get(name) is func, name


def test_every_registered_name_has_an_entry_point() -> None:
    import spacy_bert_pipes  # noqa: F401

    declared = {name for names in entry_points().values() for name in names}
    ours = set()
    registries = (registry.architectures, registry.misc, registry.scorers, registry.readers)
    for reg in registries + (registry.batchers, registry.loggers):
        ours |= {n for n in reg.get_all() if n.startswith("spacy-bert-pipes.")}
    ours |= {n for n in spacy.Language.factories if n.startswith("bert_")}
    assert ours <= declared, ours - declared
