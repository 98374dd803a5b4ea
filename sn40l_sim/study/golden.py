"""Regression goldens: the key simulated results of every experiment in ``experiments/``, kept in
``tests/golden/<experiment>.json`` and compared with tight tolerances by ``tests/study/test_golden.py``.

When a result moves on purpose (a unit model, a template or a calibrated value changed),
regenerate with ``python -m sn40l_sim golden --update``: it prints every value that moved, old and
new, and rewrites the files. Without ``--update`` it only prints the diff (exit 1 if any).

The fields kept are those declared ``golden`` in :mod:`sn40l_sim.report.fields`.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sn40l_sim.errors import InputError
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.outputs import rewrite_text
from sn40l_sim.report.registry import Fields
from sn40l_sim.study.runner import simulate_experiment
from sn40l_sim.yamlio import load_document, parse_json

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS_DIR = REPO / "experiments"
GOLDEN_DIR = REPO / "tests" / "golden"
#: relative tolerance for floats; integers (cycles, batches) must match exactly
REL_TOL = 1e-6



def experiments() -> list[Path]:
    """Experiment files that ``run`` can simulate (those with a workload and no sweep), but for a
    rate search: its answer is a bisection over many served runs, which its own tests check
    (tests/study/test_rate_search.py), not one point's figures."""
    return [path for path, why in survey() if why is None]


def survey() -> list[tuple[Path, str | None]]:
    """Every file of ``experiments/`` and why it has no golden (None: it has one).

    >>> for path, why in survey():
    ...     print(path.name, "-", why or "golden")
    azure_conv.yaml - a sweep over model: too long for a golden (the goldens hold the experiments without a sweep)
    batch_probe.yaml - a sweep over batch: too long for a golden (the goldens hold the experiments without a sweep)
    chunked_prefill.yaml - a sweep over prefill_chunk: too long for a golden (the goldens hold the experiments without a sweep)
    deepseek_sweep.yaml - a sweep over serving.batch, shape.prompt_len: too long for a golden (the goldens hold the experiments without a sweep)
    deepseek_tp16.yaml - golden
    hetero_nodes.yaml - a sweep over prefill_nodes: too long for a golden (the goldens hold the experiments without a sweep)
    kernel_looping.yaml - a sweep over model, sockets, tp_prefill, tp, looping: too long for a golden (the goldens hold the experiments without a sweep)
    kv_policies.yaml - a sweep over model: too long for a golden (the goldens hold the experiments without a sweep)
    llama8b_node8.yaml - golden
    long_context_1m.yaml - golden
    map_deepseek_tp16.yaml - no workload: an experiment for map, which reports no results record
    max_rate.yaml - a rate search: a bisection over many served runs, which tests/study/test_rate_search.py checks, not one point's figures
    multi_model.yaml - several models on one node: runs of every scheduler, which tests/study/test_multi_model_run.py and tests/serving/test_multi_model.py check
    per_user_speed.yaml - a sweep over model, speculative: too long for a golden (the goldens hold the experiments without a sweep)
    prefix_cache.yaml - a sweep over prefix_cache: too long for a golden (the goldens hold the experiments without a sweep)
    snapstream_table5.yaml - golden
    socket_scaling.yaml - a sweep over model, sockets, tp_prefill, tp: too long for a golden (the goldens hold the experiments without a sweep)
    """
    out: list[tuple[Path, str | None]] = []
    for path in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
        try:
            data = load_document(path).data
        except InputError as exc:
            out.append((path, f"cannot be read: {exc.message}"))
            continue
        if data.get("kind") != "experiment":
            out.append((path, f"not an experiment (kind: {data.get('kind')})"))
        elif "sweep" in data:
            section = data["sweep"] if isinstance(data["sweep"], dict) else {}
            axes = section.get("axes") if isinstance(section.get("axes"), dict) else {}
            out.append((path, f"a sweep over {', '.join(map(str, axes)) or 'its axes'}: too long for a golden (the "
                              "goldens hold the experiments without a sweep)"))
        elif "workload" not in data:
            out.append((path, "no workload: an experiment for map, which reports no results record"))
        elif "multi_model" in data:
            out.append((path, "several models on one node: runs of every scheduler, which "
                              "tests/study/test_multi_model_run.py and tests/serving/test_multi_model.py check"))
        elif "rate_search" in data:
            out.append((path, "a rate search: a bisection over many served runs, which tests/study/test_rate_search.py "
                              "checks, not one point's figures"))
        else:
            out.append((path, None))
    return out


