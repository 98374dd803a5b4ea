"""The served metrics of small workloads worked out by hand (docs/architecture.md, serving/: what
TTFT, TPOT, end-to-end latency, queueing, throughput and the percentiles count; one cycle a millisecond, so seconds are cycles
over 1,000).

One prefill node (a cycle per prompt token), a transfer of 5 cycles, decode steps of 10:

* R0 (t=0, 100 tokens, 3 out): prefill 0-100, cache sent 100-105, steps 105-115-125;
* R1 (t=0, 100 tokens, 2 out): prefill 100-200, sent 200-205, step 205-215;
* R2 (t=50, arrives while R0 prefills; 50 tokens, 4 out): waits for the prefill node until 200,
  prefill 200-250, sent 250-255, steps 255-265-275-285.
"""
from __future__ import annotations

import pytest

from sn40l_sim.report.metrics import latencies, node_utilisation, throughput
from sn40l_sim.report.slo import SLO, LatencyTarget, served_slo_fields
from sn40l_sim.serving.loop import ServingSetup, simulate
from sn40l_sim.serving.speculation import Speculation
from sn40l_sim.serving.workload import Request

CLOCK_HZ = 1000.0


def setup(**changes) -> ServingSetup:
    options = dict(mode="disaggregated", prefill_nodes=1, decode_nodes=1, slots=2, decode_step_cycles=10,
                   prefill_cycles=lambda p: p, transfer_cycles=lambda p: 5, cache_tokens=lambda p, g: p + g,
                   kv_bytes_per_token=1, slot_cache_tokens=1000)
    return ServingSetup(**{**options, **changes})


REQUESTS = [Request(0, 0, 100, 3), Request(1, 0, 100, 2), Request(2, 50, 50, 4)]


def test_ttft_tpot_itl_and_throughput_by_hand():
    log = simulate(REQUESTS, setup())
    assert [r.token_cycles for r in log.requests] == [[100, 115, 125], [200, 215], [250, 265, 275, 285]]
    lat = latencies(log, CLOCK_HZ)
    # TTFT: arrival to the end of prefill, R2's wait for the prefill node included
    assert lat["ttft_s"]["mean"] == pytest.approx((0.100 + 0.200 + 0.200) / 3)
    # TPOT: (last - first) / (tokens - 1), the transfer and the wait for a step included
    tpot = [0.025 / 2, 0.015 / 1, 0.035 / 3]
    assert lat["tpot_s"]["mean"] == pytest.approx(sum(tpot) / 3)
    # percentiles interpolate between the nearest ranks: sorted 11.67, 12.5, 15 ms; p90 at rank 1.8
    assert lat["tpot_s"]["p50"] == pytest.approx(0.0125)
    assert lat["tpot_s"]["p90"] == pytest.approx(0.0125 + 0.8 * (0.015 - 0.0125))
    assert lat["itl_s"]["count"] == 2 + 1 + 3
    # throughput: every output token (the first ones too) over first arrival to last token
    served = throughput(log, CLOCK_HZ)
    assert served["makespan_s"] == pytest.approx(0.285)
    assert served["output_tokens"] == 9
    assert served["output_tokens_per_s"] == pytest.approx(9 / 0.285)
    assert served["requests_per_s"] == pytest.approx(3 / 0.285)
    # decode tokens over decode-step time: one sequence per step here, a token per 10 ms
    assert served["decode_steps"] == 6 and served["decode_tokens_per_s_observed"] == pytest.approx(100.0)


def test_end_to_end_latency_and_queueing_by_hand():
    lat = latencies(simulate(REQUESTS, setup()), CLOCK_HZ)
    # arrival to the last token: 125, 215 and 285 - 50 ms
    assert lat["e2e_s"]["mean"] == pytest.approx((0.125 + 0.215 + 0.235) / 3)
    assert lat["e2e_s"]["max"] == pytest.approx(0.235)
    # arrival to the start of the prefill: R1 waits for R0's, R2 for R1's (arrived at 50 ms, starts at 200)
    assert lat["queue_s"]["mean"] == pytest.approx((0.0 + 0.100 + 0.150) / 3)
    # co-located, two slots, prefill before decode: R0 prefills 0-100, R1 100-200, one step
    # 200-210 (R1 done), then R2, waiting since 50 with no free slot, prefills 210-260
    colocated = latencies(simulate(REQUESTS, setup(mode="colocated")), CLOCK_HZ)
    assert colocated["queue_s"]["max"] == pytest.approx(0.160)


