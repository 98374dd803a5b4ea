"""The fluid network's array path (:mod:`sn40l_sim.engine.fluid_arrays`) gives what its per-flow
Python path gives: every completion cycle, every channel's busy cycles and bytes moved, the clock."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
import simpy

from sn40l_sim.engine import fluid, fluid_arrays
from sn40l_sim.engine.collectives import CollectiveModel, _Run
from sn40l_sim.engine.fluid import FluidNetwork
from sn40l_sim.engine.fluid_arrays import _subtract_repeatedly
from sn40l_sim.engine.links import LinkTable

ALWAYS, NEVER = 0, 10**9
CLOCK, BW, LAT, EFF = 1.6e9, 50e9, 93.75e-9, 0.54


def ring(p: int) -> LinkTable:
    return LinkTable(p, [(min(i, (i + 1) % p), max(i, (i + 1) % p), BW, LAT) for i in range(p)], CLOCK, EFF)


def line(p: int) -> LinkTable:
    """A chain: routes between its ends share the middle links."""
    return LinkTable(p, [(i, i + 1, BW, LAT) for i in range(p - 1)], CLOCK, EFF)


@pytest.fixture
def reallocations(monkeypatch):
    """Count the array path's reallocations (so a test knows which path it took)."""
    calls = []
    real = fluid_arrays.FlowArrays.reallocate

    def counted(self):
        calls.append(len(self.flows))
        real(self)

    monkeypatch.setattr(fluid_arrays.FlowArrays, "reallocate", counted)
    return calls


def random_network(seed: int, flows: int, threshold: int, monkeypatch) -> tuple:
    """Run ``flows`` random transfers (random multi-hop paths, caps, sizes and start times) over
    random channels with the array path above ``threshold`` flows; what every flow and channel saw."""
    monkeypatch.setattr(fluid, "ARRAY_FLOWS", threshold)
    rng = random.Random(seed)
    env = simpy.Environment()
    net = FluidNetwork(env)
    # round capacities make exact float arithmetic (and ties) common; random ones make rounding common
    chans = [net.channel(f"c{i}", rng.choice([10.0, 16.0, 3.0, rng.uniform(0.5, 40.0)])) for i in range(12)]
    ends = {}

    def user(i, start, path, n_bytes, cap):
        yield env.timeout(start)
        yield net.transfer(path, n_bytes, cap)
        ends[i] = env.now

    for i in range(flows):
        path = tuple(rng.sample(chans, rng.randint(1, 5)))
        if rng.random() < 0.05:
            path += (path[0],)  # a route crossing a channel twice counts twice, as in the Python path
        cap = rng.choice([math.inf, math.inf, rng.uniform(0.2, 8.0), 2.0])
        start = rng.choice([0, 0, rng.randint(0, 3000)])  # bursts of starts in one instant, and stragglers
        env.process(user(i, start, path, rng.choice([rng.randint(1, 60_000), 4096, 1000]), cap))
    env.run()
    return ends, [(ch.busy_cycles, ch.bytes_moved, ch.active) for ch in chans], env.now, net._generation


@pytest.mark.parametrize("seed", range(6))
def test_random_networks_complete_alike_on_both_paths(seed, monkeypatch, reallocations):
    python = random_network(seed, 150, NEVER, monkeypatch)
    assert not reallocations
    arrays = random_network(seed, 150, ALWAYS, monkeypatch)
    assert len(reallocations) > 20 and max(reallocations) > 50
    assert arrays == python
    # a threshold the flow count crosses both ways: flows move into the arrays and back out
    assert random_network(seed, 150, 40, monkeypatch) == python
    # residuals decremented in binade runs however few the subtractions
    monkeypatch.setattr(fluid_arrays, "_PLAIN_AREA", 0)
    assert random_network(seed, 150, ALWAYS, monkeypatch) == python


def _torus(rows: int, cols: int) -> LinkTable:
    pairs = set()
    for r in range(rows):
        for c in range(cols):
            a = r * cols + c
            for b in (r * cols + (c + 1) % cols, ((r + 1) % rows) * cols + c):
                pairs.add((min(a, b), max(a, b)))
    return LinkTable(rows * cols, [(a, b, BW, LAT) for a, b in sorted(pairs)], CLOCK, EFF)


def _collective(table: LinkTable, kind: str, n_bytes: int, algorithm: str, threshold: int, monkeypatch) -> tuple:
    monkeypatch.setattr(fluid, "ARRAY_FLOWS", threshold)
    model = CollectiveModel(table, 1.9e-6, sync_latency_s=3.2e-6, schedule=False)
    run = _Run(table, model.setup_s, model.sync_latency_s, model.dma_engines)
    model._issue(run, kind, n_bytes, table.sockets, algorithm)
    run.env.run()
    return run.env.now, [(ch.name, ch.busy_cycles, ch.bytes_moved) for ch in run.channels.values()]


