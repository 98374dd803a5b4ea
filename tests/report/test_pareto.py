"""Pareto fronts on hand-made records: dominance in each direction, ties, empty values, nested
columns, one and three objectives, a brute-force comparison, and which columns can be objectives."""
from __future__ import annotations

import csv
import io

import matplotlib.axes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sn40l_sim.errors import InputError
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.pareto import front_mask, objective_problem, pareto_front, pareto_plot
from sn40l_sim.report.results import to_csv


def rec(name, tokens, tpot, p99=None):
    return {"name": name, "decode_tokens_per_s": tokens, "tpot_s": tpot,
            "latency": {"tpot_s": {"p99": p99}}}


RECORDS = [rec("slow", 100.0, 0.010, 0.02), rec("mid", 300.0, 0.020, 0.03), rec("worse", 200.0, 0.030, 0.01),
           rec("fast", 900.0, 0.050, 0.09), rec("mid-again", 300.0, 0.020, 0.03), rec("empty", 999.0, None)]


def names(front):
    return [r["name"] for r in front]


def test_two_objectives_keep_the_trade_off_and_ties():
    front = pareto_front(RECORDS, {"decode_tokens_per_s": "max", "tpot_s": "min"})
    # worse: mid is faster and quicker; empty: no TPOT; the two equal records dominate neither other
    assert names(front) == ["slow", "mid", "fast", "mid-again"]
    assert front[0] is RECORDS[0]


def test_the_direction_of_each_objective_counts():
    assert names(pareto_front(RECORDS, {"decode_tokens_per_s": "min", "tpot_s": "min"})) == ["slow"]
    assert names(pareto_front(RECORDS, {"decode_tokens_per_s": "max", "tpot_s": "max"})) == ["fast"]
    assert names(pareto_front(RECORDS, {"decode_tokens_per_s": "max"})) == ["empty"]


def test_nested_columns_and_three_objectives():
    two = {"decode_tokens_per_s": "max", "latency.tpot_s.p99": "min"}
    # worse has the lowest p99 and beats slow on both; empty's p99 is missing
    assert names(pareto_front(RECORDS, two)) == ["mid", "worse", "fast", "mid-again"]
    three = {**two, "tpot_s": "min"}  # slow's mean TPOT is the best: back on the front
    assert names(pareto_front(RECORDS, three)) == ["slow", "mid", "worse", "fast", "mid-again"]
    assert pareto_front([], two) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=25),
       st.lists(st.sampled_from(["max", "min"]), min_size=3, max_size=3))
def test_front_mask_is_the_definition(rows, directions):
    values = np.array(rows, dtype=float)
    sign = [1 if d == "max" else -1 for d in directions]

    def dominates(a, b):
        better = [s * (x - y) for s, x, y in zip(sign, a, b, strict=True)]
        return all(d >= 0 for d in better) and any(d > 0 for d in better)

    expected = [not any(dominates(other, row) for other in rows) for row in rows]
    assert front_mask(values, directions).tolist() == expected


def test_which_columns_can_be_objectives():
    assert objective_problem("decode_tokens_per_s") is None
    assert objective_problem("latency.tpot_s.p99") is None
    assert objective_problem("memory.hbm.kv") is None
    assert objective_problem("tpot") == "tpot is not a declared results field"
    assert objective_problem("kv_policy") == "kv_policy is text, not a number"
    assert "several values" in objective_problem("latency.tpot_s")
    assert "several values" in objective_problem("memory")
    assert "sweep axis" in objective_problem("sweep.serving.batch")


def test_a_group_of_numbers_suggests_the_numbers_under_it_not_another_field():
    # latency.tpot_s suggested "tpot_s": another field (the step model's mean TPOT), not one of its
    # percentiles; the suggestions are the group's own numbers, each of which is an objective
    problem = objective_problem("latency.tpot_s")
    assert problem == ("latency.tpot_s holds several values; name one of them: latency.tpot_s.count, "
                       "latency.tpot_s.max, latency.tpot_s.mean, latency.tpot_s.p50, latency.tpot_s.p90, "
                       "latency.tpot_s.p99")
    suggested = objective_problem("slo").split(": ", 1)[1].split(" and ")[0].split(", ")
    assert suggested[0] == "slo.ttft_max_s" and all(objective_problem(c) is None for c in suggested)
    assert objective_problem("latency").endswith("latency.ttft_s.p99 and 24 more")
    # some of a mapping's key levels: a group too, not an undeclared field
    assert objective_problem("memory.hbm") == "memory.hbm holds several values; name one of them (e.g. memory.hbm.<use>)"
    assert objective_problem("memory.hbm.kv") is None and objective_problem("memory.hbmx.kv.extra") is not None


