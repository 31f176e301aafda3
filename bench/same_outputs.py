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

Runtime on 2 shared CPU cores (niced): about 12 minutes per workflow run (the
test sets are evaluated whole: Banking77 3,080 queries, CoNLL-2003 3,453
sentences), one to two for both annotate runs, so ~25-30 minutes in all. Run it
niced and in the background:
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
    "textcat_steps": 10,
    "textcat_warmup": 2,
    "textcat_dev_size": 50,
    "multilabel_steps": 10,
    "multilabel_warmup": 2,
    "multilabel_dev_size": 50,
    "ner_steps": 10,
    "ner_warmup": 2,
    "ner_eval_frequency": 5,
    "ner_dev_docs": 50,
    "qa_slots_steps": 10,
    "qa_slots_warmup": 2,
    "qa_slots_eval_frequency": 5,
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


def run_logged(command: List[str], cwd: Path, env: Dict[str, str], log: Path) -> float:
    typer.echo(f"$ (cd {cwd} && {' '.join(command)})  > {log}")
    start = time.perf_counter()
    with log.open("w", encoding="utf8") as file:
        result = subprocess.run(command, cwd=str(cwd), env=env, stdout=file, stderr=file)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        tail = log.read_text(encoding="utf8", errors="replace")[-3000:]
        raise SystemExit(f"exit {result.returncode} after {seconds:.0f} s: {command}\n{tail}")
    return seconds


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


def run_workflow(
    source: str, kind: str, tmp: Path, label: str, python: Path, vars_: Dict[str, Any]
) -> Dict[str, Any]:
    """Run `all` in a checkout of source at tmp/checkout, then move it to tmp/label."""
    work = tmp / "checkout"
    if kind == "folder":
        work.mkdir()
    make_checkout(source, kind, work)
    code_file = imported_from(work, python)
    command = [str(python), "-m", "spacy", "project", "run", "all", ".", "--force"]
    for name, value in vars_.items():
        command += [f"--vars.{name}", str(value)]
    seconds = run_logged(command, work, code_env(work, python), tmp / f"{label}.workflow.log")
    files = written_files(work)
    if kind == "revision":
        git("worktree", "move", str(work), str(tmp / label))
    else:
        work.rename(tmp / label)
    return {
        "source": source,
        "commit": git("rev-parse", "HEAD", cwd=tmp / label),
        "spacy_bert_pipes_file": code_file.replace(str(work), str(tmp / label)),
        "workflow_seconds": round(seconds, 1),
        "files_written": len(files),
        "files": files,
    }


def run_annotate(
    code: Path, pipeline: Path, collection: Path, tmp: Path, label: str, python: Path
) -> Dict[str, Any]:
    """Annotate the collection with code's package, in tmp/annotate (the same
    folder for both checkouts), then move the outputs to tmp/annotate-<label>."""
    work = tmp / "annotate"
    work.mkdir()
    env = code_env(code, python)
    base = [str(python), "-m", "spacy_bert_pipes", "annotate", str(pipeline), str(collection)]
    opts = ["--questions-column", "questions", "--batch-size", "16", "--chunk-size", "40"]
    seconds = 0.0
    for out in ("out/collection.jsonl", "out/collection.parquet", "out/shards"):
        log = tmp / f"annotate-{label}-{Path(out).name}.log"
        seconds += run_logged([*base, out, *opts], work, env, log)
    (tmp / f"annotate-{label}").mkdir()
    shutil.move(str(work / "out"), str(tmp / f"annotate-{label}" / "out"))
    shutil.rmtree(work)
    return {
        "spacy_bert_pipes_file": imported_from(code, python),
        "seconds": round(seconds, 1),
        "files": all_files(tmp / f"annotate-{label}"),
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
    output: Optional[Path] = typer.Option(
        None, help="Default: bench/results/same_outputs_<old>_<new>.json"
    ),
) -> None:
    """Run workflow `all` and `annotate` with both revisions; compare their outputs."""
    old_label, old_kind = describe(old)
    new_label, new_kind = describe(new)
    python = Path(os.path.abspath(python))  # not resolved: the venv's python is a symlink
    vars_ = dict(SMALL_VARS, shared_datasets=str(shared_datasets.resolve()))
    tmp = Path(tempfile.mkdtemp(prefix=".same_outputs_", dir=ROOT.parent))
    report: Dict[str, Any] = {
        "benchmark": "same_outputs",
        "command": "python bench/same_outputs.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "vars": vars_,
        "env": {"PYTHONHASHSEED": "0", "PYTHONPATH": "<checkout>", "PATH": f"{python.parent}:..."},
        "tmp": str(tmp),
        "volatile_key_pattern": VOLATILE.pattern,
    }
    start = time.perf_counter()
    try:
        runs = {
            "old": run_workflow(old, old_kind, tmp, "old", python, vars_),
            "new": run_workflow(new, new_kind, tmp, "new", python, vars_),
        }
        files = {key: run.pop("files") for key, run in runs.items()}
        report["runs"] = runs
        report["workflow"] = compare_trees(tmp / "old", tmp / "new", files["old"], files["new"])
        if not skip_annotate:
            pipeline = tmp / "old" / "training" / "assembled"
            collection = tmp / "old" / "corpus" / "collection.jsonl"
            ann = {
                key: run_annotate(tmp / key, pipeline, collection, tmp, key, python)
                for key in ("old", "new")
            }
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
            for label, kind in (("checkout", old_kind), ("old", old_kind), ("new", new_kind)):
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
