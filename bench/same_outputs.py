"""Do two revisions of spacy-bert-pipes write the same outputs? (not a test)

For each of --old and --new (a git revision, or a checkout folder whose files,
uncommitted ones included, are copied), this makes a detached worktree under a
temporary folder beside the repository and runs the project workflow `all` in it
with small vars (a few training steps, a small collection), with that checkout's
code: PYTHONPATH is the checkout and PATH starts with the shared virtualenv's
bin/, so `python -m spacy`, `python -m spacy_bert_pipes` and `bert-pipes` import
its package (checked: each run records `spacy_bert_pipes.__file__`). Both runs
happen one after the other at the SAME path, so absolute paths written into
outputs cannot differ; PYTHONHASHSEED is fixed so set orders cannot either.

Then `annotate` runs once with each checkout's code on the same pipeline (the
one assembled by the --old run) and the same collection, writing JSONL, one
Parquet file and a folder of Parquet shards.

Every file a run wrote (untracked or changed in its worktree: training/,
metrics/, annotations/, reports/, corpus/, assets/, project.lock) is compared byte
for byte. A file that differs is explained where its format allows: JSON, JSONL
and Parquet are compared field by field, raw and again without the fields that
vary by design (timings, dates, paths: see VOLATILE), giving the differing fields
and the largest absolute difference of numbers; text files are compared line by
line, with and without their numbers. Results: bench/results/same_outputs_<old>_<new>.json.

    python bench/same_outputs.py --old d6230be --new 03c148b
    python bench/same_outputs.py --old 4e7924a --new . --keep

Runtime: the steps are small (6 training steps per component, test sets cut to
--test-docs 200, a 105-row collection), so the cost is mostly loading models and
spaCy's start-up. Measured on this 2-core machine at load ~10 (four other jobs),
niced: the textcat training alone took ~9 minutes per run and the two parallel
runs had not finished after 45 minutes. Expect well under that on a quiet or
larger machine; keep the checkouts (--keep) and use --compare-only on them to see
what a cut-off run has so far. Run it niced and in the background:
    nohup nice -n 19 .venv/bin/python bench/same_outputs.py --old A --new B > log 2>&1 &
"""

import difflib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import typer

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

# The workflow `all` sized to a few minutes: every step runs, on little data.
SMALL_VARS: Dict[str, Any] = {
    "textcat_steps": 6,
    "textcat_warmup": 2,
    "textcat_dev_size": 50,
    "multilabel_steps": 6,
    "multilabel_warmup": 2,
    "multilabel_dev_size": 50,
    "ner_steps": 6,
    "ner_warmup": 2,
    "ner_eval_frequency": 3,
    "ner_dev_docs": 50,
    "qa_slots_steps": 6,
    "qa_slots_warmup": 2,
    "qa_slots_eval_frequency": 3,
    "qa_slots_dev_size": 50,
    "qa_slots_test_size": 100,
    "collection_banking77": 100,
    "collection_squad": 5,
    "annotate_batch_size": 16,
    "annotate_chunk_size": 40,
}

# Keys whose values vary from run to run by design: wall-clock times, speeds,
# dates. A JSON difference confined to them is "expected".
VOLATILE = re.compile(
    r"(^|_)(seconds|time|times|speed|wps|words_per_second|docs_per_second|per_second|"
    r"elapsed|duration|date|timestamp|started|finished|created|hostname)($|_)",
    re.IGNORECASE,
)
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
SKIP_PARTS = {"__pycache__", ".git"}

app = typer.Typer(add_completion=False)


# The test sets evaluated whole by `all` (the Restaurant-8k one has a var): a
# run may cut them, the same way in both checkouts, after their conversion.
TEST_SETS = (
    "corpus/banking77/test.spacy",
    "corpus/nluplusplus/test.spacy",
    "corpus/conll2003/test.spacy",
)


