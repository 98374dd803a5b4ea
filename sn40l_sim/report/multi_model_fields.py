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

from sn40l_sim.report.registry import Field
from sn40l_sim.report.table_rows import Row
from sn40l_sim.serving.loop import ServingLog, ServingSetup
from sn40l_sim.serving.multi_model_specs import MultiModelRun, NodeMemory

#: the ``multi_model`` group's declaration, listed with every other field by
#: :data:`sn40l_sim.report.fields.RESULTS` (produced by an experiment's multi_model: section; the
#: record's other served figures are those of its model's requests in that run)
MULTI_MODEL_FIELD = Field(
    "multi_model", "", "Several models on one node: the scheduler's run this record's model was served in "
    "(sn40l_sim/serving/multi_model.py); the switch figures are the node's, over all its models.",
    group="multi_model", parts=(
        Field("scheduler", "", "The scheduler policy: on_demand, batch_by_model or prewarm.",
              axis="scheduler", table=Row(300, "scheduler")),
        # the section's settings, which move this model's figures as much as its own inputs do
        # (compare names them when they differ)
        Field("models", "", "The models sharing the node, in the section's order: name=model (share of the "
              "requests, decode batch).", axis="models on the node"),
        Field("quantum_s", "s", "multi_model.quantum_s: the longest stay on a model while others wait "
              "(batch_by_model and prewarm).", axis="scheduling quantum"),
        Field("slow_tier", "", "The memory tier holding every model's weights (multi_model.weights_tier).",
              axis="weights tier"),
        Field("served_model", "", "The name the experiment gives this record's model.", axis="served model",
              table=Row(301, "served model")),
        Field("request_share", "1", "Fraction of the run's requests that asked for this model.",
              axis="share of requests", table=Row(302, "share of requests (%)", ".1f", 100)),
        Field("switches", "switches", "Times the node changed the model it runs (all models).",
              axis="model switches", table=Row(303, "model switches (node)")),
        Field("switches_to_model", "switches", "Times the node switched to this model.",
              axis="switches to this model"),
        Field("loads", "loads", "Times this model's weights were copied into the fast tier (prewarmed ones "
              "included).", axis="weight loads of this model"),
        Field("switch_time_s", "s", "Time the node waited for copies instead of computing (all models): "
              "weights and written-back KV over the copy bandwidth.", axis="time lost to switching",
              table=Row(304, "time lost to switching (s)", ".2f")),
        Field("switch_time_fraction", "1", "switch_time_s over the run (first arrival to last token).",
              axis="time lost to switching (fraction)",
              table=Row(305, "time lost to switching (%)", ".1f", 100)),
        Field("graph_switch_time_s", "s", "Time the node spent loading kernel configurations again where it ran "
              "another graph than the one before (another model's, or the other phase of one; all models), "
              "beside switch_time_s's copies.", axis="configuration reloads between graphs (s)"),
        Field("copied_bytes", "B", "Bytes copied into the fast tier over the run (all models).",
              axis="bytes copied in"),
        Field("written_back_bytes", "B", "KV bytes of evicted models' decoding sequences written back to the "
              "slow tier (all models).", axis="KV bytes written back"),
        Field("copy_bytes_per_s", "B/s", "The node's copy bandwidth from the slow tier to the fast one.",
              axis="copy bandwidth"),
        Field("weight_bytes", "B", "This model's weights, node total.", axis="model weights"),
        Field("fast_bytes", "B", "What this model holds in the fast tier while resident (weights, KV "
              "reserved, activations), node total.", axis="fast-tier footprint of the model"),
        Field("fast_capacity_bytes", "B", "The fast tier's usable bytes, node total.",
              axis="fast tier usable"),
        Field("peak_fast_bytes", "B", "Most bytes the resident models held in the fast tier at once.",
              axis="peak fast tier held",
              # the memory rows above them are this model's alone on the node; these two are the node's
              table=Row(306, "fast tier held at peak, all models (node, GiB)", ".1f", 2**-30)),
        Field("slow_capacity_bytes", "B", "The slow tier's usable bytes, node total.", axis="slow tier usable"),
        Field("peak_slow_bytes", "B", "Most bytes the slow tier held (every model's weights, the KV the "
              "models keep there, such as ArkVale's store, and the KV written back).", axis="peak slow tier held",
              table=Row(307, "slow tier held at peak, all models (node, GiB)", ".1f", 2**-30)),
    ))


def model_log(run: MultiModelRun, m: int) -> ServingLog:
    """The requests, steps and busy cycles of model ``m`` in ``run``, as a co-located node's
    :class:`~sn40l_sim.serving.loop.ServingLog` (its run starts and ends when the node's does)."""
    costs = run.models[m]
    setup = ServingSetup(mode="colocated", prefill_nodes=0, decode_nodes=1, slots=costs.slots,
                         decode_step_cycles=costs.decode_step_cycles, prefill_cycles=costs.prefill_cycles,
                         transfer_cycles=lambda prompt_len: 0, cache_tokens=costs.cache_tokens,
                         kv_bytes_per_token=costs.kv_bytes_per_token, slot_cache_tokens=costs.slot_cache_tokens)
    requests = [log for log in run.requests if run.model_of[log.request.id] == m]
    # the node's window, from its first arrival (any model's) to its end: a model whose first
    # request came later had its rates over a shorter window than the others' (405B's makespan
    # 5% shorter than 8B's in one batch_by_model run), so the models' rates did not add up
    return ServingLog(setup, requests, run.steps[m], run.end_cycle,
                      {"prefill": [], "decode": [run.decode_busy[m]], "link": [],
                       "colocated_prefill": [run.prefill_busy[m]]},
                      start_cycle=min(log.request.arrival_cycle for log in run.requests),
                      switches=sorted([(0, start, end, graph) for model, start, end, graph in run.graph_switches if model == m]
                                      + [(0, s.cycle, s.cycle + s.waited_cycles, "weights") for s in run.switches_log
                                         if s.model == m and s.waited_cycles]))


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
