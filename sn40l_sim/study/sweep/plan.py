"""Planning a sweep: one run per (sweep point, experiment point), carrying everything it needs.

A sweep point's experiment expands into its own points (KV policies x prompt lengths); each of them
runs on its own, so that a batch too large for ``full`` does not lose the ``snapstream`` record of
the same sweep point, and so that the work spreads over the processes in small pieces. A run
carries the loaded, validated specs (the sweep point's experiment, its node with the hardware
overrides applied, the model): a worker never reads the experiment's files. Each sweep point's
experiment is validated once, each distinct node and model loaded once.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from sn40l_sim.errors import InputError
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.study.experiment import Experiment, Point, points
from sn40l_sim.study.sweep.load import Sweep, SweepPoint, experiment_from_data, load_node


@dataclass(frozen=True)
class SweepRun:
    """One experiment point of one sweep point: the unit of work of a process."""

    sweep_point: SweepPoint
    #: the point of the sweep point's experiment this run simulates
    point: Point
    experiment: Experiment
    node: NodeSpec
    model: ModelSpec

    @property
    def name(self) -> str:
        """``<experiment point>[<sweep point>]``: the record's name."""
        return f"{self.point.name}[{self.sweep_point.name}]"


def expand_runs(sweep: Sweep) -> tuple[list[SweepRun], list[tuple[int, str, str]]]:
    """The runs of every sweep point, and ``(index, name, error)`` of the sweep points whose
    experiment is invalid as a whole (a combination of values that passed one by one) or whose
    hardware or model does not load."""
    runs, failures = [], []
    nodes: dict[str, NodeSpec] = {}
    models: dict[str, ModelSpec] = {}
    for sp in sweep.points:
        try:
            exp = experiment_from_data(sp.data, sweep.doc)
            spec = exp.spec
            hw_key = json.dumps([spec.hardware, sp.hardware_overrides], sort_keys=True, default=str)
            if hw_key not in nodes:
                nodes[hw_key] = load_node(exp.doc, sp.data, sp.hardware_overrides)
            model_key = json.dumps([spec.model, spec.model_overrides], sort_keys=True, default=str)
            if model_key not in models:
                models[model_key] = load_model(exp.resolve(spec.model, ("model",)), spec.model_overrides or None)
            runs += [SweepRun(sp, p, exp, nodes[hw_key], models[model_key]) for p in points(exp)]
        except InputError as exc:
            failures.append((sp.index, sp.name, str(exc)))
    return runs, failures
