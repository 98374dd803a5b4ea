"""Two runs' results side by side, point by point, with the ratio of every figure (``python -m
sn40l_sim compare``): what a changed machine, model or setting did to the numbers ``run`` prints.

Points are paired by name (the policy entry's, with the sweep point's in a sweep). Each pair is
one table with the rows of ``run``'s (:data:`~sn40l_sim.report.fields.RESULTS`), the base's value,
the other's and their ratio (other over base) computed from the unrounded values; a row the two
leave equal shows a ratio of 1 (and only such a row: a ratio that rounds to 1 is given the digits
that tell it apart), a row either lacks a dash.

Examples
--------
>>> base = {"name": "full", "hardware": "SN40L-16", "decode_step_s": 0.08608, "batch": 16}
>>> other = {"name": "full", "hardware": "SN40L-16 (sockets 8)", "decode_step_s": 0.1549, "batch": 16}
>>> lines = point_table(base, other).splitlines()
>>> lines[0]
'full: hardware SN40L-16 -> SN40L-16 (sockets 8)'
>>> [" ".join(line.split()) for line in lines if line.startswith(("batch", "decode step"))]
['batch 16 16 1', 'decode step (ms) 86.08 154.90 1.799']
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sn40l_sim.errors import InputError
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.registry import Fields

#: the fields whose change a pair's heading says: a policy's parameters (a SnapStream budget), the
#: bytes a token's cache takes (a model override such as ``kv_dtype``), the requests served (a
#: trace's ``rate_scale``, another ``serving.seed``), the parallel plans (a prefill on 4 of 8 sockets),
#: the number of prefill and decode nodes, the KV link, the graphs' generated length, the
#: speculation (``serving.speculative``: two drafts against three, or another acceptance, whose value
#: no table row shows) and the simulation's options (``graph_options.expert_loading``) change the
#: point as much as its model or policy does
DESCRIBED = ("model", "hardware", "prefill_hardware", "parallel", "kv_policy", "kv_policy_params",
             "kv_bytes_per_token", "mode", "prefill_nodes", "decode_nodes", "kv_transfer", "max_new_tokens",
             "workload", "seed", "speculative_drafts", "draft_acceptance", "options", "rate_search")
#: fields results written before them lack: such a record compares by the others (``rate_search``, a
#: rate search's settings, every record of an experiment without one lacks too)
KEPT_LATER = ("kv_transfer", "seed", "options", "rate_search")
#: the point's shape, named after the inputs when it differs: the prompt (``shape.prompt_len``) and the
#: decode batch (an explicit ``serving.batch``, or the largest that fits when another input moved it);
#: two runs differing in either were headed "the same model, hardware and policy" above every figure
#: they moved. A record lacking one (a hand-made one) compares by the rest
SHAPE = ("prefill_len", "batch")
#: what the compiled graphs make of that shape, named when the shape itself is the same: another
#: ``serving.prefill_lens`` runs the same prompt at another compiled length (a 30,000-token prompt
#: padded to 32,768 or not), another ``serving.batch_sizes`` moves the largest batch that fits beside
#: an explicit ``serving.batch``; both were headed "the same model, hardware and policy" above a
#: prefill 8% shorter or another max batch
COMPILED = (("prefill_len", "prefill_len_compiled"), ("batch", "max_batch"))
#: the objectives an ``slo`` record states (the rest of it is what the run served against them)
SLO_STATED = (("ttft", "ttft_max_s", "ttft_percentile"), ("tpot", "tpot_max_s", "tpot_percentile"))


#: the names whose record also holds a digest of what they describe (``<name>_digest``): an edited copy
#: of a hardware or model file keeps its name, and the heading must not call the two the same
DIGESTED = ("hardware", "prefill_hardware", "model")

#: a point's heading when its model, hardware and policy are the same in both runs
SAME_INPUTS = "the same model, hardware and policy"
#: what ``changed_only`` shows of a point none of whose figures differ
NO_FIGURE_DIFFERS = "(no figure differs)"


def unchanged(table: str) -> bool:
    """Whether a ``changed_only`` table says nothing but that the point is the same in both runs."""
    heading, _, rest = table.partition("\n")
    return rest == NO_FIGURE_DIFFERS and heading.endswith(": " + SAME_INPUTS)


def point_table(base: Mapping[str, Any], other: Mapping[str, Any], fields: Fields = RESULTS,
                changed_only: bool = False) -> str:
    """One point's table: a heading naming what differs among :data:`DESCRIBED`, then one line per
    row of ``run``'s table that either record holds: base, other, other/base (``changed_only``:
    only the rows whose shown values differ)."""
    changes = [_change(name, base.get(name), other.get(name)) for name in (*DESCRIBED, *SHAPE)
               if base.get(name) != other.get(name)
               and not (name in (*KEPT_LATER, *SHAPE) and (name not in base or name not in other))]
    changes += [_change(name, base[name], other[name]) for shape, name in COMPILED
                if base.get(shape) == other.get(shape) and name in base and name in other and base[name] != other[name]]
    changes += [_described_otherwise(name, base, other) for name in DIGESTED if _same_name_other_digest(name, base, other)]
    if _slo_stated(base) != _slo_stated(other):
        # another bound moves the attainment and goodput rows alone: the heading said "the same model,
        # hardware and policy" above an attainment of 0% against 100%
        changes.append(f"slo {_slo_stated(base)} -> {_slo_stated(other)}")
    changes += _multi_model_changes(base, other)
    changes += _serving_option_changes(base, other)
    heading = f"{base['name']}: " + ("; ".join(changes) if changes else SAME_INPUTS)
    lines: list[tuple[str, str, str, str]] = []
    for path, row in fields.table_rows():
        pair = [base, other]
        for (label, (a, b)), (_, (x, y)) in zip(row.lines(path, pair), row.values(path, pair), strict=True):
            # changed: the unrounded values differ (two memory rows shown as 0.002 GiB may not)
            same = x == y if _number(x) and _number(y) else a == b
            if a is None and b is None or changed_only and same:
                continue
            lines.append((label, a or "-", b or "-", _ratio(x, y)))
    if not lines:
        return heading + "\n" + NO_FIGURE_DIFFERS if changed_only else heading
    width = max(len(label) for label, *_ in lines) + 2
    cells = max(len(c) for _, a, b, r in lines for c in (a, b, r, "other/base")) + 2
    out = [heading, " " * width + "base".rjust(cells) + "other".rjust(cells) + "other/base".rjust(cells)]
    out += [label.ljust(width) + a.rjust(cells) + b.rjust(cells) + r.rjust(cells) for label, a, b, r in lines]
    return "\n".join(out)


def _change(name: str, a: Any, b: Any) -> str:
    """A heading's ``name a -> b``; of two mappings of mappings (the parallel plans by phase), only the
    entries that differ, each as ``key(k=v, ...)``.

    >>> _change("parallel", {"decode": {"tp": 16}, "prefill": {"tp": 8}}, {"decode": {"tp": 16}, "prefill": {"tp": 4}})
    'parallel prefill(tp=8) -> prefill(tp=4)'
    """
    if isinstance(a, Mapping) and isinstance(b, Mapping) and \
            all(isinstance(v, Mapping) for v in (*a.values(), *b.values())):
        keys = [k for k in dict.fromkeys((*a, *b)) if a.get(k) != b.get(k)]
        def side(m: Mapping[str, Any]) -> str:
            return ", ".join(f"{k}({_described(m[k])})" if k in m else f"{k}(none)" for k in keys)
        return f"{name} {side(a)} -> {side(b)}"
    return f"{name} {_described(a)} -> {_described(b)}"


def _same_name_other_digest(name: str, base: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Whether ``name`` is the same in both records but its digest differs (both records holding
    one: results written before digests were kept compare by name alone)."""
    a, b = base.get(f"{name}_digest"), other.get(f"{name}_digest")
    return base.get(name) == other.get(name) and a is not None and b is not None and a != b


