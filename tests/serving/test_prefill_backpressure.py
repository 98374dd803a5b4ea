"""A prefill node holds each prefilled cache until its transfer to a decode node ends; with
``prefill_hold_tokens`` it starts a prefill only while those caches fit in the room its memory
leaves (sn40l_sim/serving/loop.py), so a node whose caches wait for busy decode nodes stops
taking prompts instead of holding more caches than its HBM has."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sn40l_sim.serving.loop import ServingSetup, simulate
from sn40l_sim.serving.prefix_cache import PrefixCaching
from sn40l_sim.serving.workload import Request


def setup(hold: int | None) -> ServingSetup:
    # decode-bound: 2 slots stepping slowly behind a fast prefill node
    return ServingSetup(mode="disaggregated", prefill_nodes=1, decode_nodes=1, slots=2, decode_step_cycles=100,
                        prefill_cycles=lambda p: p, transfer_cycles=lambda p: 5,
                        cache_tokens=lambda p, g: p + g, kv_bytes_per_token=1, slot_cache_tokens=1000,
                        prefill_hold_tokens=hold, prefix_hit_cycles=lambda p, held: (p - held, held))


def requests(n: int = 40, seed: int = 0) -> list[Request]:
    rng = np.random.default_rng(seed)
    return [Request(i, 0, int(rng.integers(50, 200)), int(rng.integers(5, 20))) for i in range(n)]


def held_at_prefill_starts(log) -> list[int]:
    """Cached tokens the prefill node held (prefilled, transfer not ended) when each prefill started."""
    out = []
    for r in log.requests:
        t = r.prefill_start
        out.append(sum(o.request.prompt_len for o in log.requests
                       if o is not r and o.first_token <= t and (o.transfer_end is None or o.transfer_end > t)))
    return out


@pytest.mark.parametrize("hold", [0, 150, 600])
def test_a_prefill_starts_only_while_the_waiting_caches_fit(hold):
    log = simulate(requests(), setup(hold))
    assert sorted(r.request.id for r in log.requests if r.finish is not None) == list(range(40))
    assert max(held_at_prefill_starts(log)) <= hold


def test_without_a_limit_caches_pile_up_and_with_one_ttft_grows_instead():
    free, held = simulate(requests(), setup(None)), simulate(requests(), setup(150))
    assert max(held_at_prefill_starts(free)) > 150            # the unlimited node held them all
    # holding back never finishes sooner, and the first tokens come later
    assert max(r.finish for r in held.requests) >= max(r.finish for r in free.requests)
    assert sum(r.first_token for r in held.requests) > sum(r.first_token for r in free.requests)


def test_room_for_every_cache_changes_nothing():
    free, roomy = simulate(requests(), setup(None)), simulate(requests(), setup(10**9))
    assert [(r.prefill_start, r.first_token, r.transfer_end, r.finish) for r in free.requests] == \
        [(r.prefill_start, r.first_token, r.transfer_end, r.finish) for r in roomy.requests]


@pytest.mark.parametrize("capacity", [None, 151])
def test_prefixes_kept_beyond_the_hold_room_are_refused(capacity):
    # kept beyond it, a prefill node held back with no transfer pending waited for one that never
    # came: simulate() ended in SimPy's "no event left to process"


    with pytest.raises(ValueError, match="must be at most prefill_hold_tokens"):
        replace(setup(150), prefix_caching=PrefixCaching(True, 1, capacity))
    assert replace(setup(150), prefix_caching=PrefixCaching(True, 1, 150)).prefill_hold_tokens == 150
