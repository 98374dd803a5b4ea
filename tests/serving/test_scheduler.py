"""The serving loop's scheduler processes events in SimPy's order: random processes that sleep,
wait for and fire signals and send transfers over links do the same things in the same order,
ties on a cycle included, under :class:`Scheduler` and under SimPy (with a ``simpy.Resource`` for
the link, and a signal that schedules its event even when no one waits)."""
from __future__ import annotations

import random

import pytest
import simpy

from sn40l_sim.serving.scheduler import Link, RunEnd, Scheduler, Signal


class SimpySignal:
    """A re-armable SimPy event, as the loop had it before its own scheduler."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env, self.event = env, env.event()

    def fire(self) -> None:
        self.event.succeed()
        self.event = self.env.event()


def plans(seed: int) -> list[list[tuple[str, int]]]:
    rng = random.Random(seed)
    actions = ["sleep", "sleep", "wait", "fire", "send", "send"]
    return [[(rng.choice(actions), rng.randrange(2)) for _ in range(rng.randint(1, 8))] for _ in range(rng.randint(1, 6))]


def serve(seed: int, ours: bool) -> list[tuple]:
    """What happened, in order, as processes follow their random plans."""
    rng = random.Random(seed + 1)
    clock = Scheduler() if ours else simpy.Environment()
    signals = [Signal(clock) if ours else SimpySignal(clock) for _ in range(2)]
    links = [Link(clock) if ours else simpy.Resource(clock, capacity=1) for _ in range(2)]
    seen: list[tuple] = []

    def send(link: int, cycles: int, name: str):
        if ours:
            def start():
                seen.append(("start", name, clock.now))
                clock.at(cycles, lambda: (seen.append(("end", name, clock.now)), links[link].release()))
            clock.soon(lambda: links[link].request(start))
            return
        def transfer():
            with links[link].request() as granted:
                yield granted
                seen.append(("start", name, clock.now))
                yield clock.timeout(cycles)
                seen.append(("end", name, clock.now))
        clock.process(transfer())

    def body(name: int, plan: list[tuple[str, int]]):
        for step, (action, arg) in enumerate(plan):
            if action == "sleep":
                yield arg * 2 if ours else clock.timeout(arg * 2)
            elif action == "wait":
                yield signals[arg] if ours else signals[arg].event
            elif action == "fire":
                signals[arg].fire()
            else:
                send(arg, rng.choice([0, 1, 2, 3]), f"{name}.{step}")
            seen.append((name, action, arg, clock.now))

    for name, plan in enumerate(plans(seed)):
        clock.process(body(name, plan))
    for tick in range(5):
        cycle = rng.randint(0, 8)
        if ours:
            clock.at(cycle, lambda tick=tick: seen.append(("tick", tick, clock.now)))
        else:
            clock.timeout(cycle).callbacks.append(lambda _, tick=tick: seen.append(("tick", tick, clock.now)))
    if ours:
        clock.at(1000, clock.stop)
        clock.run()
    else:
        clock.run(until=clock.timeout(1000))
    return seen


@pytest.mark.parametrize("chunk", range(4))
def test_the_scheduler_orders_events_as_simpy_does(chunk):
    for seed in range(chunk * 150, (chunk + 1) * 150):
        assert serve(seed, ours=True) == serve(seed, ours=False), seed


def test_a_signal_no_one_waits_on_schedules_nothing_and_a_run_without_a_stop_is_an_error():
    clock = Scheduler()
    Signal(clock).fire()
    assert clock.peek() == float("inf")
    with pytest.raises(RuntimeError, match="no event left"):
        clock.run()


def test_a_late_event_runs_after_every_other_event_of_its_cycle_even_those_scheduled_during_it():
    clock, seen = Scheduler(), []
    clock.at(5, lambda: clock.last(lambda: seen.append("late")))
    clock.at(5, lambda: (seen.append("normal"), clock.at(0, lambda: seen.append("chained"))))
    clock.at(5, lambda: clock.soon(lambda: seen.append("urgent")))
    clock.at(6, clock.stop)
    clock.run()
    assert seen == ["normal", "urgent", "chained", "late"]


def test_a_run_end_calls_its_callback_with_its_arguments_and_is_told_apart_from_other_events():
    clock, seen = Scheduler(), []
    clock.at(3, RunEnd(lambda node, steps: seen.append((clock.now, node, steps)), 1, 4))
    clock.at(2, lambda: seen.append((clock.now, "other")))
    clock.at(4, clock.stop)
    ends = [callback for *_, callback in clock.pending() if isinstance(callback, RunEnd)]
    clock.run()
    assert seen == [(2, "other"), (3, 1, 4)] and len(ends) == 1