def _described_otherwise(name: str, base: Mapping[str, Any], other: Mapping[str, Any]) -> str:
    """A heading's ``name N described otherwise (digest a -> b)``: one name for two descriptions.

    >>> _described_otherwise("hardware", {"hardware": "SN40L-16", "hardware_digest": "3f2a"},
    ...                      {"hardware": "SN40L-16", "hardware_digest": "9b1c"})
    'hardware SN40L-16 described otherwise (digest 3f2a -> 9b1c)'
    """
    return (f"{name} {_described(base.get(name))} described otherwise "
            f"(digest {base[f'{name}_digest']} -> {other[f'{name}_digest']})")


def _slo_stated(record: Mapping[str, Any]) -> str:
    """The SLOs a record was served against, as a heading shows them (``none`` without an ``slo``).

    >>> _slo_stated({"slo": {"ttft_max_s": 2.0, "ttft_percentile": 90.0, "tpot_max_s": None, "tpot_percentile": None}})
    'ttft p90 <= 2 s'
    >>> _slo_stated({"slo": {"ttft_max_s": 2.0, "ttft_percentile": 90.0, "tpot_max_s": 0.05, "tpot_percentile": 99.0}})
    'ttft p90 <= 2 s, tpot p99 <= 0.05 s'
    >>> _slo_stated({}), _slo_stated({"slo": None})
    ('none', 'none')
    """
    slo = record.get("slo")
    if not isinstance(slo, Mapping):
        return "none"
    # each part of an slo may be null (report/record_shape.py): a bound without its percentile is shown
    # without one, not formatted with :g (a TypeError traceback)
    parts = [f"{what}{_percentile(slo.get(percentile))} <= {slo[bound]:g} s" for what, bound, percentile in SLO_STATED
             if slo.get(bound) is not None]
    return ", ".join(parts) or "none"


