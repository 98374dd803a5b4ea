"""What one node serving several models is given and what it records: each model's costs
(:class:`ModelCosts`), the node's two tiers and the copy bandwidth between them (:class:`NodeMemory`,
:func:`copy_bytes_per_s`), and the run's outcome (:class:`Switch`, :class:`MultiModelRun`).

The scheduler that uses them is :mod:`sn40l_sim.serving.multi_model`; these are kept apart so that
the report and study layers can read a run without the scheduler's internals.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sn40l_sim.serving.serving_log import RequestLog
from sn40l_sim.serving.setup import no_cycles
from sn40l_sim.serving.step_table import StepTable


@dataclass(frozen=True)
class ModelCosts:
    """One model as the node serves it (cycles, tokens, node-total bytes).

    Attributes
    ----------
    name : str
    slots : int
        Compiled decode batch.
    decode_step_cycles : int
    prefill_cycles : callable
        ``prompt_len -> cycles`` of one prefill.
    cache_tokens : callable
        ``(prompt_len, generated) -> tokens`` cached (the KV policy's ``cache_len``).
    kv_bytes_per_token : int
        KV bytes per cached token.
    slot_cache_tokens : int
        Tokens a slot reserves.
    weight_bytes : int
        The model's weights (copied in on a switch; always kept in the slow tier).
    fast_bytes : int
        What the model holds in the fast tier while resident: weights, the KV its slots reserve and
        its activations.
    slow_bytes : int
        What the model keeps in the slow tier beside its weights, resident or not: a KV policy's
        store placed there (ArkVale's offloaded pages), KV its placement spilled there.
    decode_switch_cycles : int
        Configuration loads of a decode step run after another graph (another model's, or this
        model's prefill; :attr:`~sn40l_sim.engine.phase.PhaseTiming.switch_load_cycles`).
    prefill_switch_cycles : callable
        ``prompt_len ->`` the same of a prefill (none by default).
    prefill_pair_switch_cycles : callable or None
        ``(prompt_len before, prompt_len) ->`` configuration loads of this model's prefill right
        after its prefill of another prompt (another compiled graph: its kernels may have taken
        some of this one's units; :mod:`sn40l_sim.serving.prefill_pairs`); None: nothing.
    """

    name: str
    slots: int
    decode_step_cycles: int
    prefill_cycles: Callable[[int], int]
    cache_tokens: Callable[[int, int], int]
    kv_bytes_per_token: int
    slot_cache_tokens: int
    weight_bytes: int
    fast_bytes: int
    slow_bytes: int = 0
    decode_switch_cycles: int = 0
    prefill_switch_cycles: Callable[[int], int] = no_cycles
    prefill_pair_switch_cycles: Callable[[int, int], int] | None = None

    def switch_cycles(self, graph: str, prompt_len: int = 0, after: int | None = None) -> int:
        """Configuration loads of ``graph`` (``"prefill"`` or ``"decode"``) run after another graph;
        ``after``: the prompt length of this model's prefill run just before (another prompt's)."""
        if graph == "decode":
            return self.decode_switch_cycles
        if after is not None:
            pair = self.prefill_pair_switch_cycles
            return pair(after, prompt_len) if pair is not None else 0
        return self.prefill_switch_cycles(prompt_len)

    @property
    def kv_capacity_bytes(self) -> int:
        """KV bytes the slots reserve (what :func:`sn40l_sim.report.metrics.kv_occupancy` reads)."""
        return self.slots * self.slot_cache_tokens * self.kv_bytes_per_token


@dataclass(frozen=True)
class NodeMemory:
    """The node's two tiers for models (usable bytes, node totals) and the copy bandwidth between them."""

    fast_bytes: int
    slow_bytes: int
    copy_bytes_per_cycle: float


def copy_bytes_per_s(socket: object, source: str, target: str) -> float:
    """Achievable bytes/s of one socket copying from tier ``source`` to tier ``target``: the slower
    of the two tiers' peak bandwidth times its efficiency (a copy reads one and writes the other).

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> socket = load_hardware("hw_configs/sn40l_node16.yaml").socket
    >>> round(copy_bytes_per_s(socket, "ddr", "hbm") / 1e9, 1)
    80.0
    """
    def achievable(tier: str) -> float:
        spec = socket.memory[tier]
        return spec.units_per_die * socket.dies * spec.bytes_per_s_per_unit * spec.efficiency

    return min(achievable(source), achievable(target))


@dataclass(frozen=True)
class Switch:
    """One change of the model the node runs: when, to which model, the bytes copied in (0 when it
    was resident or prewarmed) and the cycles the node waited for them."""

    cycle: int
    model: int
    copied_bytes: int
    waited_cycles: int


@dataclass
class MultiModelRun:
    """The outcome of :func:`~sn40l_sim.serving.multi_model.simulate_models`."""

    models: list[ModelCosts]
    policy: str
    #: request logs by request id; ``model_of[id]`` is the model each asked for
    requests: list[RequestLog]
    model_of: list[int]
    #: decode steps by model
    steps: list[StepTable]
    switches_log: list[Switch]
    end_cycle: int
    #: per model: cycles of prefill and of decode steps
    prefill_busy: list[int]
    decode_busy: list[int]
    #: most bytes the fast and slow tiers held at once (resident models; every weight, every model's
    #: slow-tier bytes and the written-back KV)
    peak_fast_bytes: int = 0
    peak_slow_bytes: int = 0
    #: bytes copied in and written back, over the run
    copied_bytes: int = 0
    written_back_bytes: int = 0
    loads: list[int] = field(default_factory=list)
    #: cycles of configuration loads where the node ran another graph than the one before
    graph_switch_cycles: int = 0
    #: each of those loads: ``(model, start, end, graph)``, ``graph`` that model's next
    graph_switches: list[tuple[int, int, int, str]] = field(default_factory=list)

    @property
    def switches(self) -> int:
        return len(self.switches_log)

    @property
    def switch_cycles(self) -> int:
        """Cycles the node waited for copies instead of computing."""
        return sum(s.waited_cycles for s in self.switches_log)


__all__ = ["ModelCosts", "MultiModelRun", "NodeMemory", "Switch", "copy_bytes_per_s"]
