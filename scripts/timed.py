"""Run a command and record its wall-clock time as JSON.

python scripts/timed.py OUTPUT.json -- COMMAND [ARGS...]
"""

import json
import platform
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        raise SystemExit(__doc__)
    output, command = Path(sys.argv[1]), sys.argv[3:]
    if command[0] in ("python", "python3"):
        # The same interpreter (and virtual environment) as this script.
        command[0] = sys.executable
    start = time.perf_counter()
    result = subprocess.run(command)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(result.returncode)
    output.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "command": " ".join(command),
        "seconds": round(seconds, 1),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "python": platform.python_version(),
    }
    output.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    print(f"{' '.join(command[:4])}... took {seconds / 60:.1f} minutes")


if __name__ == "__main__":
    main()
