"""Experiments loaded once and simulated again under hardware overrides: what ``validate`` and
``calibrate`` need (many evaluations of the same few experiments, steps only).

A reference measurement names an experiment and one of its records. A plain experiment gives one
record per point (``full``, ``snapstream@64K``); an experiment with a ``sweep:`` section gives one per
run, named as the sweep names it (``full[model=llama3_1_70b,sockets=8,...]``), so a measurement can
name one configuration of a small sweep (a model, a socket count, kernel looping on or off).
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from sn40l_sim.hardware.loader import with_overrides
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.study.assemble import Assembly, assemble
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.preflight import require_workload
from sn40l_sim.study.runner import simulate_assembly
from sn40l_sim.study.sweep.load import load_sweep
from sn40l_sim.study.sweep.plan import SweepRun, expand_runs
from sn40l_sim.study.sweep.stamps import stamp


class LoadedExperiments:
    """Experiments loaded and assembled once per process, simulated again under hardware overrides.

    Examples
    --------
    >>> from sn40l_sim.report.results import stable      # the records less how fast they were simulated
    >>> loaded = LoadedExperiments()
    >>> first = [stable(r) for r in loaded.records("experiments/deepseek_tp16.yaml", serve=False)]
    >>> [stable(r) for r in loaded.records("experiments/deepseek_tp16.yaml", serve=False)] == first, len(loaded)
    (True, 1)
    """

    def __init__(self, planned: dict[Path, list[SweepRun]] | None = None) -> None:
        # sweeps whose runs the caller planned already (by resolved path; ``validate``'s reference
        # check plans them to know their names, :func:`~sn40l_sim.study.validation.load_references`)
        self._loaded: dict[Path, Assembly | list[SweepRun]] = dict(planned or {})

    def __len__(self) -> int:
        return len(self._loaded)

    def load(self, path: str | Path) -> Assembly | list[SweepRun]:
        """The experiment at ``path`` assembled (or, for a sweep, its runs planned), on first use.

        Raises
        ------
        InputError
            For a bad experiment, or a sweep point that does not assemble.
        """
        key = Path(path).resolve()
        if key not in self._loaded:
            exp = load_experiment(key)
            if exp.spec.sweep is None:
                require_workload(exp)
                self._loaded[key] = assemble(exp)
            else:
                runs, failures = expand_runs(load_sweep(key))
                if failures:
                    _, name, error = failures[0]
                    raise exp.error(("sweep",), f"sweep point {name} does not assemble: {error}")
                self._loaded[key] = runs
        return self._loaded[key]

    def sockets(self, paths: Collection[str | Path]) -> dict[Path, list[SocketSpec]]:
        """Each experiment of ``paths`` -> the sockets its runs simulate (one for a plain experiment,
        and its prefill_hardware's, whose nodes the overrides change too), as ``calibrate`` and
        ``validate`` check them against their ``--hardware``."""
        loaded = {Path(path): self.load(path) for path in paths}
        return {path: [node.socket for asm in ([a] if isinstance(a, Assembly) else [run.assembly for run in a])
                       for node in (asm.node, asm.prefill_node) if node is not None]
                for path, a in loaded.items()}

    def records(self, path: str | Path, *, serve: bool = True, hardware_overrides: dict[str, Any] | None = None,
                reads_prefill: Collection[str] | None = None, reads: Collection[str] | None = None) -> list[dict]:
        """The records of the experiment at ``path`` on its hardware with ``hardware_overrides``.

        ``reads_prefill`` (with ``serve=False``): the names of the records whose prefill fields the
        caller reads; the other records' prefill steps are not simulated (their prefill fields are
        empty). None (default): every prefill is simulated.

        ``reads``: the names of the records the caller reads at all; the other points are not
        simulated and have no record (``validate`` reads two of ``snapstream_table5.yaml``'s six
        points from another experiment). None (default): every point.
        """
        loaded = self.load(path)
        if isinstance(loaded, Assembly):
            points = [p for p in loaded.points if reads is None or p.name in reads]
            skipped = () if reads_prefill is None else [p.name for p in points if p.name not in reads_prefill]
            return simulate_assembly(_overridden(loaded, hardware_overrides), only=points, serve=serve,
                                     without_prefill=skipped)
        return [stamp(run, simulate_assembly(_overridden(run.assembly, hardware_overrides), only=[run.point],
                                             serve=serve, without_prefill=_unread(run.point.name, run.name,
                                                                                  reads_prefill))[0])
                for run in loaded if reads is None or run.name in reads]


def _unread(point: str, record: str, reads_prefill: Collection[str] | None) -> tuple[str, ...]:
    """``(point,)`` when the record's prefill is not read, else ``()``."""
    return () if reads_prefill is None or record in reads_prefill else (point,)


def _overridden(asm: Assembly, overrides: dict[str, Any] | None) -> Assembly:
    """``asm`` with ``overrides`` on its nodes: the decode node's and the prefill nodes' of a
    prefill_hardware, as assemble and `run --set` apply them (a prefill there kept the YAML's values)."""
    if not overrides:
        return asm
    prefill = None if asm.prefill_node is None else with_overrides(asm.prefill_node, overrides)
    return replace(asm, node=with_overrides(asm.node, overrides), prefill_node=prefill)
