"""The package's shape, read statically (ast, nothing imported): module sizes,
private names and import cycles.

* A module over MAX_LINES lines says in its docstring which one concept it holds
  ("One concept: ...").
* No module imports another module's underscore-private names (`from .x import
  _y`, or `x._y` on an imported module).
* The module-level imports between spacy_bert_pipes modules have no cycle. Imports
  inside functions (the lazy ones that keep torch out of `spacy.blank`) and under
  `if TYPE_CHECKING:` do not run at import time and are not counted.
"""

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

PACKAGE = Path(__file__).resolve().parents[1] / "spacy_bert_pipes"
MAX_LINES = 500
ONE_CONCEPT = "One concept:"
# Modules allowed over MAX_LINES without a "One concept:" docstring, for now (none).
OVER_SIZE_FOR_NOW: Set[str] = set()


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


def top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """The statements that run at import time: the module body, into if/try
    blocks, but not into functions, classes or `if TYPE_CHECKING:`."""
    stack: List[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If):
            test = node.test
            if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                stack.extend(node.orelse)
                continue
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                stack.extend(handler.body)
        elif isinstance(node, ast.With):
            stack.extend(node.body)


def imports(module: str) -> Tuple[Set[str], List[str]]:
    """The modules of ours that `module` imports at import time, and its imports of
    other modules' private names ("file:line name")."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf8"))
    at_import_time = {id(node) for node in top_level(tree)}
    edges: Set[str] = set()
    private: List[str] = []
    # names bound to one of our modules, anywhere in the file: `x._y` reads a private name
    aliases: Dict[str, str] = {}
    for node in ast.walk(tree):
        targets: List[str] = []
        if isinstance(node, ast.ImportFrom):
            source = resolve(module, node)
            for alias in node.names if source is not None else []:
                submodule = f"{source}.{alias.name}"
                if submodule in MODULES:
                    aliases[alias.asname or alias.name] = submodule
                    targets.append(submodule)
                else:
                    targets.append(str(source))
                    if is_private(alias.name) and source != module:
                        private.append(f"{path.name}:{node.lineno} {submodule}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    targets.append(alias.name)
                    if alias.asname:
                        aliases[alias.asname] = alias.name
        if id(node) in at_import_time:
            edges.update(targets)
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
    """The module's length if it is over MAX_LINES and names no concept, else None."""
    text = path.read_text(encoding="utf8")
    n_lines = len(text.splitlines())
    docstring = ast.get_docstring(ast.parse(text)) or ""
    return n_lines if n_lines > MAX_LINES and ONE_CONCEPT not in docstring else None


def test_large_modules_hold_one_concept() -> None:
    too_large_modules = []
    for path in MODULES.values():
        relative = path.relative_to(PACKAGE).as_posix()
        n_lines = too_large(path)
        if n_lines is not None and relative not in OVER_SIZE_FOR_NOW:
            too_large_modules.append(f"{relative} ({n_lines} lines)")
    assert not too_large_modules, (
        f"Modules over {MAX_LINES} lines whose docstring names no '{ONE_CONCEPT}': "
        f"{', '.join(too_large_modules)}: split them, or say which concept they hold"
    )


def test_the_allowance_is_still_needed() -> None:
    # An allowed module that shrank (or gained its docstring) leaves the list.
    for relative in OVER_SIZE_FOR_NOW:
        assert too_large(PACKAGE / relative) is not None, (
            f"{relative} needs no allowance any more: remove it from OVER_SIZE_FOR_NOW"
        )


def test_no_module_imports_private_names_of_another() -> None:
    private = [hit for module in MODULES for hit in imports(module)[1]]
    assert not private, f"Imports of another module's private names: {private}"


def test_no_import_cycles() -> None:
    graph = {module: imports(module)[0] for module in MODULES}
    found = cycles(graph)
    assert not found, f"Import cycles among spacy_bert_pipes modules: {found}"


def test_the_checks_find_what_they_look_for() -> None:
    # The checkers themselves, on small graphs and sources of known shape.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert is_private("_x") and not is_private("__all__") and not is_private("x")
    tree = ast.parse("from .models.hf_shim import _NOT_LOADED\n")
    node = tree.body[0]
    assert isinstance(node, ast.ImportFrom)
    assert resolve("spacy_bert_pipes.explain.compute", node) is None  # ..models, not .models
    assert (
        resolve("spacy_bert_pipes.loading", node) == "spacy_bert_pipes.models.transformer.hf_shim"
    )