def _percentile(value: Any) -> str:
    """`` p90`` of a percentile, empty for none.

    >>> _percentile(90.0), _percentile(None)
    (' p90', '')
    """
    return f" p{value:g}" if value is not None else ""


def _multi_model_changes(base: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    """A heading's ``multi_model ...`` when the sections of two runs of several models on a node differ:
    the models sharing it, the quantum or the weights' tier moved a model's figures under "the same
    model, hardware and policy" (records written before they were kept compare by the rest).

    >>> _multi_model_changes({"multi_model": {"quantum_s": 2.0}}, {"multi_model": {"quantum_s": 0.5}})
    ['multi_model quantum 2 s -> quantum 0.5 s']
    """
    a, b = base.get("multi_model"), other.get("multi_model")
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return []
    # each may be null (report/record_shape.py): "none", not a :g TypeError or Python's None
    shown = {"models": _described, "quantum_s": lambda v: f"quantum {'none' if v is None else f'{v:g} s'}",
             "slow_tier": lambda v: f"weights in {_described(v)}"}
    parts = [f"{show(a[key])} -> {show(b[key])}" for key, show in shown.items()
             if key in a and key in b and a[key] != b[key]]
    return [f"multi_model {', '.join(parts)}"] if parts else []


def _serving_option_changes(base: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    """A heading's ``prefill_chunk a -> b`` and ``prefix_cache on -> off``: serving options whose results
    group a record holds exactly when the experiment set them (``serving.prefill_chunk``,
    ``serving.prefix_cache: true``). A co-located run chunking its prompts was headed "the same model,
    hardware and policy" above a TTFT four times as long. A chunk not recorded (no request served)
    compares by the rest.

    >>> _serving_option_changes({}, {"chunked_prefill": {"chunk_tokens": 4096}, "prefix_cache": None})
    ['prefill_chunk none -> 4096', 'prefix_cache off -> on']
    """
    groups = [record.get("chunked_prefill", {}) for record in (base, other)]
    a, b = (group.get("chunk_tokens", "none") if isinstance(group, Mapping) else None for group in groups)
    changes = [f"prefill_chunk {a} -> {b}"] if None not in (a, b) and a != b else []
    cached = ["on" if "prefix_cache" in record else "off" for record in (base, other)]
    return changes + ([f"prefix_cache {cached[0]} -> {cached[1]}"] if cached[0] != cached[1] else [])


def _described(value: Any) -> str:
    """A heading's value: a mapping (a policy's parameters) as ``key=value`` pairs, ``{}`` and a value
    the record leaves empty (no prefill hardware of its own, every option its default) as none.

    >>> _described({"budget": 32768, "sink": 4}), _described({}), _described("SN40L-16"), _described(None)
    ('budget=32768, sink=4', 'none', 'SN40L-16', 'none')
    """
    if value is None:
        return "none"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "none"
    return str(value)


def _ratio(a: Any, b: Any) -> str:
    """other/base of a row from its unrounded values (bytes for a memory row shown in GiB), in four
    significant figures; "-" unless both are numbers."""
    return _ratio_text(a, b) if _number(a) and _number(b) else "-"


def _ratio_text(a: float, b: float) -> str:
    """``b / a`` in four significant figures, "1" only when they are equal (a ratio that rounds to 1
    gets the digits that tell it apart), "-" over zero.

    >>> _ratio_text(2.0, 2.0), _ratio_text(0.0860849, 0.0775), _ratio_text(1.0, 1.0004), _ratio_text(0, 3)
    ('1', '0.9003', '1.0004', '-')
    >>> _ratio_text(41.35, 41.36), _ratio_text(1343.364, 1343.350)
    ('1.0002', '0.99999')
    """
    if a == b:
        return "1"
    if not a:
        return "-"
    ratio = b / a
    for digits in range(4, 16):
        text = f"{ratio:.{digits}g}"
        if float(text) != 1:
            return text
    return text


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def tiers_by_capacity(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with its memory tiers (decode and prefill node) smallest first: results.json keeps them in name order
    (``ddr`` before ``hbm``), and the smaller tier is the nearer one on every socket described
    (HBM, then DDR), as ``run``'s table lists them.

    >>> list(tiers_by_capacity({"memory": {"ddr": {"capacity": 9}, "hbm": {"capacity": 2}}})["memory"])
    ['hbm', 'ddr']
    >>> list(tiers_by_capacity({"memory_prefill_node": {"ddr": {"capacity": 9}, "hbm": {"capacity": 2}}})
    ...      ["memory_prefill_node"])
    ['hbm', 'ddr']
    """
    out = dict(record)
    for field in ("memory", "memory_prefill_node"):
        memory = record.get(field)
        if isinstance(memory, Mapping):
            order = sorted(memory, key=lambda tier: (memory[tier] or {}).get("capacity") or 0)
            out[field] = {tier: memory[tier] for tier in order}
    return out


def _records(what: str, records: Any) -> list[Mapping[str, Any]]:
    """``records`` as a list, checked: one record alone (a dict) was a TypeError deep inside."""
    if not isinstance(records, (Mapping, str)) and hasattr(records, "__iter__"):
        records = list(records)
        if all(isinstance(r, Mapping) and "name" in r for r in records):
            return records
    raise InputError(f"{what}: expected a list of records (dicts with a name), got a {type(records).__name__}")


def compare_records(base: Sequence[Mapping[str, Any]], other: Sequence[Mapping[str, Any]],
                    changed_only: bool = False) -> tuple[list[str], list[str], list[str]]:
    """``(tables, names only in base, names only in other)``: one table per point name the two hold
    (in the base's order). Each is a list of records (``simulate_experiment``'s second value, or a
    ``results.json`` read with :func:`json.load`); one record alone is an :class:`InputError`.

    >>> compare_records({"name": "full"}, [])
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: base: expected a list of records (dicts with a name), got a dict
    """
    base, other = _records("base", base), _records("other", other)
    others = {r["name"]: tiers_by_capacity(r) for r in other}
    tables = [point_table(tiers_by_capacity(r), others[r["name"]], changed_only=changed_only)
              for r in base if r["name"] in others]
    names = {r["name"] for r in base}
    return tables, [r["name"] for r in base if r["name"] not in others], \
        [r["name"] for r in other if r["name"] not in names]
