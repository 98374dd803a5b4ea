"""``results.json`` and ``results.csv``: one record per simulated point, byte-for-byte reproducible.

JSON: a list of records, keys sorted, floats rounded to 9 significant digits (so that the last
bits of a float sum never show), no timestamps or paths of the machine. CSV: one row per record,
nested fields flattened to dotted column names (``memory.hbm.kv``), lists left out (they stay in
the JSON); the fields declared with a CSV position (the docs/design.md §5 fields, see
:mod:`sn40l_sim.report.fields`) come first, the rest in sorted order.

Examples
--------
>>> rounded({"a": 0.1 + 0.2, "b": [1, 2.000000000001], "c": None})
{'a': 0.3, 'b': [1, 2.0], 'c': None}
>>> flatten({"name": "x", "memory": {"hbm": {"kv": 5}}, "series": [1, 2]})
{'name': 'x', 'memory.hbm.kv': 5}
"""
from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.outputs import write_text
from sn40l_sim.report.registry import Fields

SIGNIFICANT_DIGITS = 9


def rounded(value: Any) -> Any:
    """``value`` with every float rounded to :data:`SIGNIFICANT_DIGITS` significant digits."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if isinstance(value, dict):
        return {str(k): rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    return value


#: groups of a record that depend on the wall clock (how fast the simulator ran), left out of the
#: results files so that the same inputs give the same bytes; ``run`` prints them and keeps them in
#: ``status.json``
VOLATILE = ("speed",)


def stable(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` without its :data:`VOLATILE` groups.

    >>> stable({"name": "full", "speed": {"wall_s": 1.5}})
    {'name': 'full'}
    """
    return {k: v for k, v in record.items() if k not in VOLATILE}


def to_json(records: Sequence[dict[str, Any]]) -> str:
    """The text of ``results.json`` (without the :data:`VOLATILE` groups)."""
    return json.dumps(rounded([stable(r) for r in records]), sort_keys=True, indent=2) + "\n"


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalars of a nested record under dotted keys (lists dropped): the columns of ``results.csv``.

    Examples
    --------
    >>> flatten({"name": "full", "memory": {"hbm": {"weights": 2**30}}, "probes": [1, 2]})
    {'name': 'full', 'memory.hbm.weights': 1073741824}
    """
    out: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        elif not isinstance(value, (list, tuple)):
            out[name] = value
    return out


def to_csv(records: Sequence[dict[str, Any]], fields: Fields = RESULTS) -> str:
    """The text of ``results.csv``, columns in the declaration's CSV order (without the
    :data:`VOLATILE` groups), floats rounded to :data:`SIGNIFICANT_DIGITS` digits.

    Examples
    --------
    >>> rec = {"name": "full", "batch": 16, "decode_step_s": 0.0881234567891,
    ...        "memory": {"hbm": {"weights": 2**30}}, "speed": {"wall_s": 1.5}}
    >>> print(to_csv([rec]), end="")
    name,batch,decode_step_s,memory.hbm.weights
    full,16,0.0881234568,1073741824
    """
    rows = [flatten(rounded(stable(r))) for r in records]
    header = fields.csv_order({key for row in rows for key in row})
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n", extrasaction="raise")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: ("" if row.get(c) is None else row.get(c)) for c in header})
    return buffer.getvalue()


def write_results(records: Sequence[dict[str, Any]], out_dir: Path) -> tuple[Path, Path]:
    """Write ``results.json`` and ``results.csv`` into ``out_dir`` (created if missing), each whole or not
    at all (:func:`~sn40l_sim.report.outputs.write_text`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out_dir / "results.json", out_dir / "results.csv"
    write_text(json_path, to_json(records))
    write_text(csv_path, to_csv(records))
    return json_path, csv_path
