"""Running a sweep (part of :mod:`sn40l_sim.study.sweep.load`): one run per (sweep point, experiment point).

A sweep point's experiment expands into its own points (KV policies x prompt lengths); each of
them runs on its own, as the experiment restricted to that one policy entry and prompt length, so
that a batch too large for ``full`` does not lose the ``snapstream`` record of the same sweep point,
and so that the work spreads over the processes in small pieces. Runs go to a
:class:`concurrent.futures.ProcessPoolExecutor` (each process keeps the hardware and models it
has loaded, and the mapper's memo); the records come back in run order whatever order the
processes finish in.

Examples
--------
>>> data = {"policies": [{"name": "full"}, {"name": "snap", "per_prompt": [{"prompt_len": 8}, {"prompt_len": 16}]}],
...         "prompt_lens": [8, 16]}
>>> origins = {("policies", 1, "name"): ("e.yaml", 9), ("prompt_lens",): ("e.yaml", 4)}
>>> sub, sub_origins = restrict(data, origins, policy_index=1, prompt_len=16)
>>> sub, sub_origins[("policies", 0, "name")]
({'policies': [{'name': 'snap', 'per_prompt': [{'prompt_len': 16}]}], 'prompt_lens': [16]}, ('e.yaml', 9))
"""
from __future__ import annotations

import concurrent.futures as cf
import copy
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.hardware.legacy import upgrade_dotted
from sn40l_sim.study.sweep.load import Sweep, SweepPoint, SweepRecords, experiment_from_data, load_node
from sn40l_sim.yamlio import Document


@dataclass(frozen=True)
class SweepRun:
    """One experiment point of one sweep point: the unit of work of a process."""

    sweep_point: SweepPoint
    #: the experiment point's name (``full``, ``snap@4K``)
    point_name: str
    #: the sweep point's data restricted to this point's policy entry and prompt length
    data: dict[str, Any]
    origins: dict

    @property
    def name(self) -> str:
        """``<experiment point>[<sweep point>]``: the record's name."""
        return f"{self.point_name}[{self.sweep_point.name}]"


def restrict(data: dict, origins: dict, policy_index: int, prompt_len: int) -> tuple[dict, dict]:
    """The experiment data with one policy entry and one prompt length, and origins that still
    point at the entry's lines."""
    out = copy.deepcopy(data)
    entry = out["policies"][policy_index]
    if isinstance(entry.get("per_prompt"), list):
        entry["per_prompt"] = [pp for pp in entry["per_prompt"] if pp.get("prompt_len") == prompt_len]
    out["policies"] = [entry]
    if "prompt_lens" in out:
        out["prompt_lens"] = [prompt_len]
    moved = {}
    for key, where in origins.items():
        if key[:1] == ("policies",) and len(key) > 1:
            if key[1] == policy_index:
                moved[("policies", 0) + key[2:]] = where
        else:
            moved[key] = where
    return out, moved


def expand_runs(sweep: Sweep) -> tuple[list[SweepRun], list[tuple[int, str, str]]]:
    """The runs of every sweep point, and ``(index, name, error)`` of the sweep points whose
    experiment is invalid as a whole (a combination of values that passed one by one)."""
    from sn40l_sim.study.experiment import points

    runs, failures = [], []
    for sp in sweep.points:
        try:
            exp = experiment_from_data(sp.data, sweep.doc)
            for p in points(exp):
                data, origins = restrict(sp.data, sweep.doc.origins, p.policy_index, p.prompt_len)
                runs.append(SweepRun(sp, p.name, data, origins))
        except InputError as exc:
            failures.append((sp.index, sp.name, str(exc)))
    return runs, failures


_LOADED: dict[str, Any] = {}  # per process: hardware and models already loaded


def _cached(key: str, load):
    if key not in _LOADED:
        _LOADED[key] = load()
    return _LOADED[key]


