"""One socket's memory placed in its tiers, and the refusals when a use that must stay in the first
tier leaves it: :func:`place_socket` (how ``run`` and ``map`` place a socket's weights, KV and
activations), :func:`in_first_tier` and :func:`check_weights_fit`. :mod:`sn40l_sim.serving.memory_fit`
asks them for each batch and prompt it tries.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sn40l_sim.errors import InfeasibleError
from sn40l_sim.mapper.memory import PLACEMENT_PRIORITY, TiersOverflow
from sn40l_sim.mapper.placement import MemoryPlacement
from sn40l_sim.quantities import gib_text

if TYPE_CHECKING:
    from sn40l_sim.hardware.spec import NodeSpec
    from sn40l_sim.ir import ParallelPlan
    from sn40l_sim.serving.point import PointSetup

#: ``(plan, kv_bytes_per_socket, activation_bytes) -> MemoryPlacement`` of one socket; called with
#: ``kv_offload={tier: bytes}`` as well when the KV policy keeps a store in a tier of its own, and
#: with ``priority=(use, ...)`` when the default order of the uses would spill one that must stay
MemoryPlacer = Callable[..., MemoryPlacement]


def in_first_tier(placement: MemoryPlacement, may_spill: tuple[str, ...], what: str) -> MemoryPlacement:
    """``placement`` if every use not in ``may_spill`` stayed in the first tier of the order, else
    an :class:`InfeasibleError` saying what ``what`` needs, what would spill and where."""
    first = placement.first_tier
    kept = [use for use in _USE_NAMES if use not in may_spill]
    spilled = spilled_uses(placement, may_spill)
    if spilled:
        gib = 2**30
        need = {use: placement.total(use) for use in _USE_NAMES}
        detail = " + ".join(f"{use} {gib_text(n)} GiB" for use, n in need.items())
        spill = ", ".join(f"{use} {gib_text(n)} GiB" for use, n in spilled.items())
        to = " and ".join(tier.upper() for tier, uses in placement.by_tier.items()
                          if tier != first and any(uses.get(use, 0) for use in spilled))
        keeps = " and ".join(_USE_NAMES[use] for use in kept)
        raise InfeasibleError(f"{what} does not fit in {first.upper()} per socket: {detail} > "
                              f"{placement.capacity[first] / gib:.2f} GiB usable {first.upper()} ({spill} would "
                              f"spill to {to}; the serving model keeps {keeps} in {first.upper()})")
    return placement


def weights_alone_exceed(may_spill: tuple[str, ...], place: MemoryPlacer, plan: Any) -> str | None:
    """Why a socket placed by ``place`` under ``plan`` cannot hold even the weights without any KV
    or activations (None when it can): then no batch (decode) or prompt (prefill) fits."""
    try:
        in_first_tier(place_socket(place, may_spill, plan, 0, 0), may_spill, "a socket's share of the weights")
    except InfeasibleError as exc:
        return str(exc)
    return None


def check_weights_fit(s: PointSetup, place: MemoryPlacer, prefill_place: MemoryPlacer | None = None) -> None:
    """Refuse a model whose weights alone do not fit a decode socket (or, disaggregated, a prefill
    socket) under the point's plans, blaming the model or the plan rather than the batch or the
    prompt. It needs no graph, so ``check`` refuses what ``run`` refuses here.

    Raises
    ------
    InfeasibleError
        Naming the :class:`PointSetup` field ``model`` (decode) or ``prefill_plan``.
    """
    why = weights_alone_exceed(s.may_spill, place, s.decode_plan)
    if why is not None:
        raise InfeasibleError(f"the model does not fit on the decode node at tp={s.decode_plan.tp}, whatever the "
                              f"batch and prompt: {why}; {_more_sockets(s.decode_plan, s.node, 'decode')}, a "
                              "narrower weight_dtype or a smaller model", field="model")
    if s.mode == "disaggregated" and \
            (why := weights_alone_exceed(s.may_spill, prefill_place or place, s.prefill_plan)) is not None:
        prefill_node = s.prefill_node if s.prefill_node is not None else s.node
        raise InfeasibleError(f"the model does not fit on a prefill node at tp={s.prefill_plan.tp}, whatever the "
                              f"prompt: {why}; {_more_sockets(s.prefill_plan, prefill_node, 'prefill')}, a "
                              "narrower weight_dtype or a smaller model", field="prefill_plan")


def _more_sockets(plan: ParallelPlan, node: NodeSpec, phase: str) -> str:
    """The hint to spread the weights over more sockets: a wider plan while the phase's node has
    sockets to spare, else a node with more (a plan wider than its node is refused)."""
    if plan.sockets < node.sockets:
        return f"use more sockets (parallel.{phase}.tp, up to the {node.sockets} of {node.name})"
    field = "prefill_hardware" if phase == "prefill" else "hardware"
    return f"a {phase} node with more sockets than {node.name}'s {node.sockets} (the experiment's {field})"


#: the uses of memory, in the order messages list them, and how they read in a sentence
_USE_NAMES = {"weights": "weights", "kv": "KV", "activations": "activations"}


def spilled_uses(placement: MemoryPlacement, may_spill: tuple[str, ...]) -> dict[str, int]:
    """Bytes of the uses not in ``may_spill`` that ``placement`` put outside its first tier."""
    kept = [use for use in _USE_NAMES if use not in may_spill]
    return {use: n for use, n in sorted(placement.outside(placement.first_tier).items()) if use in kept}


def place_socket(place: MemoryPlacer, may_spill: tuple[str, ...], plan: Any, kv: int, activations: int,
                 kv_offload: dict[str, int] | None = None) -> MemoryPlacement:
    """One socket's placement by ``place``, in its default priority (activations first, the most
    used); when that pushes a use that must stay in the first tier (not in ``may_spill``) out of it,
    as the activations of a long prompt do, the uses that must stay are placed first and those that
    may spill after them. ``run`` and ``map`` place memory this way.

    When even that leaves a kept use outside the first tier, that placement is the one returned
    (and refused): the weights first, then the kept uses that grow with the prompt or the batch,
    so that the refusal names as spilling what is over the tier once every use that may spill
    has left it, never the weights for a long prompt's activations (the default order put the
    activations first and said "weights 26.10 GiB would spill" of a 1M-token prefill)."""
    extra = {"kv_offload": kv_offload} if kv_offload else {}
    placement = _placed_or_refused(place, may_spill, plan, kv, activations, **extra)
    if spilled_uses(placement, may_spill):
        kept = sorted((use for use in PLACEMENT_PRIORITY if use not in may_spill),
                      key=lambda use: (use != "weights", PLACEMENT_PRIORITY.index(use)))
        return _placed_or_refused(place, may_spill, plan, kv, activations, **extra,
                                  priority=tuple(kept + [use for use in PLACEMENT_PRIORITY if use not in kept]))
    return placement


def _placed_or_refused(place: MemoryPlacer, may_spill: tuple[str, ...], *args: Any, **kwargs: Any) -> MemoryPlacement:
    """``place(...)``, or the fill that overflowed every tier when a use that must stay in the first
    tier left it: the caller refuses it by the shortfall over that tier (a batch overflowing DDR too
    was said to exceed the DDR, by an amount no DDR would cure, its KV being barred from DDR)."""
    try:
        return place(*args, **kwargs)
    except TiersOverflow as exc:
        if not spilled_uses(exc.placement, may_spill):
            raise
        return exc.placement