def test_the_front_is_the_one_recomputed_from_the_results_csv():
    # b's throughput exceeds a's past the 9 significant digits results.csv holds: the front kept b
    # alone, while the two rows of results.csv tie and a reader recomputing the front found both
    a = {"name": "a", "decode_tokens_per_s": 1234.56789, "tpot_s": 0.0125}
    b = {"name": "b", "decode_tokens_per_s": 1234.56789 * (1 + 1e-12), "tpot_s": 0.0125}
    c = {"name": "c", "decode_tokens_per_s": 1234.56789, "tpot_s": 0.0125 * (1 + 1e-6)}  # slower: off
    objectives = {"decode_tokens_per_s": "max", "tpot_s": "min"}
    rows = list(csv.DictReader(io.StringIO(to_csv([a, b, c]))))
    values = [(float(r["decode_tokens_per_s"]), -float(r["tpot_s"])) for r in rows]
    recomputed = [r["name"] for r, v in zip(rows, values, strict=True)
                  if not any(w[0] >= v[0] and w[1] >= v[1] and w != v for w in values)]
    assert recomputed == ["a", "b"] == names(pareto_front([a, b, c], objectives))
    # an infinite value is an empty cell of results.csv: left out, as an empty one is
    assert names(pareto_front([a, {**b, "tpot_s": float("-inf")}], objectives)) == ["a"]


def test_the_plot_draws_the_front_joined_and_the_dominated_apart(tmp_path, monkeypatch):
    drawn: dict[str, list] = {}

    def spy(kind, original):
        def draw(self, xs, ys, *args, **kwargs):
            drawn[kind] = [(x, y) for x, y in zip(xs, ys, strict=True) if np.isfinite(y)]
            return original(self, xs, ys, *args, **kwargs)
        return draw

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy("front", matplotlib.axes.Axes.plot))
    monkeypatch.setattr(matplotlib.axes.Axes, "scatter", spy("dominated", matplotlib.axes.Axes.scatter))
    out = pareto_plot(RECORDS, {"decode_tokens_per_s": "max", "tpot_s": "min"}, tmp_path / "p.png")
    assert out.stat().st_size > 0
    sx, sy = RESULTS.axis_label("decode_tokens_per_s")[1], RESULTS.axis_label("tpot_s")[1]
    # the front (slow, mid, mid-again, fast) joined in order of throughput; worse apart, and empty
    # (no TPOT) nowhere to be seen
    front = [(100, 0.010), (300, 0.020), (300, 0.020), (900, 0.050)]
    assert [x for x, _ in drawn["front"]] == pytest.approx([x * sx for x, _ in front])
    assert [y for _, y in drawn["front"]] == pytest.approx([y * sy for _, y in front])
    assert [x for x, _ in drawn["dominated"]] == pytest.approx([200 * sx])
    assert [y for _, y in drawn["dominated"]] == pytest.approx([0.030 * sy])


def test_a_front_of_three_objectives_is_not_drawn_as_a_curve_on_two(tmp_path, monkeypatch):
    # the front of three objectives, drawn on the first two, was joined by a line: a zig-zag through
    # points that look dominated on those two axes, read as a trade-off curve
    styles: list[tuple[str, str]] = []
    original = matplotlib.axes.Axes.plot

    def draw(self, xs, ys, fmt, **kwargs):
        styles.append((fmt, kwargs["label"]))
        return original(self, xs, ys, fmt, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", draw)
    two = {"decode_tokens_per_s": "max", "tpot_s": "min"}
    pareto_plot(RECORDS, two, tmp_path / "two.png")
    pareto_plot(RECORDS, {**two, "latency.tpot_s.p99": "min"}, tmp_path / "three.png")
    assert styles == [("-o", "Pareto front"), ("o", "Pareto front of all 3 objectives")]


def test_a_direction_other_than_max_or_min_is_refused():
    # "up" was read as "min": a Python caller's front came out upside down without a word
    runs = [{"decode_tokens_per_s": 100.0}, {"decode_tokens_per_s": 200.0}]
    with pytest.raises(InputError, match="objectives: expected 'max' or 'min' for each column, got 'up'"):
        pareto_front(runs, {"decode_tokens_per_s": "up"})
    assert pareto_front(runs, {"decode_tokens_per_s": "max"}) == runs[1:]
