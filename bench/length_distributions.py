"""Rebuild an entry of `specs/data/length_distributions.json` from a request trace.

The named datasets a serving workload can give (`workload.dataset`) are kept as the
quantiles of the prompt and output lengths at every 0.1 % from the minimum to the
maximum, by nearest rank (quantile q of n sorted lengths is the ceil(q * n)-th,
the smallest at q = 0), with the trace's means. This script computes them from a CSV of
per-request lengths (Vidur / Sarathi-Serve's processed traces have the columns
`num_prefill_tokens` and `num_decode_tokens`) and prints the JSON entry:

    python bench/length_distributions.py trace.csv --label "..." --source "..."
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path
from typing import Any

STEPS = 1000
"""Quantiles every 1/STEPS, both ends included: 1,001 of them."""


def quantiles(lengths: list[int], steps: int = STEPS) -> list[int]:
    """Nearest-rank quantiles of `lengths` at 0, 1/steps, …, 1."""
    ordered = sorted(lengths)
    n = len(ordered)
    return [ordered[max(0, math.ceil(i * n / steps) - 1)] for i in range(steps + 1)]


def entry(rows: list[dict[str, str]], prompt_column: str, output_column: str) -> dict[str, Any]:
    """The dataset entry: request count, and each side's mean and quantiles."""
    out: dict[str, Any] = {"requests": len(rows)}
    for side, column in (("prompt", prompt_column), ("output", output_column)):
        lengths = [int(float(row[column])) for row in rows]
        out[side] = {
            "mean": round(sum(lengths) / len(lengths), 1),
            "percentiles": quantiles(lengths),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="CSV with one request per row")
    parser.add_argument("--label", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--prompt-column", default="num_prefill_tokens")
    parser.add_argument("--output-column", default="num_decode_tokens")
    args = parser.parse_args(argv)
    with args.trace.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        parser.error(f"{args.trace} has no rows")
    result = {"label": args.label, "source": args.source}
    result.update(entry(rows, args.prompt_column, args.output_column))
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
