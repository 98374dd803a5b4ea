"""A kernel's search runs with the cyclic garbage collector paused (``graph._collector_paused``);
what it kept then goes to the oldest generation without a collection walking it, the collector is
as it was, and objects a caller froze stay frozen."""
from __future__ import annotations

import gc

import pytest

from sn40l_sim.mapper.graph import _collector_paused


@pytest.fixture
def collector_on():
    """The collector enabled and nothing frozen, as in a command's process; restored after."""
    if gc.get_freeze_count():
        pytest.skip("objects frozen by the test process: a paused search leaves them so")
    was_enabled = gc.isenabled()
    gc.enable()
    yield
    if not was_enabled:
        gc.disable()


def _in_generation(obj: object, generation: int) -> bool:
    return any(o is obj for o in gc.get_objects(generation=generation))


def test_what_a_paused_search_kept_goes_to_the_oldest_generation_unexamined(collector_on):
    kept: list[object] = []
    with _collector_paused():
        assert not gc.isenabled()
        kept.extend([i, str(i)] for i in range(1000))   # tracked containers, young
    assert gc.isenabled()
    assert _in_generation(kept, 2) and _in_generation(kept[-1], 2)
    assert gc.get_count()[0] < 100                       # no backlog left for the next allocation
    assert gc.get_freeze_count() == 0


def test_objects_a_caller_froze_stay_frozen(collector_on):
    before = [[0]]
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        with _collector_paused():
            after = [[1]]
        # not unfrozen (that empties the permanent generation); the count itself may fall while
        # frozen objects another thread drops (xdist's) are freed
        assert frozen > 0 and gc.get_freeze_count() > 0
        assert not _in_generation(before, 2)             # still in the permanent generation
        assert after[0] == [1]
    finally:
        gc.unfreeze()


def test_a_disabled_collector_stays_disabled(collector_on):
    gc.disable()
    with _collector_paused():
        pass
    assert not gc.isenabled()