def cut_test_sets(checkout: Path, n: int) -> None:
    """Edit checkout/project.yml: after the line converting each of TEST_SETS,
    keep a sample of n of its docs (scripts/sample_docs.py, seed 0)."""
    path = checkout / "project.yml"
    lines = path.read_text(encoding="utf8").splitlines(keepends=True)
    out: List[str] = []
    found = set()
    for line in lines:
        out.append(line)
        for test in TEST_SETS:
            if "spacy_bert_pipes convert" in line and f" {test}" in line:
                indent = line[: len(line) - len(line.lstrip())]
                out.append(f'{indent}- "python scripts/sample_docs.py {test} {test} {n}"\n')
                found.add(test)
    if found != set(TEST_SETS):
        raise SystemExit(f"{path}: no convert command writes {sorted(set(TEST_SETS) - found)}")
    path.write_text("".join(out), encoding="utf8")


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=str(cwd), check=True, capture_output=True, text=True
    ).stdout.strip()


def describe(source: str) -> Tuple[str, str]:
    """(label, kind): a checkout folder's label is its folder name (+ "-dirty" when
    it has changes), a revision's its short hash."""
    path = Path(source)
    if path.is_dir():
        head = git("rev-parse", "--short", "HEAD", cwd=path)
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", cwd=path))
        return f"{head}-dirty" if dirty else head, "folder"
    return git("rev-parse", "--short", f"{source}^{{commit}}"), "revision"


def make_checkout(source: str, kind: str, dest: Path) -> None:
    if kind == "revision":
        git("worktree", "add", "--detach", str(dest), source)
        return
    # a folder: its tracked and untracked (not ignored) files, as they are now
    src = Path(source).resolve()
    files = git("ls-files", "-co", "--exclude-standard", "-z", cwd=src).split("\0")
    for name in filter(None, files):
        if (src / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, dest / name)
    subprocess.run(["git", "init", "-q"], cwd=str(dest), check=True)
    subprocess.run(["git", "add", "-A"], cwd=str(dest), check=True)
    subprocess.run(
        ["git", "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "copy"],
        cwd=str(dest),
        check=True,
    )


def remove_checkout(path: Path, kind: str) -> None:
    if kind == "revision":
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=str(ROOT))
    shutil.rmtree(path, ignore_errors=True)


def code_env(code: Path, python: Path) -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(code)
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONHASHSEED"] = "0"
    return env


