"""The ``multi_model`` section of an experiment file: several models served by one node, each
request asking for one of them, under each scheduler policy (:mod:`sn40l_sim.serving.multi_model`).

.. code-block:: yaml

    multi_model:
      models:                  # at least two; shares of the requests add up to 1
        - {name: llama8b, model: ../graphs/llama3_1_8b.yaml, share: 0.6, batch: 32}
        - {name: llama70b, model: ../graphs/llama3_1_70b.yaml, share: 0.3, batch: 32}
        - {name: llama405b, model: ../graphs/llama3_1_405b.yaml, share: 0.1}
      schedulers: [on_demand, batch_by_model, prewarm]   # the default: all three
      quantum_s: 2 s           # batch_by_model and prewarm: longest stay on a model while others wait
      weights_tier: ddr        # where idle models' weights live (default: the second tier of memory.order)

Each model is timed on the node alone with the experiment's KV policies, plans and compiled sizes
(``batch``: a number, or ``max``, the default: the largest compiled batch that fits beside nothing
else, which leaves no room for a second model in the fast tier). Each request of the workload is
given a model by a draw from the shares, seeded by ``serving.seed``. A model no request drew has no
record (a warning names its entry). The node is one co-located
node (``serving.mode: colocated``, ``decode_nodes: 1``). The experiment's ``model`` is the one
``map`` and ``check`` read; the models served are these.

Examples
--------
>>> section = MultiModelSection(models=[{"name": "a", "model": "a.yaml", "share": 0.25},
...                                     {"name": "b", "model": "b.yaml", "share": 0.75}])
>>> section.schedulers, section.quantum_s, section.models[0].batch
(('on_demand', 'batch_by_model', 'prewarm'), 2.0, 'max')
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator

from sn40l_sim.schema import Fraction, PlainName, PositiveInt, Range, Seconds, StrictModel

if TYPE_CHECKING:
    from sn40l_sim.study.experiment import Experiment

Scheduler = Literal["on_demand", "batch_by_model", "prewarm"]
#: how long a model may keep the node while others wait: more than zero, less than a day
Quantum = Annotated[Seconds, AfterValidator(Range("scheduling quantum", 0, 86400, "0 s", "86400 s (a day)", "s",
                                                  low_open=True))]


#: why an experiment with a ``multi_model`` section takes no ``sweep`` (``run`` and ``sweep`` say it)
NO_SWEEP = "a sweep with several models on a node is not supported; run each value with --set, or remove sweep " \
    "or multi_model"


class ServedModel(StrictModel):
    """One model the node serves: its name in the results, its model file, its share of the
    requests and its compiled decode batch."""

    name: PlainName
    model: str
    share: Fraction
    batch: PositiveInt | Literal["max"] = "max"


class MultiModelSection(StrictModel):
    """Several models on one node (see the module docstring)."""

    models: tuple[ServedModel, ...]
    schedulers: tuple[Scheduler, ...] = ("on_demand", "batch_by_model", "prewarm")
    quantum_s: Quantum = 2.0
    #: the tier holding every model's weights (default: the second tier of the placement order)
    weights_tier: str | None = None


def check_multi_model(exp: Experiment) -> None:
    """The rules of a ``multi_model`` section that span fields.

    Raises
    ------
    InputError
        Located at the field: fewer than two models, a name used twice, shares that do not add up
        to 1 or a zero share, no scheduler or one listed twice, a ``serving.batch`` (each model has
        its own), serving that is not one co-located node, or a sweep or a rate search (not
        supported with several models).
    """
    section = exp.spec.multi_model
    if section is None:
        return
    at = ("multi_model",)
    if len(section.models) < 2:
        raise exp.error(at + ("models",), "expected at least two models to share the node")
    seen: dict[str, int] = {}
    for i, entry in enumerate(section.models):
        if entry.name in seen:
            raise exp.error(at + ("models", i, "name"), f"duplicate model name {entry.name!r} (also "
                            f"multi_model.models[{seen[entry.name]}])")
        seen[entry.name] = i
        if entry.share <= 0:
            raise exp.error(at + ("models", i, "share"), "expected a share above 0 (leave the model out instead)")
    total = sum(entry.share for entry in section.models)
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise exp.error(at + ("models",), f"the shares of the requests add up to {total:g}, not 1")
    if not section.schedulers:
        raise exp.error(at + ("schedulers",), "expected at least one scheduler policy")
    for i, name in enumerate(section.schedulers):
        if name in section.schedulers[:i]:
            raise exp.error(at + ("schedulers", i), f"scheduler {name!r} is listed twice")
    serving = exp.spec.serving
    if "batch" in serving.model_fields_set:
        # each model runs its entry's batch (``max`` when it gives none): a serving.batch written
        # beside them would be read by nothing, and the run would print another batch than asked
        raise exp.error(("serving", "batch"), "several models on a node take each model's batch from its "
                        "entry (multi_model.models[i].batch, default max); remove serving.batch")
    if serving.mode != "colocated":
        raise exp.error(("serving", "mode"), "several models share one co-located node: set mode: colocated")
    if serving.decode_nodes != 1:
        raise exp.error(("serving", "decode_nodes"), "several models share one node: decode_nodes must be 1")
    if exp.spec.sweep is not None:
        # a sweep point gives one record per policy (study/sweep/run.py), these runs one per
        # scheduler and model: every point failed as an internal error
        raise exp.error(("sweep",), NO_SWEEP)
    if exp.spec.rate_search is not None:
        raise exp.error(("rate_search",), "a rate search with several models on a node is not supported; "
                        "remove rate_search or multi_model")
    if serving.speculative is not None:
        raise exp.error(("serving", "speculative"), "speculative decoding with several models on a node is not "
                        "supported; remove serving.speculative")
