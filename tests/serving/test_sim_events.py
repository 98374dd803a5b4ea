"""The loop's callback pieces schedule the events SimPy's processes and resources would: the same
things happen in the same order, ties on a cycle included."""
from __future__ import annotations

import random

import simpy

from sn40l_sim.serving.sim_events import Link, Signal, after, soon


def transfers(seed: int, ours: bool) -> list[tuple]:
    """Transfers over two links started at random tiny cycles, among timeouts that note the cycle
    (the order in which everything happened is the result)."""
    rng = random.Random(seed)
    env, seen = simpy.Environment(), []
    links = [Link(env) for _ in range(2)] if ours else [simpy.Resource(env, capacity=1) for _ in range(2)]
    jobs = [(rng.randint(0, 6), rng.randrange(2), rng.choice([0, 0, 1, 2, 3]), name) for name in range(12)]

    def process(link, cycles, name):
        with link.request() as granted:
            yield granted
            seen.append(("start", name, env.now))
            yield env.timeout(cycles)
            seen.append(("end", name, env.now))

    def callbacks(link, cycles, name):
        def start():
            seen.append(("start", name, env.now))
            after(env, cycles, lambda: (seen.append(("end", name, env.now)), link.release()))
        soon(env, lambda: link.request(start))

    def launch(at, link, cycles, name):
        yield env.timeout(at)
        if ours:
            callbacks(links[link], cycles, name)
        else:
            env.process(process(links[link], cycles, name))
        seen.append(("launched", name, env.now))
        env.timeout(0).callbacks.append(lambda _: seen.append(("after launch", name, env.now)))

    for at, link, cycles, name in jobs:
        env.process(launch(at, link, cycles, name))
        env.timeout(rng.randint(0, 8)).callbacks.append(lambda _, name=name: seen.append(("tick", name, env.now)))
    env.run()
    return seen


def test_a_link_orders_transfers_as_a_simpy_resource_does():
    for seed in range(300):
        assert transfers(seed, ours=True) == transfers(seed, ours=False), seed


def test_a_signal_wakes_its_waiters_and_skips_an_event_no_one_waits_on():
    env, woken = simpy.Environment(), []
    signal = Signal(env)
    signal.fire()                         # no one waits: nothing scheduled
    assert not env._queue

    def waiter(name):
        yield signal.wait()
        woken.append((name, env.now))

    env.process(waiter("a"))
    env.process(waiter("b"))
    after(env, 3, signal.fire)
    env.run()
    assert woken == [("a", 3), ("b", 3)]
