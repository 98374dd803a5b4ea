"""The side-by-side text table ``run`` prints: one column per point, one row per figure.

Examples
--------
>>> rec = {"name": "full", "batch": 16, "max_batch": 16, "kv_len": 131328, "ttft_s": 12.5,
...        "tpot_s": 0.09, "decode_step_s": 0.088, "decode_tokens_per_s": 181.8,
...        "tokens_per_forward": 2.4, "decode_tokens_per_s_reported": 436.4,
...        "prefill_policy_overhead": 0.0, "memory": {"hbm": {"weights": 2**30, "free": 2**31}}}
>>> table = side_by_side([rec]).splitlines()
>>> table[0].split(), [line.split()[-1] for line in table if line.startswith(("max batch", "decode step"))]
(['full'], ['16', '88.00'])
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

GIB = 2**30


def _get(record: dict, path: str) -> Any:
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value or value[part] is None:
            return None
        value = value[part]
    return value


def _num(fmt: str, scale: float = 1.0) -> Callable[[Any], str]:
    return lambda v: format(v * scale, fmt)


#: (label, field path, formatter)
ROWS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("KV policy", "kv_policy", str),
    ("prompt (tokens)", "prefill_len", str),
    ("KV cache per sequence (tokens)", "kv_len", str),
    ("max batch", "max_batch", str),
    ("batch", "batch", str),
    ("prefill, one prompt (s)", "prefill_s", _num(".3f")),
    ("KV-policy prefill overhead (%)", "prefill_policy_overhead", _num(".2f", 100)),
    ("KV transfer per request (GB)", "kv_transfer_bytes", _num(".2f", 1e-9)),
    ("KV transfer per request (ms)", "kv_transfer_s", _num(".1f", 1e3)),
    ("TTFT mean (s)", "ttft_s", _num(".3f")),
    ("TTFT p99 (s)", "latency.ttft_s.p99", _num(".3f")),
    ("TPOT mean (ms)", "tpot_s", _num(".2f", 1e3)),
    ("TPOT p99 (ms)", "latency.tpot_s.p99", _num(".2f", 1e3)),
    ("decode step (ms)", "decode_step_s", _num(".2f", 1e3)),
    ("decode tokens/s (raw)", "decode_tokens_per_s", _num(".1f")),
    ("tokens per forward (MTP)", "tokens_per_forward", _num(".2f")),
    ("decode tokens/s (reported)", "decode_tokens_per_s_reported", _num(".1f")),
    ("requests served", "throughput.requests", str),
    ("served output tokens/s", "throughput.output_tokens_per_s", _num(".1f")),
    ("served requests/s", "throughput.requests_per_s", _num(".4f")),
    ("peak KV occupancy (%)", "kv_occupancy.peak_fraction", _num(".1f", 100)),
    ("HBM/socket weights (GiB)", "memory.hbm.weights", _num(".2f", 1 / GIB)),
    ("HBM/socket KV (GiB)", "memory.hbm.kv", _num(".2f", 1 / GIB)),
    ("HBM/socket activations (GiB)", "memory.hbm.activations", _num(".3f", 1 / GIB)),
    ("HBM/socket reserved (GiB)", "memory.hbm.reserved", _num(".2f", 1 / GIB)),
    ("HBM/socket free (GiB)", "memory.hbm.free", _num(".2f", 1 / GIB)),
    ("DDR/socket used (GiB)", "memory.ddr", lambda tier: format(
        sum(v for k, v in tier.items() if k not in ("free", "capacity", "reserved")) / GIB, ".2f")),
    ("DDR/socket reserved (GiB)", "memory.ddr.reserved", _num(".2f", 1 / GIB)),
    ("DDR/socket free (GiB)", "memory.ddr.free", _num(".1f", 1 / GIB)),
)


def side_by_side(records: Sequence[dict[str, Any]]) -> str:
    """A fixed-width table with the records as columns; rows with no value anywhere are left out."""
    label_width = max(len(label) for label, _, _ in ROWS) + 2
    cells = [[(fmt(v) if (v := _get(r, path)) is not None else "-") for r in records]
             for _, path, fmt in ROWS]
    width = max([len(r["name"]) for r in records] + [len(c) for row in cells for c in row]) + 2
    lines = [" " * label_width + "".join(r["name"].rjust(width) for r in records)]
    for (label, _, _), row in zip(ROWS, cells, strict=True):
        if all(c == "-" for c in row):
            continue
        lines.append(label.ljust(label_width) + "".join(c.rjust(width) for c in row))
    return "\n".join(lines)
