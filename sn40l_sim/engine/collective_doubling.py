"""Recursive doubling timed round by round without the event loop, while its members keep in step.

In :meth:`_Run.doubling <sn40l_sim.engine.collectives._Run.doubling>` member ``i`` sends
``sizes[r]`` bytes to member ``i XOR 2^r`` in round ``r`` once both have reached the round, and
goes on once its partner's message has arrived. On a ring or a torus the rounds' routes share
links (round ``r`` on a ring sends ``2^r`` hops each way), so :class:`~sn40l_sim.engine.
collective_schedule.Schedule` declines them, and the event loop ran every member: the 58 tree
all-reduces of the main experiment on a 64-socket ring were a sixth of its CPU time. Yet when the
members enter a round together, the round is a closed computation:

* each member's one transfer of the round is set up at once on a free DMA engine (it has no other
  transfer): ``setup_cycles``, when there is a set-up;
* it then waits its route's latency and the receiver's synchronisation, rounded up to whole cycles
  (``head``); when every transfer of the round has the same head, they all start streaming at the
  same cycle, in a network holding nothing else (the previous round's flows have all ended);
* the network gives them the max-min fair rates of the round's routes, which depend on the routes
  and the links' capacities, not on the bytes. When every flow gets the same rate (the same float),
  every flow has the same bytes left at every event, and all complete at the same wake-up: after
  :meth:`FluidNetwork.lone_flow <sn40l_sim.engine.fluid.FluidNetwork.lone_flow>` cycles of one
  flow at that rate, the network's own arithmetic;
* so every member has its partner's message at the same cycle and enters the next round with the
  others.

The members all enter the first round at cycle 0, so by induction the collective ends after the
rounds' ``setup + head + streaming`` cycles. The rates are the network's: a probe network starts
the round's flows together and reports the rates it shares out (:meth:`FluidNetwork.rates
<sn40l_sim.engine.fluid.FluidNetwork.rates>`), once per group and round. When a round's heads or
rates differ, members drift apart and later rounds overlap in ways only the event loop follows:
:func:`doubling_in_step` returns None and the caller simulates. ``tests/engine/
test_collective_doubling.py`` compares the two on a battery of topologies, groups and sizes.
"""
from __future__ import annotations

import simpy

from sn40l_sim.engine.fluid import Channel, FluidNetwork
from sn40l_sim.engine.links import LinkTable
from sn40l_sim.hardware.units._cycles import ceil_cycles


def doubling_in_step(table: LinkTable, setup_cycles: int, sync_latency_s: float, members: list[int],
                     sizes: list[int], memo: dict | None = None) -> tuple[int, int, int, int] | None:
    """Recursive doubling's ``(cycles, link_bytes, sent_bytes, transfers)`` as the event loop gives
    them, or None when its members do not keep in step (then simulate).

    Parameters
    ----------
    table : LinkTable
        The node's links and routes.
    setup_cycles : int
        DMA set-up of each transfer (0: none).
    sync_latency_s : float
        The receiver's synchronisation latency, added to the route's before rounding up.
    members : list of int
        The sockets in member order (a power of two of them).
    sizes : list of int
        Bytes every member sends its partner in each round.
    memo : dict, optional
        Where each round's head and rate are kept between calls (same table and latencies).
    """
    memo = {} if memo is None else memo
    cycles = link_bytes = sent = transfers = 0
    for r, n_bytes in enumerate(sizes):
        if n_bytes <= 0:
            continue   # no transfer: every member goes on to the next round at once
        key = ("doubling", tuple(members), r, sync_latency_s)
        if key not in memo:
            memo[key] = _round(table, sync_latency_s, [(s, members[i ^ (1 << r)]) for i, s in enumerate(members)])
        if memo[key] is None:
            return None
        head, rate, hops = memo[key]
        streaming = FluidNetwork.lone_flow((Channel("share", rate),), n_bytes)
        assert streaming is not None   # n_bytes > 0, rate > 0
        cycles += setup_cycles + head + streaming[0]
        link_bytes += n_bytes * hops
        transfers += len(members)
        sent += n_bytes if 0 in members else 0
    return cycles, link_bytes, sent, transfers


def _round(table: LinkTable, sync_latency_s: float, pairs: list[tuple[int, int]]) -> tuple[int, float, int] | None:
    """The round's head cycles, its flows' rate and their hops in all, or None unless every pair
    has the same head and the network gives every flow the same rate."""
    heads = {ceil_cycles((table.latency_s(src, dst) + sync_latency_s) * table.clock_hz) for src, dst in pairs}
    if len(heads) != 1:
        return None
    routes = [table.route(src, dst) for src, dst in pairs]
    # a probe network of the round's flows alone, started together as the members start them
    env = simpy.Environment()
    net = FluidNetwork(env)
    channels = {link: net.channel(f"p2p {link[0]}->{link[1]}", bw) for link, bw in sorted(table.bytes_per_cycle.items())}
    for route in routes:
        net.transfer(tuple(channels[link] for link in route), 1)
    env.run(until=1)   # the rates are shared out at the start; the first completion is a cycle later
    rates = set(net.rates())
    if len(rates) != 1:
        return None
    return heads.pop(), rates.pop(), sum(len(route) for route in routes)
