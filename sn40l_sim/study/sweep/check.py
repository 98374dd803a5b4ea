"""Checking a sweep without running it: what ``sweep`` (and ``run``) refuse, ``check`` refuses.

The section and every axis value are checked as :func:`~.load.load_sweep` checks them before a sweep
starts; each sweep point is expanded into its runs as :func:`~.plan.expand_runs` does (a point whose
experiment, hardware or model does not load would fail); and each run gets the checks every run
makes before it simulates (:func:`~sn40l_sim.study.preflight.check_assembly`). A run that would not
fit is fine when the section says ``infeasible: skip``.

Examples
--------
>>> check_sweep(load_sweep("experiments/kernel_looping.yaml"))
8
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.study.preflight import check_assembly
from sn40l_sim.study.sweep.load import Sweep, load_sweep  # noqa: F401  (load_sweep: the docstring's example)
from sn40l_sim.study.sweep.plan import expand_runs, refuse_repeated_points


def check_sweep(sweep: Sweep, only: Collection[str] | None = None) -> int:
    """Check every run of a loaded sweep (or those named in ``only``, the runs a reference file
    reads); returns the number of runs.

    Raises
    ------
    InputError
        The first sweep point or run that would fail, with its name.
    """
    runs, failures = expand_runs(sweep)
    refuse_repeated_points(sweep, runs)
    for _, name, error in failures:
        raise InputError(f"{error} (sweep point {name})")
    # the runs' assemblies share one store of built graphs: it is keyed by everything the builder is
    # bound to (Assembly.step_timer), and points differing only in hardware or serving fields build
    # the same graphs (the shipped sweeps' 231 distinct graphs were built 524 times). Only here:
    # a sweep ships each run's assembly to a worker, which must not carry every run's graphs
    graphs: dict = {}
    shared = {id(asm): replace(asm, graphs=graphs) for asm in {id(r.assembly): r.assembly for r in runs}.values()}
    for run in runs:
        if only is not None and run.name not in only:
            continue
        try:
            check_assembly(shared[id(run.assembly)], [run.point])
        except InputError as exc:
            if isinstance(exc, InfeasibleError) and sweep.infeasible == "skip":
                continue
            exc.message += f" (sweep run {run.name})"
            raise
    return len(runs)


__all__ = ["check_sweep"]