def _node_field(node: Any, dotted: str) -> Any:
    out: Any = node
    for part in upgrade_dotted(dotted).split("."):
        out = out[part] if isinstance(out, dict) else getattr(out, part)   # memory tiers are a mapping
    return out


def simulate_run(doc_path: str | Path, run: SweepRun, on_result=None) -> dict:
    """The record of one run (what a worker process does).

    Raises
    ------
    InputError
        For an infeasible point (a batch that does not fit, ...), located in the experiment file.
    """
    from sn40l_sim.hardware.loader import with_overrides
    from sn40l_sim.models.loader import load_model
    from sn40l_sim.study.runner import simulate_points

    sp = run.sweep_point
    doc = Document(run.data, Path(doc_path), run.origins)
    exp = experiment_from_data(run.data, doc)
    spec = exp.spec
    hw_path = exp.resolve(spec.hardware)
    node = _cached(f"hw:{hw_path}", lambda: load_node(doc, run.data, {}))
    if sp.hardware_overrides:
        key = json.dumps(sp.hardware_overrides, sort_keys=True, default=str)
        node = _cached(f"hw:{hw_path}:{key}", lambda: with_overrides(node, sp.hardware_overrides))
    model_path = exp.resolve(spec.model)
    model_key = json.dumps(spec.model_overrides, sort_keys=True, default=str)
    model = _cached(f"model:{model_path}:{model_key}", lambda: load_model(model_path, spec.model_overrides or None))
    (record,) = simulate_points(exp, node, model, on_result=on_result)
    record["name"] = run.name
    record["sweep_point"] = sp.name
    # hardware axes as the node holds them (numbers in bytes/s, Hz, counts), others as written
    record["sweep"] = {k: _node_field(node, sp.hardware_axes[k]) if k in sp.hardware_axes else v
                       for k, v in sp.values.items()}
    return record


def _task(args: tuple) -> tuple[int, dict | None, str | None, bool]:
    """``(index, record, error, infeasible)`` of one run; never raises."""
    index, doc_path, run = args
    try:
        return index, simulate_run(doc_path, run), None, False
    except InfeasibleError as exc:
        return index, None, str(exc), True
    except InputError as exc:
        return index, None, str(exc), False
    except Exception as exc:  # noqa: BLE001 - a bug at one point must not lose the others
        return index, None, f"internal error {type(exc).__name__}: {exc}", False


def run_points(sweep: Sweep, jobs: int | None = None, progress: bool = True) -> SweepRecords:
    """Run every point of ``sweep`` in ``jobs`` processes (default ``os.cpu_count()``; 1 runs in
    this process) with a progress bar on stderr; the records in point order, with the failures."""
    from tqdm import tqdm

    runs, failures = expand_runs(sweep)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(runs) or 1))
    tasks = [(i, str(sweep.doc.path), run) for i, run in enumerate(runs)]
    results: dict[int, tuple] = {}
    bar = tqdm(total=len(tasks), desc=f"sweep {sweep.name}", unit="run", file=sys.stderr,
               disable=not progress, dynamic_ncols=True)
    try:
        if jobs == 1:
            for task in tasks:
                index, *result = _task(task)
                results[index] = tuple(result)
                bar.update(1)
        else:
            with cf.ProcessPoolExecutor(max_workers=jobs) as pool:
                for future in cf.as_completed([pool.submit(_task, task) for task in tasks]):
                    index, *result = future.result()
                    results[index] = tuple(result)
                    bar.update(1)
    finally:
        bar.close()
    out = SweepRecords()
    for i, run in enumerate(runs):
        record, error, infeasible = results[i]
        if error is None:
            out.append(record)
        elif infeasible and sweep.infeasible == "skip":
            out.skipped.append((run.name, error))
        else:
            failures.append((run.sweep_point.index, run.name, error))
    # sorted() is stable: a sweep point's own runs keep their order
    out.failures = [(name, error) for _, name, error in sorted(failures, key=lambda f: f[0])]
    out.total = len(out) + len(out.failures) + len(out.skipped)
    return out
