"""SLO attainment and goodput (sn40l_sim/report/slo.py): hand-checked numbers, the record's slo
group against the declaration, and the table rows that come with it."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_results import simulate  # noqa: E402

from sn40l_sim.report.fields import RESULTS  # noqa: E402
from sn40l_sim.report.records import build_record  # noqa: E402
from sn40l_sim.report.slo import SLO, LatencyTarget, request_latencies, slo_fields  # noqa: E402
from sn40l_sim.report.table import side_by_side  # noqa: E402


def test_attainment_goodput_and_percentiles_by_hand():
    ttft = [0.5, 1.5, 0.2, 0.9]
    tpot = [0.05, 0.05, 0.2, None]          # the last request has one token: no TPOT, meets the TPOT SLO
    slo = SLO(ttft=LatencyTarget(1.0, 50), tpot=LatencyTarget(0.1, 90))
    out = slo_fields(ttft, tpot, [10, 10, 10, 1], makespan_s=4.0, slo=slo)
    s = out["slo"]
    # requests 0 and 3 meet both; 1 misses TTFT, 2 misses TPOT
    assert s["attainment"] == 0.5 and s["ttft_attainment"] == 0.75 and s["tpot_attainment"] == 0.75
    assert out["goodput_requests_per_s"] == 0.5 and out["goodput_tokens_per_s"] == pytest.approx(11 / 4)
    assert s["ttft_at_percentile_s"] == pytest.approx(0.7)          # median of 0.2, 0.5, 0.9, 1.5
    assert s["tpot_at_percentile_s"] == pytest.approx(0.17)         # p90 of 0.05, 0.05, 0.2
    assert s["holds"] is False                                      # TTFT p50 holds, TPOT p90 does not
    loose = slo_fields(ttft, tpot, [10, 10, 10, 1], makespan_s=4.0, slo=SLO(tpot=LatencyTarget(0.25, 90)))
    assert loose["slo"]["holds"] is True and loose["slo"]["ttft_max_s"] is None and loose["slo"]["attainment"] == 1.0


def test_a_record_with_slos_carries_the_whole_group_and_the_percentile_rows():
    plain, result = simulate("full", {})
    slo = SLO(ttft=LatencyTarget(2.0, 90), tpot=LatencyTarget(0.5, 99))
    rec = build_record(result, experiment="demo", policy_params={}, extra_fields=("slo",), slo=slo)
    assert RESULTS.mismatches(rec) == []
    ttft, tpot, tokens = request_latencies(result.log, result.clock_hz)
    met = sum(a <= 2.0 and (b is None or b <= 0.5) for a, b in zip(ttft, tpot, strict=True))
    makespan = rec["throughput"]["makespan_s"]
    assert rec["slo"]["attainment"] == met / len(ttft)
    assert rec["goodput_requests_per_s"] == pytest.approx(met / makespan)
    assert rec["goodput_requests_per_s"] <= rec["throughput"]["requests_per_s"]
    assert rec["slo"]["ttft_at_percentile_s"] == pytest.approx(rec["latency"]["ttft_s"]["p90"])
    labels = [re.split(r"\s{2,}", line.strip())[0] for line in side_by_side([rec]).splitlines()]
    for label in ("TTFT p50 (s)", "TTFT p90 (s)", "TPOT p50 (ms)", "TPOT p90 (ms)", "SLO attainment (% of requests)",
                  "goodput requests/s (met every SLO)", "SLOs hold"):
        assert label in labels
    # without SLOs the table is as it was: no percentile rows beyond p99
    plain_labels = [re.split(r"\s{2,}", line.strip())[0] for line in side_by_side([plain]).splitlines()]
    assert "TTFT p50 (s)" not in plain_labels and "TTFT p99 (s)" in plain_labels


def test_the_slo_group_needs_the_slos():
    _, result = simulate("full", {})
    with pytest.raises(ValueError, match="needs the SLOs"):
        build_record(result, experiment="demo", policy_params={}, extra_fields=("slo",))
