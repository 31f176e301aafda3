"""The timing file of a finished run, `<OUTPUT stem>_time.json` beside OUTPUT:
the run's wall time and the docs it annotated, in the shape of the workflow's
timings (`scripts/timed.py`), so that `bert-pipes report` shows a collection's
wall time and docs/s:

    {"command": "bert-pipes annotate PIPELINE INPUT OUTPUT",
     "seconds": wall seconds from `prepare_run` to OUTPUT written,
     "docs": rows this run annotated (written to OUTPUT),
     "error_rows": rows this run could not annotate,
     "chunks": chunks this run annotated,
     "resumed_chunks", "resumed_rows": chunks (and their input rows) committed
         by an earlier, unfinished run: neither timed nor counted in "docs",
     "covers": what "seconds" and "docs" cover, in words,
     "settings": the options that set the speed (workers, batch_size,
         chunk_size, n_process, gpu_id, precision, reproducible, vectors),
     "machine", "processor", "python": where it ran}
"""

import json
import platform
from typing import Any, Dict

from ..io import durable
from .types import AnnotateRun

# The options that set a run's speed, recorded beside its wall time.
TIMED_SETTINGS = (
    "workers",
    "batch_size",
    "chunk_size",
    "n_process",
    "gpu_id",
    "precision",
    "reproducible",
    "vectors",
)


def timing_record(
    run: AnnotateRun,
    seconds: float,
    *,
    chunks: int,
    docs: int,
    error_rows: int,
    resumed_rows: int,
) -> Dict[str, Any]:
    """The timing of a finished run (see the module's docstring).

    run (AnnotateRun): The run.
    seconds (float): Its wall time.
    chunks (int): The chunks of the input.
    docs (int): The output rows this run wrote (not those of resumed chunks).
    error_rows (int): The error rows of this run's chunks.
    resumed_rows (int): The input rows of the chunks an earlier run committed.
    RETURNS (Dict[str, Any]): The record, as JSON data.
    """
    pipeline = run.manifest["pipeline"]
    name = pipeline.get("path") or pipeline.get("package")
    resumed = len(run.done)
    rows = f"{docs + error_rows} rows ({docs} annotated, {error_rows} error rows)"
    if resumed:
        covers = (
            f"this run's {chunks - resumed} of {chunks} chunks, {rows}; the other "
            f"{resumed} chunks ({resumed_rows} rows) were annotated by an earlier, "
            "unfinished run and are not timed"
        )
    else:
        covers = f"the whole run: {chunks} chunks, {rows}"
    return {
        "command": f"bert-pipes annotate {name} {run.input_path} {run.output_path}",
        "seconds": round(seconds, 3),
        "docs": docs,
        "error_rows": error_rows,
        "chunks": chunks - resumed,
        "resumed_chunks": resumed,
        "resumed_rows": resumed_rows,
        "covers": covers,
        "settings": {name: getattr(run.options, name) for name in TIMED_SETTINGS},
        "machine": platform.machine(),
        "processor": platform.processor(),
        "python": platform.python_version(),
    }


def write_timing(run: AnnotateRun, record: Dict[str, Any]) -> None:
    """Write the record to `run.timing_path`, atomically."""
    durable.write_text(run.timing_path, json.dumps(record, indent=2) + "\n")
