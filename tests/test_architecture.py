"""The package's shape, read statically (ast, nothing imported): floors, import
cycles, module sizes, private names and the folders' docstrings.

* Floors: every room (a top-level module or subpackage of spacy_bert_pipes, and
  each subpackage of models/) sits on a floor of FLOORS. A module imports only
  from its own room and from rooms on lower floors: no arrow runs upward or
  sideways. Every import counts: at module level, inside functions (the lazy
  ones that keep torch out of `spacy.blank`) and under `if TYPE_CHECKING:`.
* No module imports a module that imports it back, directly or through others
  (the same imports counted).
* No module is over MAX_LINES lines (STYLE.md: past that it holds more than one
  concern, and splitting it by concern is the mend), but those allowed in
  OVER_SIZE_FOR_NOW while they wait for their split.
* No module imports another module's underscore-private names (`from .x import
  _y`, or `x._y` on an imported module).
* Every package has a docstring naming its concern, and models/ holds at most
  MAX_MODELS_MODULES modules directly (the rest in its subpackages).
"""

import ast
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

PACKAGE = Path(__file__).resolve().parents[1] / "spacy_bert_pipes"
MAX_LINES = 500
# Modules allowed over MAX_LINES for now, each until it is split by concern.
OVER_SIZE_FOR_NOW: Set[str] = set()
MAX_MODELS_MODULES = 10
# The rooms, lowest floor first. A room imports from lower floors only.
FLOORS: List[Set[str]] = [
    {"about", "memory", "progress", "training_log", "plots", "io", "confidence", "corpus_attrs"},
    {"models", "models.types", "scorers"},
    {"models.text"},
    {"models.transformer"},
    {"models.encoder"},
    {"models.heads"},
    {"loading"},
    {"pipeline"},
    {"convert", "evaluate", "explain", "pretrain", "runtime"},
    {"int8_check"},  # scores with evaluate; assemble and shrink take its mark off
    {"assemble", "multitask"},
    {"similar", "annotate"},
    {"discover"},
    {"report"},
    {"cli"},
    {"__main__", ""},  # "": the package's own __init__
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: Dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def resolve(module: str, node: ast.ImportFrom) -> Optional[str]:
    """The absolute module an ImportFrom reads from, if it is one of ours."""
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
        base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        target = f"{base}.{node.module}" if node.module else base
    else:
        target = node.module or ""
    return target if target in MODULES else None


def imports(module: str, source: Optional[str] = None) -> Tuple[Set[str], List[str]]:
    """The modules of ours that `module` imports (anywhere in it: at module
    level, in functions, under TYPE_CHECKING), and its imports of other modules'
    private names ("file:line name")."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf8") if source is None else source)
    edges: Set[str] = set()
    private: List[str] = []
    # names bound to one of our modules, anywhere in the file: `x._y` reads a private name
    aliases: Dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = resolve(module, node)
            for alias in node.names if source is not None else []:
                submodule = f"{source}.{alias.name}"
                if submodule in MODULES:
                    aliases[alias.asname or alias.name] = submodule
                    edges.add(submodule)
                else:
                    edges.add(str(source))
                    if is_private(alias.name) and source != module:
                        private.append(f"{path.name}:{node.lineno} {submodule}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    edges.add(alias.name)
                    if alias.asname:
                        aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and is_private(node.attr)
            and aliases[node.value.id] != module
        ):
            private.append(f"{path.name}:{node.lineno} {aliases[node.value.id]}.{node.attr}")
    edges.discard(module)
    return edges, private


def room(module: str) -> str:
    """The room of a module: its top-level module or subpackage under the
    package ("pipeline", "loading"), or for models/ its subpackage
    ("models.text"); "" for the package's own __init__."""
    parts = module.split(".")[1:]
    if parts[:1] == ["models"] and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0] if parts else ""


def floor_of(name: str) -> int:
    for height, rooms in enumerate(FLOORS):
        if name in rooms:
            return height
    raise AssertionError(f"Room {name!r} is on no floor: add it to FLOORS")


def upward(graph: Dict[str, Set[str]]) -> List[str]:
    """The imports from a room to another room on the same floor or a higher one."""
    found = []
    for module, targets in sorted(graph.items()):
        here = room(module)
        for target in sorted(targets):
            there = room(target)
            if there != here and floor_of(there) >= floor_of(here):
                found.append(f"{module} -> {target} ({here!r} may not import {there!r})")
    return found


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def too_large(path: Path) -> Optional[int]:
    """The module's length if it is over MAX_LINES, else None."""
    n_lines = len(path.read_text(encoding="utf8").splitlines())
    return n_lines if n_lines > MAX_LINES else None


