"""Fluid bandwidth sharing: max-min fairness, caps, conservation, busy time within elapsed time."""
from __future__ import annotations

import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sn40l_sim.engine.fluid import Channel, FluidNetwork


def _run(starts, n_bytes, capacity, caps=None, paths=None, channels=1):
    env = simpy.Environment()
    net = FluidNetwork(env)
    chans = [net.channel(f"c{i}", capacity) for i in range(channels)]
    ends = {}

    def user(i):
        yield env.timeout(starts[i])
        path = tuple(chans[c] for c in (paths[i] if paths else (0,)))
        yield net.transfer(path, n_bytes[i], cap=(caps[i] if caps else math.inf))
        ends[i] = env.now

    for i in range(len(starts)):
        env.process(user(i))
    env.run()
    return env, chans, ends


def test_lone_transfer_takes_bytes_over_capacity_rounded_up():
    _, chans, ends = _run([0], [1001], 10.0)
    assert ends[0] == 101
    assert chans[0].busy_cycles == 101 and chans[0].bytes_moved == 1001


def test_a_lone_capped_transfer_moves_at_its_cap():
    # 1,000 bytes capped at 4 B/cycle through a channel of 10: 250 cycles, not the channel's 100
    _, chans, ends = _run([0], [1000], 10.0, caps=[4.0])
    assert ends[0] == 250 and chans[0].busy_cycles == 250
    assert FluidNetwork.lone_flow((Channel("c", 10.0),), 1000, cap=4.0)[0] == 250


def test_equal_share_between_simultaneous_flows():
    _, _, ends = _run([0, 0], [1000, 1000], 10.0)
    assert ends == {0: 200, 1: 200}


def test_capped_flow_leaves_the_rest_to_the_other():
    # flow 0 may use 2 B/cycle, so flow 1 gets 8 of the channel's 10
    _, _, ends = _run([0, 0], [200, 800], 10.0, caps=[2.0, math.inf])
    assert ends == {0: 100, 1: 100}


def test_max_min_across_two_channels():
    # flow 0 crosses both channels, flows 1 and 2 one each: all bottlenecked at 5 B/cycle
    _, _, ends = _run([0, 0, 0], [500, 500, 500], 10.0, paths=[(0, 1), (0,), (1,)], channels=2)
    assert ends == {0: 100, 1: 100, 2: 100}


def test_zero_bytes_complete_at_once():
    _, chans, ends = _run([5], [0], 10.0)
    assert ends == {0: 5} and chans[0].busy_cycles == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 500), st.integers(1, 50_000)), min_size=1, max_size=8),
       st.floats(0.5, 100.0))
def test_conservation_and_capacity(flows, capacity):
    starts = [s for s, _ in flows]
    sizes = [b for _, b in flows]
    env, chans, ends = _run(starts, sizes, capacity)
    ch = chans[0]
    assert ch.bytes_moved == sum(sizes)
    # the channel never carried more than its capacity: bytes / capacity fits in its busy time,
    # with one cycle of rounding per completion
    assert sum(sizes) / capacity <= ch.busy_cycles + 1e-9
    assert ch.busy_cycles <= env.now
    # no transfer beats its lone time, nor finishes before the data could have been moved
    for i, (s, b) in enumerate(flows):
        assert ends[i] - s >= math.ceil(b / capacity - 1e-9)
    # the whole batch cannot finish before the work-conserving bound
    first = min(starts)
    assert env.now >= first + sum(sizes) / capacity - 1e-9


def test_rejects_bad_arguments():
    env = simpy.Environment()
    net = FluidNetwork(env)
    with pytest.raises(ValueError):
        net.channel("x", 0.0)
    ch = net.channel("y", 1.0)
    with pytest.raises(ValueError):
        net.transfer((ch,), -1)
