"""Compare two runs: every point the two results hold (paired by name) in one table, with the base's
value, the other's and their ratio (other over base) for each figure ``run`` prints, and a heading
saying what differs (model, hardware, prefill hardware, parallel plans, KV policy and its parameters,
KV bytes per token, serving mode, prefill and decode nodes, KV link, generated length, workload and
seed, speculative drafts and acceptance, SLOs, graph_options/execution/memory settings; a hardware or model of one name whose description differs, as an edited copy of
hw_configs/sn40l.yaml, by its digest). A point that only one of them holds is named on a note line,
with whether the other's sweep lists it in its failures.json (did not fit, or failed).

Each argument is a results.json written by run or sweep, or the folder holding it.

examples:
  python -m sn40l_sim run experiments/deepseek_tp16.yaml --out out/base
  python -m sn40l_sim run experiments/deepseek_tp16.yaml --out out/hbm2x \\
      --set hardware.socket.memory.hbm.bytes_per_s_per_unit="819.2 GB/s"
  python -m sn40l_sim compare out/base out/hbm2x
  python -m sn40l_sim compare out/base/results.json out/hbm2x/results.json --changed
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from sn40l_sim.commands.argtypes import input_path
from sn40l_sim.errors import InputError, shown
from sn40l_sim.yamlio import parse_json, refuse_special_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``compare``'s arguments."""
    parser.add_argument("base", type=input_path, metavar="BASE", help="results.json (or its folder) of the base run")
    parser.add_argument("other", type=input_path, metavar="OTHER", help="results.json (or its folder) to compare with it")
    parser.add_argument("--changed", action="store_true", help="show only the rows whose values differ (the points where none does are named in one line)")


def run(args: argparse.Namespace) -> int:
    """Print the comparison; 0 when the two share at least one point."""
    from sn40l_sim.report.compare import SAME_INPUTS, compare_records, unchanged

    base, other = load_records(args.base), load_records(args.other)
    tables, only_base, only_other = compare_records(base, other, changed_only=args.changed)
    if not tables:
        raise InputError(f"no point name in common: {_names(base)} against {_names(other)} (points are paired by "
                         f"their names{_kinds(base, other)})", file=args.other)
    print(f"base {results_path(args.base)}, other {results_path(args.other)}")
    # --changed: a sweep's points that are the same in both runs would each print a block saying so
    same = [table.partition("\n")[0].removesuffix(": " + SAME_INPUTS) for table in tables
            if args.changed and unchanged(table)]
    for table in tables:
        if not (args.changed and unchanged(table)):
            print()
            print(table)
    if same:
        print()
        print(f"{len(same)} of {len(tables)} point(s) with no figure differing ({SAME_INPUTS}): {', '.join(same)}")
    for path, names, there in ((args.base, only_base, args.other), (args.other, only_other, args.base)):
        if names:
            print(f"note: only in {results_path(path)}: {_names([{'name': n} for n in names])}"
                  f"{_failed_there(names, there)}")
    return 0