def imported_from(code: Path, python: Path) -> str:
    """The spacy_bert_pipes that `python` imports with code's environment (run
    from / so the current folder cannot decide it)."""
    out = subprocess.run(
        [str(python), "-c", "import spacy_bert_pipes; print(spacy_bert_pipes.__file__)"],
        env=code_env(code, python),
        cwd="/",
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(out).resolve().is_relative_to(code.resolve()):
        raise SystemExit(f"{code}: spacy_bert_pipes is imported from {out}, not the checkout")
    return out


def at_work_path(command: List[str], real: Path, work: Path) -> List[str]:
    """command run in a private mount namespace where `real` is seen at `work`:
    two runs at once, each at the same path (needs root, or user namespaces)."""
    script = 'mount --bind "$1" "$2" && cd "$2" && shift 2 && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, "sh", str(real), str(work), *command]


def start_logged(command: List[str], cwd: Path, env: Dict[str, str], log: Path) -> Any:
    typer.echo(f"$ (cd {cwd} && {' '.join(command)})  > {log}")
    with log.open("w", encoding="utf8") as file:
        return subprocess.Popen(command, cwd=str(cwd), env=env, stdout=file, stderr=file)


def wait_logged(process: Any, log: Path, start: float) -> float:
    returncode = process.wait()
    seconds = time.perf_counter() - start
    if returncode != 0:
        tail = log.read_text(encoding="utf8", errors="replace")[-3000:]
        raise SystemExit(f"exit {returncode} after {seconds:.0f} s: {process.args}\n{tail}")
    return seconds


def run_logged(command: List[str], cwd: Path, env: Dict[str, str], log: Path) -> float:
    return wait_logged(start_logged(command, cwd, env, log), log, time.perf_counter())


def written_files(checkout: Path) -> List[str]:
    """Files the run wrote: untracked (ignored ones included) or changed."""
    names = git("ls-files", "--others", "-z", cwd=checkout).split("\0")
    names += git("diff", "--name-only", "-z", cwd=checkout).split("\0")
    keep = {n for n in names if n and not SKIP_PARTS & set(Path(n).parts)}
    return sorted(n for n in keep if not n.endswith(".pyc"))


def all_files(folder: Path) -> List[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


# ---- explaining a difference -------------------------------------------------


def leaves(value: Any, path: str = "") -> Iterator[Tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")
    else:
        yield path, value


def is_volatile(path: str) -> bool:
    return any(VOLATILE.search(part) for part in re.split(r"[.\[\]]", path) if part)


def field_name(path: str) -> str:
    """A leaf's path with list indices dropped: a field, not one occurrence."""
    return re.sub(r"\[\d+\]", "[]", path)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def compare_records(old: List[Any], new: List[Any]) -> Dict[str, Any]:
    """Field-by-field differences of two lists of JSON-like records."""
    fields: Dict[str, int] = {}
    volatile: Dict[str, int] = {}
    max_number_diff = 0.0
    examples: List[Dict[str, Any]] = []
    other = 0
    for i, (a, b) in enumerate(zip(old, new)):
        la, lb = dict(leaves(a)), dict(leaves(b))
        for key in sorted(set(la) | set(lb)):
            x, y = la.get(key, "<missing>"), lb.get(key, "<missing>")
            same = x == y or (
                isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)
            )
            if same:
                continue
            name = field_name(key)
            if is_volatile(key):
                volatile[name] = volatile.get(name, 0) + 1
                continue
            fields[name] = fields.get(name, 0) + 1
            if is_number(x) and is_number(y):
                max_number_diff = max(max_number_diff, abs(float(x) - float(y)))
            else:
                other += 1
            if len(examples) < 5:
                examples.append({"record": i, "field": key, "old": x, "new": y})
    return {
        "records": [len(old), len(new)],
        "same_without_volatile": not fields and len(old) == len(new),
        "volatile_fields_differing": volatile,
        "fields_differing": dict(sorted(fields.items(), key=lambda kv: -kv[1])[:30]),
        "max_abs_number_difference": max_number_diff,
        "non_numeric_differences": other,
        "examples": examples,
    }


def read_records(path: Path) -> Optional[List[Any]]:
    """A file as a list of JSON-like records, or None for other formats."""
    try:
        if path.suffix == ".json":
            return [json.loads(path.read_text(encoding="utf8"))]
        if path.suffix == ".jsonl":
            lines = path.read_text(encoding="utf8").splitlines()
            return [json.loads(line) for line in lines if line.strip()]
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return list(pq.read_table(path).to_pylist())
    except (ValueError, OSError, ImportError):
        return None
    return None


def compare_text(a: Path, b: Path) -> Dict[str, Any]:
    la = a.read_text(encoding="utf8", errors="replace").splitlines()
    lb = b.read_text(encoding="utf8", errors="replace").splitlines()
    diff = [
        line
        for line in difflib.unified_diff(la, lb, "old", "new", n=0, lineterm="")
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    same_shape = len(la) == len(lb) and all(
        NUMBER.sub("#", x) == NUMBER.sub("#", y) for x, y in zip(la, lb)
    )
    max_diff = 0.0
    if same_shape:
        for x, y in zip(la, lb):
            for u, v in zip(NUMBER.findall(x), NUMBER.findall(y)):
                max_diff = max(max_diff, abs(float(u) - float(v)))
    return {
        "lines": [len(la), len(lb)],
        "changed_lines": len(diff),
        "only_numbers_differ": same_shape,
        "max_abs_number_difference": max_diff if same_shape else None,
        "diff_head": [line[:300] for line in diff[:12]],
    }


def explain(a: Path, b: Path) -> Dict[str, Any]:
    info: Dict[str, Any] = {"bytes": [a.stat().st_size, b.stat().st_size]}
    old, new = read_records(a), read_records(b)
    if old is not None and new is not None:
        info["format"] = a.suffix.lstrip(".")
        info.update(compare_records(old, new))
    elif b"\0" not in a.read_bytes()[:8192] + b.read_bytes()[:8192]:
        info["format"] = "text"
        info.update(compare_text(a, b))
    else:
        info["format"] = "binary"
        if a.stat().st_size == b.stat().st_size:
            xa, xb = a.read_bytes(), b.read_bytes()
            info["bytes_differing"] = sum(x != y for x, y in zip(xa, xb))
    return info


def lock_md5_differences(old: Path, new: Path) -> List[str]:
    """The paths whose md5 differ between two project.lock files."""
    import srsly

    def md5s(path: Path) -> Dict[str, Any]:
        found: Dict[str, Any] = {}
        for entry in (srsly.read_yaml(path) or {}).values():
            for item in entry.get("deps", []) + entry.get("outs", []):
                found[item["path"]] = item.get("md5")
        return found

    a, b = md5s(old), md5s(new)
    return sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))


def compare_trees(old: Path, new: Path, old_files: List[str], new_files: List[str]) -> Dict:
    identical: List[str] = []
    different: Dict[str, Any] = {}
    for name in sorted(set(old_files) & set(new_files)):
        a, b = old / name, new / name
        if a.read_bytes() == b.read_bytes():
            identical.append(name)
        else:
            different[name] = explain(a, b)
    expected = [
        n
        for n, d in different.items()
        if d.get("same_without_volatile") and d.get("records", [0, 1])[0] == d["records"][1]
    ]
    if "project.lock" in different:
        # weasel's lock holds the md5 of each command's deps and outputs: it
        # differs as soon as one of them does (a timing file, say)
        paths = lock_md5_differences(old / "project.lock", new / "project.lock")
        different["project.lock"]["md5_differs_for"] = paths
        if paths and set(paths) <= set(expected):
            expected.append("project.lock")
    return {
        "files_compared": len(set(old_files) & set(new_files)),
        "identical_count": len(identical),
        "different_count": len(different),
        "different_only_in_volatile_fields": expected,
        "only_old": sorted(set(old_files) - set(new_files)),
        "only_new": sorted(set(new_files) - set(old_files)),
        "identical": identical,
        "different": different,
    }


# ---- the runs ----------------------------------------------------------------


def run_workflows(
    sources: Dict[str, Tuple[str, str]],
    tmp: Path,
    python: Path,
    vars_: Dict[str, Any],
    parallel: bool,
    test_docs: int,
) -> Dict[str, Dict[str, Any]]:
    """Run `all` in a checkout of each source at tmp/<label>, each seeing its
    checkout at tmp/checkout: at once (each in its own mount namespace) or one
    after the other (the checkout moved to tmp/checkout for its run)."""
    work = tmp / "checkout"
    work.mkdir()
    command = [str(python), "-m", "spacy", "project", "run", "all", ".", "--force"]
    for name, value in vars_.items():
        command += [f"--vars.{name}", str(value)]
    runs: Dict[str, Dict[str, Any]] = {}
    for label, (source, kind) in sources.items():
        if kind == "folder":
            (tmp / label).mkdir()
        make_checkout(source, kind, tmp / label)
        if test_docs:
            cut_test_sets(tmp / label, test_docs)
        runs[label] = {"source": source, "commit": git("rev-parse", "HEAD", cwd=tmp / label)}
    env = code_env(work, python)
    # the package's file and the commit of the checkout holding it
    check = [
        str(python),
        "-c",
        "import pathlib, subprocess, spacy_bert_pipes as p; print(p.__file__); "
        "print(subprocess.run(['git', '-C', str(pathlib.Path(p.__file__).parent), "
        "'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip())",
    ]
    for label, (source, _kind) in sources.items():
        real = tmp / label
        if parallel:
            found = subprocess.run(
                at_work_path(check, real, work), env=env, capture_output=True, text=True
            )
        else:
            real.rename(work)
            found = subprocess.run(check, env=env, cwd="/", capture_output=True, text=True)
            work.rename(real)
            work.mkdir()
        code_file, _, commit = found.stdout.strip().partition("\n")
        if (
            found.returncode
            or not code_file.startswith(f"{work}/")
            or commit != runs[label]["commit"]
        ):
            raise SystemExit(f"{source}: spacy_bert_pipes imported from {code_file!r}: {found}")
        runs[label]["spacy_bert_pipes_file"] = f"{code_file} (commit {commit})"
    if parallel:
        start = time.perf_counter()
        procs = {
            label: start_logged(
                at_work_path(command, tmp / label, work), tmp, env, tmp / f"{label}.log"
            )
            for label in sources
        }
        for label, process in procs.items():
            seconds = wait_logged(process, tmp / f"{label}.log", start)
            runs[label]["workflow_seconds"] = round(seconds, 1)
    else:
        for label in sources:
            work.rmdir()
            (tmp / label).rename(work)
            try:
                seconds = run_logged(command, work, env, tmp / f"{label}.log")
            finally:
                work.rename(tmp / label)
                work.mkdir()
            runs[label]["workflow_seconds"] = round(seconds, 1)
    for label in sources:
        # project.yml: edited by cut_test_sets, not an output
        runs[label]["files"] = [f for f in written_files(tmp / label) if f != "project.yml"]
        runs[label]["files_written"] = len(runs[label]["files"])
    runs["parallel"] = {"value": parallel}
    return runs


def run_annotates(
    pipeline: Path, collection: Path, tmp: Path, python: Path, parallel: bool
) -> Dict[str, Dict[str, Any]]:
    """Annotate the collection with each checkout's package (tmp/old, tmp/new),
    writing JSONL, a Parquet file and a folder of Parquet shards into
    tmp/annotate-<label>, seen by both runs at tmp/annotate."""
    work = tmp / "annotate"
    work.mkdir()
    base = [str(python), "-m", "spacy_bert_pipes", "annotate", str(pipeline), str(collection)]
    opts = ["--questions-column", "questions", "--batch-size", "16", "--chunk-size", "40"]
    labels = ("old", "new")
    seconds = {label: 0.0 for label in labels}
    for label in labels:
        (tmp / f"annotate-{label}").mkdir()
    for out in ("collection.jsonl", "collection.parquet", "shards"):
        command = [*base, out, *opts]
        logs = {label: tmp / f"annotate-{label}-{out}.log" for label in labels}
        if parallel:
            start = time.perf_counter()
            procs = {
                label: start_logged(
                    at_work_path(command, tmp / f"annotate-{label}", work),
                    tmp,
                    code_env(tmp / label, python),
                    logs[label],
                )
                for label in labels
            }
            for label, process in procs.items():
                seconds[label] += wait_logged(process, logs[label], start)
            continue
        for label in labels:
            work.rmdir()
            (tmp / f"annotate-{label}").rename(work)
            try:
                env = code_env(tmp / label, python)
                seconds[label] += run_logged(command, work, env, logs[label])
            finally:
                work.rename(tmp / f"annotate-{label}")
                work.mkdir()
    return {
        label: {
            "spacy_bert_pipes_file": imported_from(tmp / label, python),
            "seconds": round(seconds[label], 1),
            "files": all_files(tmp / f"annotate-{label}"),
        }
        for label in labels
    }


@app.command()
def main(
    old: str = typer.Option(..., help="The reference: a git revision or a checkout folder"),
    new: str = typer.Option(..., help="The code under test: a git revision or a folder"),
    python: Path = typer.Option(
        ROOT / ".venv" / "bin" / "python", help="The virtualenv's python (shared by both)"
    ),
    shared_datasets: Path = typer.Option(
        ROOT.parent / "shared" / "datasets", help="vars.shared_datasets, made absolute"
    ),
    keep: bool = typer.Option(False, help="Keep the checkouts and outputs (else removed)"),
    skip_annotate: bool = typer.Option(False, help="Only the workflow runs"),
    test_docs: int = typer.Option(
        200,
        help="Cut the Banking77, NLU++ and CoNLL-2003 test sets to a sample of this many "
        "docs after their conversion, in both checkouts (project.yml edited); 0: whole",
    ),
    parallel: bool = typer.Option(
        True,
        help="Run both at once, each in its own mount namespace (unshare -m, needs root "
        "or user namespaces) that shows its checkout at the same path; --no-parallel: "
        "one after the other",
    ),
    output: Optional[Path] = typer.Option(
        None, help="Default: bench/results/same_outputs_<old>_<new>.json"
    ),
    compare_only: Optional[Path] = typer.Option(
        None,
        help="Run nothing: compare the folders old/, new/ (and annotate-old/, "
        "annotate-new/) kept (--keep, or after a failure) by an earlier run, finished or not",
    ),
) -> None:
    """Run workflow `all` and `annotate` with both revisions; compare their outputs."""
    old_label, old_kind = describe(old)
    new_label, new_kind = describe(new)
    python = Path(os.path.abspath(python))  # not resolved: the venv's python is a symlink
    vars_ = dict(SMALL_VARS, shared_datasets=str(shared_datasets.resolve()))
    if compare_only is not None:
        tmp, keep = compare_only.resolve(), True
    else:
        tmp = Path(tempfile.mkdtemp(prefix=".same_outputs_", dir=ROOT.parent))
    report: Dict[str, Any] = {
        "benchmark": "same_outputs",
        "command": "python bench/same_outputs.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "vars": vars_,
        "test_docs": test_docs,
        "env": {"PYTHONHASHSEED": "0", "PYTHONPATH": "<checkout>", "PATH": f"{python.parent}:..."},
        "tmp": str(tmp),
        "volatile_key_pattern": VOLATILE.pattern,
    }
    start = time.perf_counter()
    try:
        if compare_only is None:
            sources = {"old": (old, old_kind), "new": (new, new_kind)}
            runs = run_workflows(sources, tmp, python, vars_, parallel, test_docs)
            report["parallel"] = runs.pop("parallel")["value"]
            files = {key: run.pop("files") for key, run in runs.items()}
            report["runs"] = runs
        else:
            report["compare_only"] = "outputs of an earlier run, compared as found"
            files = {
                key: [f for f in written_files(tmp / key) if f != "project.yml"]
                for key in ("old", "new")
            }
            report["runs"] = {k: {"commit": git("rev-parse", "HEAD", cwd=tmp / k)} for k in files}
        report["workflow"] = compare_trees(tmp / "old", tmp / "new", files["old"], files["new"])
        if compare_only is not None:
            if (tmp / "annotate-old").is_dir() and (tmp / "annotate-new").is_dir():
                report["annotate"] = compare_trees(
                    tmp / "annotate-old",
                    tmp / "annotate-new",
                    all_files(tmp / "annotate-old"),
                    all_files(tmp / "annotate-new"),
                )
        elif not skip_annotate:
            pipeline = tmp / "old" / "training" / "assembled"
            collection = tmp / "old" / "corpus" / "collection.jsonl"
            ann = run_annotates(pipeline, collection, tmp, python, parallel)
            report["annotate"] = {
                "pipeline": "training/assembled of the old run",
                "collection": "corpus/collection.jsonl of the old run",
                "runs": {k: {x: v[x] for x in v if x != "files"} for k, v in ann.items()},
                **compare_trees(
                    tmp / "annotate-old",
                    tmp / "annotate-new",
                    ann["old"]["files"],
                    ann["new"]["files"],
                ),
            }
    except BaseException as error:
        report["error"] = f"{type(error).__name__}: {error}"
        raise
    finally:
        report["total_seconds"] = round(time.perf_counter() - start, 1)
        if not keep and "error" not in report:
            for label, kind in (("old", old_kind), ("new", new_kind)):
                if (tmp / label).exists():
                    remove_checkout(tmp / label, kind)
            shutil.rmtree(tmp, ignore_errors=True)
        if "error" in report:
            path = output or RESULTS / f"same_outputs_{old_label}_{new_label}.json"
            path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf8")
            typer.echo(f"failed; kept {tmp}; wrote {path}", err=True)
    parts = [report["workflow"]]
    if "annotate" in report:
        parts.append(report["annotate"])
    report["byte_identical"] = all(
        not p["different_count"] and not p["only_old"] and not p["only_new"] for p in parts
    )
    report["same_except_volatile_fields"] = all(
        set(p["different"]) == set(p["different_only_in_volatile_fields"])
        and not p["only_old"]
        and not p["only_new"]
        for p in parts
    )
    path = output or RESULTS / f"same_outputs_{old_label}_{new_label}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf8")
    summary = {
        k: report[k] for k in ("byte_identical", "same_except_volatile_fields", "total_seconds")
    }
    for key in ("workflow", "annotate"):
        if key in report:
            part = report[key]
            summary[key] = {
                k: part[k]
                for k in (
                    "files_compared",
                    "identical_count",
                    "different_count",
                    "only_old",
                    "only_new",
                )
            }
            summary[key]["different"] = {
                name: {
                    "format": d["format"],
                    "volatile_only": name in part["different_only_in_volatile_fields"],
                }
                for name, d in part["different"].items()
            }
    typer.echo(json.dumps(summary, indent=2))
    typer.echo(f"wrote {path}")


if __name__ == "__main__":
    app()
