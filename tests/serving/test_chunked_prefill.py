"""Chunked prefill on co-located nodes (serving/chunked_prefill.py): a chunk as long as the prompts
is today's schedule exactly; smaller chunks lower the decode steps' wait for prefill (TPOT p99) at
the price of prefill cycles; every request finishes once within the slots' KV."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sn40l_sim.report.metrics import latencies
from sn40l_sim.serving.chunked_prefill import chunk_timings
from sn40l_sim.serving.loop import ServingSetup, simulate
from sn40l_sim.serving.workload import Request

SETUP = ServingSetup(mode="colocated", prefill_nodes=0, decode_nodes=2, slots=8, decode_step_cycles=100,
                     # a fixed cost per prefill call (the graph's set-up), so that chunks cost more, and
                     # attention of a cycle per 32 (query, key) pairs: a later chunk's queries meet
                     # the earlier chunks' keys too
                     prefill_cycles=lambda p: 3000 + 2 * p + p * p // 64, transfer_cycles=lambda p: 0,
                     cache_tokens=lambda p, g: p + g, kv_bytes_per_token=1, slot_cache_tokens=2200,
                     prefill_chunk_cycles=lambda s, n: 3000 + 2 * n + (n * n + 2 * s * n) // 64)


def requests(n=120, seed=0):
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(5000, size=n)).astype(int)
    return [Request(i, int(arrivals[i]), int(rng.integers(200, 2048)), int(rng.integers(1, 120))) for i in range(n)]


@pytest.mark.parametrize("seed, switch", [(0, 0), (1, 0), (0, 30)])
def test_a_chunk_as_long_as_the_prompts_is_the_unchunked_schedule(seed, switch):
    # with graph switches the prefill starts after its switch's loads either way (a chunked one
    # started before them)
    reqs = requests(seed=seed)
    setup = replace(SETUP, decode_switch_cycles=switch // 4, prefill_switch_cycles=lambda p: switch)
    whole, chunked = simulate(reqs, setup), simulate(reqs, replace(setup, prefill_chunk=10**9))
    assert [(r.prefill_start, r.first_token, r.token_cycles) for r in whole.requests] == \
        [(r.prefill_start, r.first_token, r.token_cycles) for r in chunked.requests]
    assert whole.steps == chunked.steps and whole.busy == chunked.busy and whole.end_cycle == chunked.end_cycle


def test_smaller_chunks_lower_the_tpot_tail_at_a_prefill_cost():
    reqs = requests()
    runs = {chunk: simulate(reqs, replace(SETUP, prefill_chunk=chunk)) for chunk in (10**9, 512, 256, 128)}
    stats = {c: latencies(log, 1.0) for c, log in runs.items()}
    tpot_p99 = {c: s["tpot_s"]["p99"] for c, s in stats.items()}
    prefill = {c: sum(log.busy["colocated_prefill"]) for c, log in runs.items()}
    # a decode step waits for at most one chunk: the tail falls (the p99 of 120 requests is not
    # monotone in the chunk, so the chunks are compared with whole prompts)
    assert tpot_p99[128] < tpot_p99[256] < tpot_p99[10**9] and tpot_p99[512] < tpot_p99[10**9]
    # the price: every chunk pays the call's fixed cost, and first tokens come later
    assert prefill[10**9] < prefill[512] < prefill[256] < prefill[128]
    assert stats[10**9]["ttft_s"]["mean"] < stats[512]["ttft_s"]["mean"] < stats[128]["ttft_s"]["mean"]
    for log in runs.values():
        assert sorted(r.request.id for r in log.requests) == list(range(len(reqs)))
        assert all(len(r.token_cycles) == r.request.output_len and r.finish == r.token_cycles[-1]
                   for r in log.requests)
        assert all(s.kv_bytes <= SETUP.kv_capacity_bytes and s.slots_in_use <= SETUP.slots for s in log.steps)


def test_a_chunk_after_decode_steps_loads_its_own_graphs_configurations():
    # a graph of at most 256 rows keeps few configurations (7 cycles to load again), a longer one
    # many (1,000): with 256-token chunks every switch to prefill runs a graph of at most 256 rows,
    # so the schedule is the one where every switch costs 7; charged by the prompt's length, the
    # chunks of the longer prompts paid the whole prompt's graph's loads
    reqs = requests()
    chunked = replace(SETUP, prefill_chunk=256, decode_switch_cycles=3)
    by_rows = simulate(reqs, replace(chunked, prefill_switch_cycles=lambda rows: 7 if rows <= 256 else 1000))
    small = simulate(reqs, replace(chunked, prefill_switch_cycles=lambda rows: 7))
    assert any(r.prompt_len > 256 for r in reqs) and sum(by_rows.busy["graph_switch"]) > 0
    assert by_rows.busy == small.busy and by_rows.steps == small.steps
    assert [r.token_cycles for r in by_rows.requests] == [r.token_cycles for r in small.requests]


def test_a_chunk_without_the_policys_kernels_loads_that_graphs_configurations():
    # where a chunk's graph runs without the KV policy's kernels (they select once, after the last
    # chunk), its switch loads that graph's configurations, not the whole prompt graph's: with 7
    # cycles for the part graph and 1,000 for the whole one, the schedule is the one where every
    # switch to prefill costs 7 (every prompt longer than a chunk: a whole prompt in one chunk runs
    # the whole prompt's graph, the next test)
    reqs = [replace(r, prompt_len=max(r.prompt_len, 257)) for r in requests()]
    chunked = replace(SETUP, prefill_chunk=256, decode_switch_cycles=3)
    apart = simulate(reqs, replace(chunked, prefill_switch_cycles=lambda rows: 1000,
                                   prefill_part_switch_cycles=lambda rows: 7))
    small = simulate(reqs, replace(chunked, prefill_switch_cycles=lambda rows: 7))
    assert sum(apart.busy["graph_switch"]) > 0
    assert apart.busy == small.busy and apart.steps == small.steps
    # and without a graph of its own for the parts, a chunk pays the graph of its rows, as before
    whole = simulate(reqs, replace(chunked, prefill_switch_cycles=lambda rows: 1000))
    assert sum(whole.busy["graph_switch"]) > sum(apart.busy["graph_switch"])


def test_a_later_chunk_after_a_decode_step_loads_its_own_graphs_configurations():
    # a later chunk runs a graph of its own, mapped for its attention over the earlier tokens, and
    # what it loads again after a decode step is that graph's: 7 cycles plus one per earlier token
    # here. Charged by its rows alone it paid the first chunk's graph's 7 (Llama-3.1-70B's last
    # 1,024-token chunk of an 8K prompt reloads 845,491 cycles, the first chunk's graph 842,566)
    reqs = [Request(0, 0, 10, 100), Request(1, 5000, 1000, 2)]   # the second while the first decodes
    setup = replace(SETUP, decode_nodes=1, prefill_chunk=256, decode_switch_cycles=3,
                    prefill_switch_cycles=lambda rows: 1000, prefill_part_switch_cycles=lambda rows: 7,
                    prefill_chunk_switch_cycles=lambda earlier, rows: 7 + earlier)
    loads = [end - start for _, start, end, graph in simulate(reqs, setup).switches if graph == "prefill"]
    assert loads == [7, 7 + 256, 7 + 512, 7 + 768]
    # between the multiples of the chunk it is read as the chunk's cycles are, linear between them
    timings = chunk_timings(lambda n, e: 100 + n + e, lambda p: 100 + p, 4, policy_apart=False, prompt_len=16,
                            switch=lambda n, e: 7 + e * e)
    assert [timings["prefill_chunk_switch_cycles"](e, 4) for e in (4, 6, 8)] == [23, 47, 71]


def test_a_chunk_as_long_as_the_prompts_is_the_unchunked_schedule_with_the_policys_kernels_apart():
    # with a compressing policy's kernels apart (they select once, over the whole prompt) a chunk
    # that is the whole prompt runs the whole prompt's graph, kernels included (chunk_cycles), so
    # its switch loads that graph's configurations (30 cycles), not those of the graph without
    # them (7): a chunk longer than every prompt is the unchunked schedule, switches included
    reqs = requests()
    setup = replace(SETUP, decode_switch_cycles=3, prefill_switch_cycles=lambda rows: 30,
                    prefill_part_switch_cycles=lambda rows: 7, prefill_policy_cycles=lambda p: p // 8)
    whole, chunked = simulate(reqs, setup), simulate(reqs, replace(setup, prefill_chunk=10**9))
    assert sum(whole.busy["graph_switch"]) > 0
    assert [(r.prefill_start, r.first_token, r.token_cycles) for r in whole.requests] == \
        [(r.prefill_start, r.first_token, r.token_cycles) for r in chunked.requests]
    assert whole.steps == chunked.steps and whole.busy == chunked.busy and whole.end_cycle == chunked.end_cycle


def test_the_policys_kernels_never_take_negative_cycles():
    # the KV policy's prefill kernels cost what they add to the whole prompt's prefill; where the
    # mapper times the chunk graph without them slower than the whole prompt with them (another
    # plan), they add nothing, rather than making the last chunk cheaper than its own graph
    slower_alone = chunk_timings(lambda n, e: 100 + n + e + 9, lambda p: 100 + p + 7, 4, policy_apart=True,
                                 prompt_len=8)
    assert slower_alone["prefill_policy_cycles"](8) == 0


def test_a_whole_prompt_on_a_chunking_node_is_timed_with_its_own_activations():
    # A co-located node that chunks holds one chunk's activations, not a whole prompt's; the whole
    # prompt's prefill (prefill_s, and the baseline of prefill_overhead_fraction) was timed on that
    # placement, its activations all read from HBM where the node has room for a chunk's only:
    # DeepSeek-R1's 1M-token prompt in 128K chunks on a 16-socket node reported 304.2 s prefilled
    # whole, against the 416.4 s the same node without chunks takes (26 GiB of its activations in DDR)
    from functools import partial

    from sn40l_sim.hardware.loader import load_hardware
    from sn40l_sim.ir import ParallelPlan
    from sn40l_sim.kvcache import make_policy
    from sn40l_sim.mapper import place_memory
    from sn40l_sim.models.loader import load_model
    from sn40l_sim.serving.fixed_costs import FixedStepCosts
    from sn40l_sim.serving.point import PointSetup, simulate_point

    class Costs(FixedStepCosts):   # activations of 1 MiB a prompt token; remembers each prefill's placement
        placed: dict = {}

        def prefill_activation_bytes(self, prompt_len):
            return prompt_len * 2**20

        def prefill(self, prompt_len, memory=None, earlier=0):
            self.placed[prompt_len, earlier] = memory
            return super().prefill(prompt_len, memory, earlier)

    node, llama = load_hardware("hw_configs/sn40l_node8.yaml"), load_model("graphs/llama3_1_8b.yaml")
    s = PointSetup("full", node, llama, make_policy("full"), prompt_len=65536, mode="colocated", prefill_nodes=0,
                   prefill_plan=ParallelPlan(tp=8), decode_plan=ParallelPlan(tp=8, attention_dp=8), batch=1,
                   batch_sizes=(1,), prefill_lens=(4096, 65536), max_new_tokens=4, prefill_chunk=4096)
    costs = Costs()
    result = simulate_point(s, lambda slots: [Request(0, 0, 65536, 4)], costs, partial(place_memory, node, llama))
    gib = 2**30
    # the node holds one 4K chunk's 4 GiB in HBM; the whole prompt's 64 GiB do not fit there
    assert result.memory.total("activations") == 4 * gib
    whole = costs.placed[65536, 0]
    assert whole.total("activations") == 64 * gib
    assert whole.by_tier["ddr"]["activations"] > 0
    # the chunks are timed where the node keeps them
    assert all(costs.placed[key] is result.memory for key in costs.placed if key[0] == 4096)
    # a whole prompt no tier can hold is timed there too, not refused: the node runs chunks only
    costs = Costs()
    costs.prefill_activation_bytes = lambda rows: rows * 2**20 if rows <= 4096 else 2**60
    result = simulate_point(s, lambda slots: [Request(0, 0, 65536, 4)], costs, partial(place_memory, node, llama))
    assert costs.placed[65536, 0] is result.memory


def test_a_chunk_right_after_the_chunk_before_it_loads_what_that_graph_took():
    # with nothing decoding, a prompt's chunks run back to back: each chunk's graph (its own
    # attention over the earlier chunks' keys) runs right after the previous chunk's, whose kernels
    # took some of its units, and loads those first (the pair's reload, serving/prefill_pairs.py;
    # docs/architecture.md, serving: "A co-located node that switches graphs"); it was charged
    # nothing. A chunk after a decode step loads as before.
    from sn40l_sim.serving.setup import PrefillRun
    asked = []

    def pair(before, run):
        asked.append((before, run))
        return 11 + run.earlier // 256

    setup = replace(SETUP, decode_nodes=1, prefill_chunk=256, decode_switch_cycles=3,
                    prefill_part_switch_cycles=lambda rows: 7, prefill_chunk_switch_cycles=lambda earlier, rows: 7,
                    prefill_pair_switch_cycles=pair)
    for stepwise in (True, False):
        asked.clear()
        log = simulate([Request(0, 0, 1000, 1)], setup, stepwise=stepwise)
        assert [end - start for _, start, end, _ in log.switches] == [12, 13, 14]
        assert log.busy["graph_switch"] == [12 + 13 + 14]
        assert asked == [(PrefillRun(256, 0, True), PrefillRun(256, 256, True)),
                         (PrefillRun(256, 256, True), PrefillRun(256, 512, True)),
                         (PrefillRun(256, 512, True), PrefillRun(232, 768, True))]
    # while the first request decodes, the second's chunks each follow a decode step
    log = simulate([Request(0, 0, 10, 100), Request(1, 5000, 1000, 2)], setup)
    assert [end - start for _, start, end, graph in log.switches if graph == "prefill"] == [7, 7, 7, 7]