@pytest.mark.parametrize("table,kind,n_bytes,algorithm", [
    (ring(12), "all_gather", 2**20, "direct"),
    (ring(12), "all_reduce", 3 * 2**16 + 7, "direct"),
    (ring(9), "all_to_all", 50_000, "ring"),
    (_torus(4, 4), "all_gather", 2**18, "direct"),
    (_torus(3, 4), "reduce_scatter", 2**20 + 3, "direct"),
    (line(10), "all_to_all", 2**20, "direct"),
    (line(8), "all_reduce", 2**16, "tree"),
])
def test_collectives_time_alike_on_both_paths(table, kind, n_bytes, algorithm, monkeypatch, reallocations):
    python = _collective(table, kind, n_bytes, algorithm, NEVER, monkeypatch)
    assert not reallocations
    assert _collective(table, kind, n_bytes, algorithm, ALWAYS, monkeypatch) == python
    assert reallocations
    assert _collective(table, kind, n_bytes, algorithm, 16, monkeypatch) == python
    monkeypatch.setattr(fluid_arrays, "_PLAIN_AREA", 0)
    assert _collective(table, kind, n_bytes, algorithm, ALWAYS, monkeypatch) == python


@pytest.mark.parametrize("rounds,plain_area", [(0, 0), (2, 0), (50, 0), (2, 6000)])
@pytest.mark.parametrize("seed", range(3))
def test_repeated_subtraction_rounds_each_time(seed, rounds, plain_area):
    # the shortcuts (runs within a binade, surely saturated channels) against the plain loop, on
    # round values (exact steps, ties), random ones, steps far below a value's spacing, signs, zero
    rng = random.Random(seed)
    for _ in range(400):
        values = [rng.choice([rng.uniform(0, 100), 10.0, 1.0, 1.5, 1.5 + 2.0**-52, 1.25, 3.0, 2.0**40, 1e20, 1e-300,
                              -rng.random(), 0.0]) for _ in range(8)]
        times = [rng.choice([rng.randint(1, 40), rng.randint(1, 700)]) for _ in values]
        # odd multiples of 2^-53 fall halfway between the spacings of [1, 2): ties broken by parity,
        # which alternates from an odd value (1.5 + 2^-52)
        step = rng.choice([rng.random(), 0.1, 1 / 3, 1.0, 2.0**-53, 3 * 2.0**-53, 5 * 2.0**-53, 1e-310, 0.0, math.inf,
                           values[0] / times[0], abs(values[1]) / times[1] * (1 + 1e-15)])
        below = [rng.choice([-math.inf, 1e-12 * abs(v), 1e-12, 5.0, v - n * step])  # the last: v - n step
                 for v, n in zip(values, times, strict=True)]                    # saturates, the loop may not
        got = _subtract_repeatedly(np.array(values), np.array(times), step, np.array(below), rounds, plain_area).tolist()
        for value, n, level, result in zip(values, times, below, got, strict=True):
            for _ in range(n):
                value -= step
            if value <= level:  # saturated: the value is never read again, only the verdict
                assert result <= level, (values, times, step)
            else:
                assert result == value or (math.isnan(result) and math.isnan(value)), (values, times, step)


@pytest.mark.parametrize("seed", range(4))
def test_rates_and_wake_ups_are_the_same_floats(seed, monkeypatch):
    # cycles absorb float noise (a flow ends at the next whole cycle), so compare the numbers
    # themselves: rates, the next wake-up and the bytes left after an advance, bit for bit
    rng = random.Random(seed)
    python_net = FluidNetwork(simpy.Environment())
    chans = [python_net.channel(f"c{i}", rng.choice([10.0, 3.0, rng.uniform(0.5, 40.0)])) for i in range(10)]
    for _ in range(200):
        path = tuple(rng.sample(chans, rng.randint(1, 4)))
        cap = rng.choice([math.inf, math.inf, rng.uniform(0.05, 3.0)])
        n_bytes = rng.randint(1, 10 ** rng.randint(1, 6))
        python_net._flows.append(fluid._Flow(path, n_bytes, rng.uniform(0.0, 1.0) * n_bytes + 40.0, cap, None))
    if seed % 2:
        monkeypatch.setattr(fluid_arrays, "_PLAIN_AREA", 0)
    arrays = fluid_arrays.FlowArrays(list(python_net._flows), fluid._DONE_REL, fluid._DONE_ABS)
    python_net._reallocate()
    arrays.reallocate()
    assert arrays.rate.tolist() == [f.rate for f in python_net._flows]
    assert arrays.soonest() == min(f.remaining / f.rate for f in python_net._flows)
    python_net.env.run(until=37)
    python_net._advance()
    arrays.advance(37)
    assert arrays.remaining.tolist() == [f.remaining for f in python_net._flows]
