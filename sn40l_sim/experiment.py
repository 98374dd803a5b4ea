"""Experiment files (``experiments/*.yaml``): hardware + model + KV policies + parallel plan +
workload (+ sweep axes), expanded into simulation points.

This is the top of the data flow (docs/architecture.md): it loads the hardware, the model and the
KV policies and hands them, as spec objects, to the mapper and the engine.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from sn40l_sim.schema import NonNegativeInt, PositiveInt, StrictModel, validate
from sn40l_sim.yamlio import Document, load_document


class PhasePlan(StrictModel):
    """Parallel plan of one phase (see :class:`sn40l_sim.models.kernels.ParallelPlan`)."""

    tp: PositiveInt = 1
    attention_dp: PositiveInt = 1


class ParallelSection(StrictModel):
    prefill: PhasePlan = PhasePlan()
    decode: PhasePlan = PhasePlan()


class PolicyEntry(StrictModel):
    """One KV policy to simulate, with its parameters (see ``sn40l_sim/kvcache``)."""

    name: str
    policy: str
    params: dict[str, Any] = Field(default_factory=dict)


class ShapeSection(StrictModel):
    """The shape for ``map`` and for single-step studies."""

    batch: PositiveInt = 1
    prompt_len: PositiveInt
    max_new_tokens: NonNegativeInt = 0


class ExperimentSpec(StrictModel):
    """The validated experiment file. Later sections (workload, serving, sweep) are added by the
    engine and the sweep code; unknown keys are errors."""

    kind: Literal["experiment"]
    name: str
    hardware: str
    model: str
    model_overrides: dict[str, Any] = Field(default_factory=dict)
    parallel: ParallelSection = ParallelSection()
    policies: tuple[PolicyEntry, ...]
    shape: ShapeSection


@dataclass
class Experiment:
    """A loaded experiment: the validated spec plus the document (for error locations)."""

    spec: ExperimentSpec
    doc: Document

    @property
    def path(self) -> Path:
        return self.doc.path

    def resolve(self, relative: str) -> Path:
        return self.doc.resolve(relative)


def load_experiment(path: str | Path) -> Experiment:
    """Load and validate an experiment file (hardware and model files are loaded by the caller)."""
    doc = load_document(path)
    return Experiment(validate(ExperimentSpec, doc), doc)