def test_no_module_is_over_max_lines() -> None:
    too_large_modules = []
    for path in MODULES.values():
        relative = path.relative_to(PACKAGE).as_posix()
        n_lines = too_large(path)
        if n_lines is not None and relative not in OVER_SIZE_FOR_NOW:
            too_large_modules.append(f"{relative} ({n_lines} lines)")
    assert not too_large_modules, (
        f"Modules over {MAX_LINES} lines: {', '.join(too_large_modules)}: split each by "
        "concern, into modules named for what they own"
    )


def test_the_allowance_is_still_needed() -> None:
    # An allowed module that was split (or shrank) leaves the list.
    for relative in OVER_SIZE_FOR_NOW:
        assert too_large(PACKAGE / relative) is not None, (
            f"{relative} needs no allowance any more: remove it from OVER_SIZE_FOR_NOW"
        )


def test_no_module_imports_private_names_of_another() -> None:
    private = [hit for module in MODULES for hit in imports(module)[1]]
    assert not private, f"Imports of another module's private names: {private}"


def graph_of_package() -> Dict[str, Set[str]]:
    return {module: imports(module)[0] for module in MODULES}


def test_no_import_cycles() -> None:
    found = cycles(graph_of_package())
    assert not found, f"Import cycles among spacy_bert_pipes modules: {found}"


def test_every_room_imports_only_from_lower_floors() -> None:
    found = upward(graph_of_package())
    assert not found, "Imports upward or sideways between rooms:\n" + "\n".join(found)


def test_every_floor_names_a_room_that_exists() -> None:
    rooms = {room(module) for module in MODULES}
    listed = set().union(*FLOORS)
    assert listed <= rooms | {"models"}, f"FLOORS names rooms that are gone: {listed - rooms}"


def test_every_package_names_its_concern() -> None:
    packages = [p for p in MODULES.values() if p.name == "__init__.py"]
    missing = [str(p.parent.relative_to(PACKAGE.parent)) for p in packages if not docstring(p)]
    assert not missing, f"Packages without a docstring naming their concern: {missing}"


def test_models_holds_few_modules_directly() -> None:
    direct = sorted(p.name for p in (PACKAGE / "models").glob("*.py"))
    assert len(direct) <= MAX_MODELS_MODULES, (
        f"models/ holds {len(direct)} modules directly ({direct}): put them in the "
        "subpackage of their concern"
    )


def docstring(path: Path) -> str:
    return (ast.get_docstring(ast.parse(path.read_text(encoding="utf8"))) or "").strip()


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    # The checkers themselves, on small graphs and sources of known shape.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert is_private("_x") and not is_private("__all__") and not is_private("x")
    tree = ast.parse("from .models.transformer.hf_shim import _NOT_LOADED\n")
    node = tree.body[0]
    assert isinstance(node, ast.ImportFrom)
    assert resolve("spacy_bert_pipes.explain.compute", node) is None  # ..models, not .models
    shim = "spacy_bert_pipes.models.transformer.hf_shim"
    assert resolve("spacy_bert_pipes.loading", node) == shim
    # an upward arrow (a model importing a component) and a sideways one
    tokens, textcat = "spacy_bert_pipes.models.text.tokens", "spacy_bert_pipes.pipeline.textcat"
    assert upward({tokens: {textcat}}) and upward({textcat: {tokens}}) == []
    convert, evaluate = "spacy_bert_pipes.convert.docbin", "spacy_bert_pipes.evaluate"
    assert upward({convert: {evaluate}})
    assert room(textcat) == "pipeline" and room(tokens) == "models.text"
    assert room("spacy_bert_pipes") == "" and room("spacy_bert_pipes.models") == "models"


def test_imports_under_type_checking_and_in_functions_count() -> None:
    # A circle hidden behind TYPE_CHECKING or a function-level import is a circle.
    source = PACKAGE / "pipeline" / "textcat_targets.py"
    hidden = (
        source.read_text(encoding="utf8")
        + "\nif TYPE_CHECKING:\n    from .textcat_pipe import BertTextCategorizer\n"
        + "\ndef _f() -> None:\n    from ..cli import app  # noqa: F401\n"
    )
    edges = imports("spacy_bert_pipes.pipeline.textcat_targets", hidden)[0]
    pipe, targets = (
        "spacy_bert_pipes.pipeline.textcat_pipe",
        "spacy_bert_pipes.pipeline.textcat_targets",
    )
    assert pipe in edges and "spacy_bert_pipes.cli" in edges
    graph = graph_of_package()
    graph[targets] = edges
    assert any({pipe, targets} <= set(component) for component in cycles(graph))
    assert any("'pipeline' may not import 'cli'" in line for line in upward(graph))


def test_the_architecture_page_shows_every_room() -> None:
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf8")
    missing = []
    for name in set().union(*FLOORS) - {"", "models"}:
        path = name.replace(".", "/")
        if f"`{path}/`" not in page and f"`{path}.py`" not in page:
            missing.append(name)
    assert not missing, f"docs/architecture.md does not show the room(s) {sorted(missing)}"