def test_an_slo_percentile_is_interpolated_as_the_latency_percentiles_are():
    log = simulate(REQUESTS, setup())
    slo = SLO(ttft=LatencyTarget(max_s=0.15, percentile=50), tpot=LatencyTarget(max_s=0.0125, percentile=90))
    fields = served_slo_fields(log, CLOCK_HZ, slo)
    lat = latencies(log, CLOCK_HZ)
    assert fields["slo"]["ttft_at_percentile_s"] == lat["ttft_s"]["p50"] == pytest.approx(0.2)
    assert fields["slo"]["tpot_at_percentile_s"] == lat["tpot_s"]["p90"]
    # only R0 meets both (TTFT 100 ms, TPOT 12.5 ms): goodput over the same makespan
    assert fields["slo"]["attainment"] == pytest.approx(1 / 3)
    assert fields["goodput_requests_per_s"] == pytest.approx(1 / 0.285)
    assert fields["goodput_tokens_per_s"] == pytest.approx(3 / 0.285)


def test_accepted_drafts_count_once_and_rejected_ones_never():
    # two drafts always accepted: a step gives 3 tokens, the last one capped at what is left.
    # R0 (7 out): steps 105-115 and 115-125 give 3 + 3; R1 (4 out): step 205-215 gives 3;
    # R2 (1 out): its prefill's token only, no step
    requests = [Request(0, 0, 100, 7), Request(1, 0, 100, 4), Request(2, 0, 10, 1)]
    log = simulate(requests, setup(speculation=Speculation(2, 1.0)))
    assert [r.token_cycles for r in log.requests] == [[100] + [115] * 3 + [125] * 3, [200] + [215] * 3, [210]]
    served = throughput(log, CLOCK_HZ)
    assert served["output_tokens"] == 7 + 4 + 1
    assert sum(step.tokens for step in log.steps) == 6 + 3   # the tokens after each first
    assert served["decode_tokens_per_s_observed"] == pytest.approx(9 / 0.030)
    lat = latencies(log, CLOCK_HZ)
    # R0: 25 ms over its 6 tokens after the first, R1: 15 ms over 3 (R2 has no TPOT)
    assert lat["tpot_s"]["count"] == 2 and lat["tpot_s"]["mean"] == pytest.approx((0.025 / 6 + 0.015 / 3) / 2)
    # with no draft accepted the same requests take a step per token
    none = simulate(requests, setup(speculation=Speculation(2, 0.0)))
    assert throughput(none, CLOCK_HZ)["output_tokens"] == 12 and len(none.steps) == 6 + 3


def test_mean_active_slots_is_the_decode_tokens_over_the_steps():
    # without drafts each token after a request's first comes from one decode step of its slot, so
    # the slots the steps ran add up to those tokens. R0 (10 tokens, 4 out): prefill 0-10, sent
    # 10-15, steps 15-25-35-45; R1 (8 tokens, 2 out): prefill 10-18, sent 18-23, joins the step
    # 25-35. Three steps ran 1, 2 and 1 slots
    requests = [Request(0, 0, 10, 4), Request(1, 0, 8, 2)]
    log = simulate(requests, setup())
    assert [r.token_cycles for r in log.requests] == [[10, 25, 35, 45], [18, 35]]
    served = throughput(log, CLOCK_HZ)
    assert served["decode_steps"] == 3
    assert served["mean_active_slots"] == pytest.approx((3 + 1) / 3)
    # the workload of the other tests never has two sequences in a step
    by_hand = throughput(simulate(REQUESTS, setup()), CLOCK_HZ)
    assert by_hand["mean_active_slots"] == pytest.approx((2 + 1 + 3) / 6)


def test_node_busy_fractions_are_of_the_span_from_the_first_arrival():
    # the workload of the other tests 1,000 cycles later: the run spans cycles 1000-1285, not 0-1285.
    # The prefill node is busy 100 + 100 + 50 cycles, the decode node 6 steps of 10, the link 3
    # transfers of 5
    later = [Request(r.id, r.arrival_cycle + 1000, r.prompt_len, r.output_len) for r in REQUESTS]
    busy = node_utilisation(simulate(later, setup()))
    assert busy["prefill"] == [pytest.approx(250 / 285)]
    assert busy["decode"] == [pytest.approx(60 / 285)]
    assert busy["link"] == [pytest.approx(15 / 285)]
