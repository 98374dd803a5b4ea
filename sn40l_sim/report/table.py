"""The side-by-side text table ``run`` prints: one column per point, one row per figure.

The rows, their order, labels and formats are the table rows of the results declaration
(:data:`sn40l_sim.report.fields.RESULTS`); memory rows are generated from the tiers the records hold.

Examples
--------
>>> rec = {"name": "full", "batch": 16, "max_batch": 16, "kv_len": 131328, "ttft_s": 12.5,
...        "tpot_s": 0.09, "decode_step_s": 0.088, "decode_tokens_per_s": 181.8,
...        "tokens_per_forward": 2.44, "decode_tokens_per_s_reported": 436.4,
...        "prefill_policy_overhead": 0.0, "memory": {"hbm": {"weights": 2**30, "free": 2**31}}}
>>> table = side_by_side([rec]).splitlines()
>>> table[0].split(), [line.split()[-1] for line in table if line.startswith(("max batch", "decode step"))]
(['full'], ['16', '88.00'])
>>> [" ".join(line.split()) for line in table if line.startswith("HBM")]
['HBM/socket weights (GiB) 1.00', 'HBM/socket free (GiB) 2.00']
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.registry import Fields


def side_by_side(records: Sequence[dict[str, Any]], fields: Fields = RESULTS) -> str:
    """A fixed-width table with the records as columns; rows with no value anywhere are left out."""
    lines = [line for path, row in fields.table_rows() for line in row.lines(path, records)]
    # rows with no value anywhere are left out, and do not widen the label column either
    lines = [(label, row) for label, row in lines if any(cell is not None for cell in row)] or lines[:1]
    label_width = max(len(label) for label, _ in lines) + 2
    cells = [[cell if cell is not None else "-" for cell in row] for _, row in lines]
    width = max([len(r["name"]) for r in records] + [len(c) for row in cells for c in row]) + 2
    out = [" " * label_width + "".join(r["name"].rjust(width) for r in records)]
    for (label, _), row in zip(lines, cells, strict=True):
        if all(c == "-" for c in row):
            continue
        out.append(label.ljust(label_width) + "".join(c.rjust(width) for c in row))
    return "\n".join(out)
