"""The ``multi_model`` fields of a record: one model's view of a run of several models on one node
(:mod:`sn40l_sim.serving.multi_model`), and the sub-log of its requests that the other fields of
its record are computed from.

Examples
--------
>>> from sn40l_sim.serving.multi_model import ModelCosts, NodeMemory, simulate_models
>>> from sn40l_sim.serving.workload import Request
>>> a = ModelCosts("a", 1, 10, lambda p: 5, lambda p, g: p + g, 1, 20, 600, 700)
>>> b = ModelCosts("b", 1, 10, lambda p: 5, lambda p, g: p + g, 1, 20, 500, 600)
>>> memory = NodeMemory(1000, 10_000, 10.0)
>>> run = simulate_models([Request(0, 0, 4, 3), Request(1, 0, 4, 3)], [0, 1], [a, b], memory, "on_demand",
...                       quantum_cycles=1)
>>> fields = multi_model_fields(run, 1, memory, "b", clock_hz=10.0)["multi_model"]
>>> fields["switches"], fields["switches_to_model"], fields["request_share"], fields["switch_time_s"]
(6, 3, 0.5, 33.8)
"""
from __future__ import annotations

from typing import Any

from sn40l_sim.serving.loop import ServingLog, ServingSetup
from sn40l_sim.serving.multi_model_specs import MultiModelRun, NodeMemory


def model_log(run: MultiModelRun, m: int) -> ServingLog:
    """The requests, steps and busy cycles of model ``m`` in ``run``, as a co-located node's
    :class:`~sn40l_sim.serving.loop.ServingLog` (its run ends when the node's does)."""
    costs = run.models[m]
    setup = ServingSetup(mode="colocated", prefill_nodes=0, decode_nodes=1, slots=costs.slots,
                         decode_step_cycles=costs.decode_step_cycles, prefill_cycles=costs.prefill_cycles,
                         transfer_cycles=lambda prompt_len: 0, cache_tokens=costs.cache_tokens,
                         kv_bytes_per_token=costs.kv_bytes_per_token, slot_cache_tokens=costs.slot_cache_tokens)
    requests = [log for log in run.requests if run.model_of[log.request.id] == m]
    return ServingLog(setup, requests, run.steps[m], run.end_cycle,
                      {"prefill": [], "decode": [run.decode_busy[m]], "link": [],
                       "colocated_prefill": [run.prefill_busy[m]]})


def multi_model_fields(run: MultiModelRun, m: int, memory: NodeMemory, name: str, clock_hz: float
                       ) -> dict[str, Any]:
    """The ``multi_model`` group of the record of model ``m`` (named ``name`` in the experiment)."""
    start = min(log.request.arrival_cycle for log in run.requests)
    span = max(1, run.end_cycle - start)
    costs = run.models[m]
    return {"multi_model": {
        "scheduler": run.policy,
        "served_model": name,
        "request_share": sum(1 for x in run.model_of if x == m) / len(run.model_of),
        "switches": run.switches,
        "switches_to_model": sum(1 for s in run.switches_log if s.model == m),
        "loads": run.loads[m],
        "switch_time_s": run.switch_cycles / clock_hz,
        "switch_time_fraction": run.switch_cycles / span,
        "graph_switch_time_s": run.graph_switch_cycles / clock_hz,
        "copied_bytes": run.copied_bytes,
        "written_back_bytes": run.written_back_bytes,
        "copy_bytes_per_s": memory.copy_bytes_per_cycle * clock_hz,
        "weight_bytes": costs.weight_bytes,
        "fast_bytes": costs.fast_bytes,
        "fast_capacity_bytes": memory.fast_bytes,
        "peak_fast_bytes": run.peak_fast_bytes,
        "slow_capacity_bytes": memory.slow_bytes,
        "peak_slow_bytes": run.peak_slow_bytes,
    }}
