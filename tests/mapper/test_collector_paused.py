"""A kernel's search runs with the cyclic garbage collector paused (``graph._collector_paused``);
what it kept then goes to the oldest generation without a collection walking it, the collector is
as it was, and objects a caller froze stay frozen."""
from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from sn40l_sim.commands import cli
from sn40l_sim.mapper import graph
from sn40l_sim.mapper.graph import _collector_paused


@pytest.fixture
def collector_on(monkeypatch):
    """The collector enabled, nothing frozen and the promotion on, as in a mapping command's process
    (``commands/cli.py``); restored after."""
    monkeypatch.setattr(graph, "PROMOTE_KEPT_OBJECTS", True)
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


def test_a_host_embedding_the_library_keeps_its_young_objects_young(collector_on, monkeypatch):
    # the promotion moves every young object of the process, so only the command line makes it
    monkeypatch.setattr(graph, "PROMOTE_KEPT_OBJECTS", False)
    host = [[i] for i in range(100)]
    with _collector_paused():
        pass
    assert not _in_generation(host, 2)


def test_the_command_line_promotes_while_a_mapping_command_runs_and_restores_after(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(graph, "PROMOTE_KEPT_OBJECTS", False)
    monkeypatch.setattr(cli, "build_parser", lambda command: _Parser(lambda args: seen.append(graph.PROMOTE_KEPT_OBJECTS)))
    assert cli.main(["map", "x.yaml"]) == 0 and cli.main(["check", "x.yaml"]) == 0
    assert seen == [True, False] and graph.PROMOTE_KEPT_OBJECTS is False


def test_what_a_mapping_command_kept_is_not_left_young_for_the_callers_thresholds(collector_on, monkeypatch):
    # restoring the caller's thresholds (Python's default: 700) with the command's objects still
    # young made the next allocation walk them all, a collection the process exits right after
    kept: list[object] = []
    monkeypatch.setattr(cli, "build_parser", lambda command: _Parser(
        lambda args: kept.extend([i, str(i)] for i in range(5000))))
    assert cli.main(["run", "x.yaml"]) == 0
    assert _in_generation(kept, 2) and _in_generation(kept[-1], 2)
    assert gc.get_count()[0] < 100 and gc.get_freeze_count() == 0


def test_importing_a_runs_libraries_leaves_fewer_objects_than_a_young_collection_waits_for():
    # they all live to the end of the command: a young collection during an import (at 50,000 one
    # during numpy's and one during matplotlib's) walks them and frees almost nothing
    code = ("import gc; gc.disable(); before = len(gc.get_objects())\n"
            "import sn40l_sim.commands.run, sn40l_sim.mapper.graph, sn40l_sim.study.assemble, sn40l_sim.study.runner\n"
            "import sn40l_sim.report.results, sn40l_sim.report.plot\n"
            "package = len(gc.get_objects())\n"
            "import matplotlib.figure, matplotlib.backends.backend_agg\n"
            "print(package - before, len(gc.get_objects()) - package)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    package, plotting = map(int, out.split())
    assert package > 10_000 and plotting > 10_000              # what is counted is what is imported
    assert package + plotting < cli.GC_THRESHOLDS[0]


class _Parser:
    """A stand-in for the CLI's parser whose command only records what it saw."""

    def __init__(self, run):
        self._module = type("Command", (), {"run": staticmethod(run)})

    def parse_known_args(self, argv):
        args = type("Args", (), {})()
        args._module, args._parser = self._module, self
        return args, []