def _failed_there(names: list[str], path: Path) -> str:
    """`` (in F: p did not fit)`` for the ``names`` the sweep of ``path`` ran and lists in its
    failures.json F (a point that did not fit, or failed), or empty: a point a capacity change
    made infeasible read as one the other sweep never had."""
    failures = results_path(path).with_name("failures.json")
    if not failures.is_file():   # a named pipe there would be waited on for ever
        return ""
    try:
        listed = parse_json(failures.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    kinds = {f["point"]: f.get("kind") for f in listed if isinstance(f, dict) and isinstance(f.get("point"), str)} \
        if isinstance(listed, list) else {}
    said = [f"{_names([{'name': n} for n in names if kinds.get(n) == kind])} {what}"
            for kind, what in (("infeasible", "did not fit"), ("error", "failed"))
            if any(kinds.get(n) == kind for n in names)]
    return f" (in {failures}: {'; '.join(said)})" if said else ""


def results_path(path: Path) -> Path:
    """``path`` or, for a folder, the results.json in it."""
    return path / "results.json" if path.is_dir() else path


def load_records(path: Path) -> list[dict]:
    """The records of a results.json (a list of objects with a ``name``), or InputError naming it."""
    file = results_path(path)
    # a device or a named pipe (/dev/zero, a FIFO) would be read forever or wait for a writer
    refuse_special_file(file, "a results.json written by run or sweep")
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        from sn40l_sim.report.run_outcome import run_outcome

        # a folder whose run failed or was interrupted: say so, as its status.json does
        outcome = run_outcome(file.parent)
        where = f"{path} holds no results.json" if path.is_dir() else "no such file"
        raise InputError(f"{where}" + (f": {outcome}" if outcome else
                                       " (expected a results.json written by run or sweep, or its folder)"),
                         file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read it: {exc}", file=file) from None
    try:
        records = parse_json(text)
    except json.JSONDecodeError as exc:
        # run and sweep write results.csv beside it: a user tab-completing one may name the other
        beside = file.with_name("results.json")
        hint = f" ({beside} is beside it)" if beside != file and beside.is_file() else ""
        raise InputError(f"not JSON (line {exc.lineno}: {exc.msg}); expected a results.json written by run or "
                         f"sweep{hint}", file=file) from None
    beside = file.with_name("results.json")
    if records == [] and beside != file and beside.is_file():   # a sweep's failures.json when none failed:
        # "the run that wrote it gave no record" said of a sweep that gave them all
        raise InputError(f"holds no record (an empty list); expected a results.json written by run or sweep ({beside} "
                         "is beside it)", file=file)
    if records == []:   # a sweep none of whose runs gave a record writes an empty list
        from sn40l_sim.report.run_outcome import no_records_reason

        raise InputError(f"holds no record: {no_records_reason(file.parent)}", file=file)
    if not isinstance(records, list) or \
            not all(isinstance(r, dict) and isinstance(r.get("name"), str) for r in records):
        raise InputError("expected a list of result records, each with a name (a results.json written by run or "
                         "sweep)", file=file)
    from sn40l_sim.report.record_shape import record_problem

    seen: set[str] = set()
    for i, record in enumerate(records):
        # points are paired by name: a second record of one name replaced the first unsaid
        if record["name"] in seen:
            raise InputError(f"records[{i}]: point name {shown(record['name'])} appears twice; expected each point "
                             "once (a results.json written by run or sweep)", file=file)
        seen.add(record["name"])
        problem = record_problem(record) or _unreadable_number(record)
        if problem:   # a figure edited into text stopped the table with a TypeError traceback
            raise InputError(f"records[{i}] ({shown(record['name'])}): {problem} (a results.json written by run or "
                             "sweep)", file=file)
    return records


def _unreadable_number(value: object, where: str = "") -> str | None:
    """``path: what was expected`` for the first number in ``value`` that run never writes, or None:
    run writes a figure that is not finite as null (report/results.py), so a NaN or Infinity was
    compared as a figure, and an integer past a float's range stopped compare with an
    OverflowError traceback.

    >>> _unreadable_number({"memory": {"hbm": {"kv": float("nan")}}, "batch": 8})
    'memory.hbm.kv: expected a finite number or null, got nan'
    >>> _unreadable_number({"latency": [1.0, 10**400]})[:46]
    'latency[1]: expected a finite number or null, '
    """
    if isinstance(value, dict):
        items = ((f"{where}.{key}" if where else str(key), item) for key, item in value.items())
    elif isinstance(value, list):
        items = ((f"{where}[{i}]", item) for i, item in enumerate(value))
    else:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                finite = math.isfinite(value)
            except OverflowError:
                finite = False
            if not finite:
                return f"{where}: expected a finite number or null, got {shown(value)}"
        return None
    for at, item in items:
        problem = _unreadable_number(item, at)
        if problem:
            return problem
    return None


#: names a refusal lists of each side: a sweep has hundreds, and the line must stay readable
SHOWN_NAMES = 4


def _names(records: list[dict]) -> str:
    """The first :data:`SHOWN_NAMES` point names, and how many more there are."""
    names = [r["name"] for r in records]
    more = len(names) - SHOWN_NAMES
    return ", ".join(names[:SHOWN_NAMES]) + (f" and {more} more" if more > 0 else "")


def _kinds(base: list[dict], other: list[dict]) -> str:
    """``; ... is a sweep ...`` when one side is a sweep and the other a run: a sweep's point names
    carry the sweep point (``full[batch=8]``), so none pairs with a run's (``full``)."""
    swept = [any("sweep_point" in r for r in records) for records in (base, other)]
    if swept[0] == swept[1]:
        return ""
    return (f"; {'BASE' if swept[0] else 'OTHER'} is a sweep, whose point names carry the sweep point, and "
            f"{'OTHER' if swept[0] else 'BASE'} a single run: compare a sweep with a sweep of the same axes")
