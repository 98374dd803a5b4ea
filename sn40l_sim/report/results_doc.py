"""``docs/results.md``: every results field with its unit and description, rendered from the
declaration in :mod:`sn40l_sim.report.fields` (regenerate with ``python scripts/make_results_doc.py``;
a test fails while the committed page differs from :func:`render`).

Examples
--------
>>> from sn40l_sim.report.registry import Field, Fields
>>> from sn40l_sim.report.table_rows import Row
>>> page = render(Fields([Field("decode_step_s", "s", "One decode step.", csv=1, golden=True,
...                             table=Row(10, "decode step (ms)", ".2f", 1e3))]))
>>> [line for line in page.splitlines() if line.startswith("| `")]
['| `decode_step_s` | s | One decode step. | decode step (ms) | 1 | yes |']
"""
from __future__ import annotations

from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.registry import Field, Fields

HEADER = """\
# Results fields

<!-- Generated from sn40l_sim/report/fields.py by `python scripts/make_results_doc.py`; do not edit. -->

`python -m sn40l_sim run` (and `sweep`) writes one record per simulated point to `OUT/results.json`
and `OUT/results.csv`. This page lists every field of a record, as declared once in
`sn40l_sim/report/fields.py`; the CSV column order, the table `run` prints, plot axis labels and the
regression goldens read the same declaration.

- **Field**: the key; a part of a record by its dotted path. `<kernel>`, `<tier>`, ... stand for
  keys that come from the run (kernel kinds, memory tiers in the hardware's order, ...); `[]` marks
  a list, which stays in `results.json` and is left out of `results.csv`.
- **Unit**: of the value as written: seconds, bytes, cycles of the socket clock, tokens; `1` for a
  fraction or a plain number, `text` for a name. Plots show bytes in GiB and bytes/s in GB/s.
- **Printed as**: the row of the table `run` prints (its own unit in the label); a non-zero value the
  row's format would round to zero is printed in two significant figures (`1e-06`), never as zero,
  the per-tier memory rows' GiB included (64 KiB of activations: `6.1e-05`).
- **CSV**: position among the leading columns of `results.csv`; all other columns follow in name
  order. A mapping's columns are `field.key` (`memory.hbm.kv`).
- **Golden**: kept in `tests/golden/` (`python -m sn40l_sim golden`); a mapping is kept whole.
- **Opt-in**: fields of a group that a record carries only when its experiment asks for the group
  with `report: {extra_fields: [<group>]}` (`kv_policies`) or has what brings it: `slo` an `slo:`
  section, `trace` a trace workload, `rate_search` a `rate_search:` section, `multi_model` a
  `multi_model:` section, `prefix_cache` `serving.prefix_cache: true`, `chunked_prefill`
  `serving.prefill_chunk`, `prefill_hardware` a `prefill_hardware:` node; so other experiments'
  results stay as they were. `speed` comes with every simulated point and stays in `status.json`.

The fields marked **(§5)** are the results contract of [design.md](design.md) §5: never renamed or dropped.
Empty values (`null` in JSON, an empty CSV cell) mean the point has no such figure, e.g. latencies
of a point simulated without a workload.

To add a field: declare it in `sn40l_sim/report/fields.py`, produce it in
`sn40l_sim/report/records.py` (`build_record`), and regenerate this page with
`python scripts/make_results_doc.py`. Tests fail while any of the three is missing.

| Field | Unit | Description | Printed as | CSV | Golden |
|---|---|---|---|---|---|
"""


def _line(path: str, field: Field) -> str:
    unit = field.unit or ("" if field.parts else "text")
    description = field.description + (" **(§5)**" if field.design else "") \
        + (f" (opt-in: `{field.group}`)" if field.group else "")
    cells = [f"`{path}`", unit, description, field.table.describe() if field.table is not None else "",
             str(field.csv) if field.csv is not None else "", "yes" if field.golden else ""]
    return "| " + " | ".join(cells) + " |"


def render(fields: Fields = RESULTS) -> str:
    """The text of ``docs/results.md``."""
    return HEADER + "".join(_line(path, field) + "\n" for path, field in fields.walk())
