"""Write the one-pass pipeline's scores and speed beside the heads trained apart.

python scripts/one_pass_table.py METRICS_DIR OUTPUT.md [SPEED.json]
(`spacy_bert_pipes.multitask.compare` reads the files and builds the table.)
"""

import sys
from pathlib import Path

from spacy_bert_pipes.multitask.compare import CompareError, side_by_side


def main() -> None:
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    speed = Path(sys.argv[3]) if len(sys.argv) == 4 else None
    try:
        table = side_by_side(Path(sys.argv[1]), speed)
    except CompareError as err:
        raise SystemExit(f"one_pass_table: {err}") from None
    output = Path(sys.argv[2])
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(table, encoding="utf8")
    print(table, end="")


if __name__ == "__main__":
    main()