def collect(experiment: Path) -> dict[str, Any]:
    """The key results of one experiment, point by point."""
    _, records = simulate_experiment(experiment)
    return key_results(records)


def key_results(records: Sequence[Mapping[str, Any]], fields: Fields = RESULTS) -> dict[str, Any]:
    """Point name -> the record's fields declared golden.

    >>> key_results([{"name": "full", "batch": 4, "prefill_s": 1.5, "ttft_s": None}])
    {'full': {'batch': 4, 'ttft_s': None}}
    """
    return {r["name"]: {f: r[f] for f in fields.golden if f in r} for r in records}


def golden_path(experiment: Path) -> Path:
    """``tests/golden/<experiment name>.json``."""
    return GOLDEN_DIR / f"{experiment.stem}.json"


def diff(old: Any, new: Any, path: str = "") -> list[str]:
    """Human-readable differences beyond the tolerances (empty when they agree).

    >>> diff({"a": 1, "b": 2.0}, {"a": 1, "b": 2.0000001})
    []
    >>> diff({"a": 1, "b": {"c": 10}}, {"a": 2, "b": {"c": 10, "d": 1}})
    ['a: 1 -> 2', 'b.d: (absent) -> 1']
    """
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            where = f"{path}.{key}" if path else str(key)
            if key not in old:
                out.append(f"{where}: (absent) -> {new[key]!r}")
            elif key not in new:
                out.append(f"{where}: {old[key]!r} -> (absent)")
            else:
                out.extend(diff(old[key], new[key], where))
        return out
    if isinstance(old, bool) or isinstance(new, bool) or not isinstance(old, (int, float)) \
            or not isinstance(new, (int, float)):
        return [] if old == new else [f"{path}: {old!r} -> {new!r}"]
    if isinstance(old, int) and isinstance(new, int):
        return [] if old == new else [f"{path}: {old} -> {new}"]
    if math.isclose(old, new, rel_tol=REL_TOL, abs_tol=1e-12):
        return []
    change = f" ({(new - old) / old:+.4%})" if old else ""
    return [f"{path}: {old!r} -> {new!r}{change}"]


def load(experiment: Path) -> dict[str, Any] | None:
    """The stored golden of an experiment (None when there is none yet).

    Raises
    ------
    InputError
        For a file that is not a golden (not JSON, or not a mapping of point names), or a folder
        where the file goes, naming it.
    """
    path = golden_path(experiment)
    if path.is_dir():   # it was taken for no golden yet, and --update stopped in a traceback writing over it
        raise InputError("is a folder; expected the experiment's golden file (remove or rename the folder)",
                         file=path)
    if not path.is_file():
        return None
    try:
        data = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:   # a hand edit or a merge gone wrong: say which file, no traceback
        raise InputError(f"cannot read the golden ({exc}); regenerate it with `python -m sn40l_sim golden "
                         "--update`", file=path) from None
    if not isinstance(data, dict):
        raise InputError(f"expected a mapping of point name -> key results, got {type(data).__name__}; "
                         "regenerate it with `python -m sn40l_sim golden --update`", file=path)
    return data


def write(experiment: Path, results: dict[str, Any]) -> Path:
    """Store ``results`` as the experiment's golden; returns the file."""
    path = golden_path(experiment)
    path.parent.mkdir(parents=True, exist_ok=True)
    rewrite_text(path, json.dumps(results, indent=1, sort_keys=True) + "\n")   # through a link, keeping its mode
    return path
