"""Settings of the whole test session: one disk cache of its own, fresh and empty; how many
pytest-xdist workers ``-n auto`` starts; the notebook tests first; rarer garbage collections.

Mapped kernels and simulated steps are kept in the disk cache (``sn40l_sim.mapper.disk_cache``),
whose entries are keyed by every input of the computation. The session points every process of the
run at one new, empty folder, removed at the end: the test process itself (through
``disk_cache.cache_in``; the package leaves the disk cache off inside pytest unless told), the
pytest-xdist workers, and the processes the tests start (commands run as subprocesses, the notebooks'
kernel, through ``$SN40L_SIM_CACHE``). What one of them maps or simulates, the others read back
instead of doing it again; no test depends on whatever a user's cache (``~/.cache/sn40l_sim``)
happens to hold, and none writes into it.

A test that replaces a function the mapper or the engine computes with (a unit model made 1% slower)
must neither read answers computed without its change nor leave its own behind: it runs under
``disk_cache.cache_in(None)`` and clears the mapper's memo (``test_golden.fresh_mapper_memo``). So
does a test that counts what the mapper computes cold.

A test process keeps the mapper's memos (mapped kernels, section plans, divisions: hundreds of
thousands of objects) alive from the first simulation to the end. With CPython's default thresholds
(700, 10, 10) the collector went through them in some 10,000 full collections per worker, about 10 s
of CPU in a run of the suite; with :data:`GC_THRESHOLDS` young objects are still collected, a few
hundred times a run, and the memos rarely (the peak memory of a worker is within 10% of what it was).
Once its tests are done a worker freezes what is left, so that exiting does not go through it again.

pytest-xdist's controller runs no test: it only makes the folder and removes it at the end, and
imports nothing of the package (its workers start sooner). No process rewrites the asserts of
hypothesis's own modules (:func:`leave_hypothesis_as_it_is`).
"""
from __future__ import annotations

import atexit
import contextlib
import gc
import os
import shutil
import tempfile

import pytest

#: the session's folder, set by the process that made it and inherited by its workers and subprocesses
SESSION_CACHE_ENV = "SN40L_SIM_TEST_SESSION_CACHE"
_state = pytest.StashKey[tuple[contextlib.ExitStack, "str | None"]]()
#: the collector's thresholds in the test processes (young objects, then the two older generations)
GC_THRESHOLDS = (50_000, 20, 20)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (pyproject.toml's addopts): one worker per core (pytest-xdist's own count), but
    none, the tests running in this process, when the command line names only test files or single
    tests: starting the workers (each imports and collects everything) would cost more than it saves."""
    args = [a for a in config.args if not a.startswith("-")]
    if config.args_source == pytest.Config.ArgsSource.ARGS and args and all(
            "::" in a or a.endswith(".py") for a in args):
        return 0
    return None


#: modules that share what they simulate through a per-process memo (the unit-level runs of
#: ``tests/reference/unit_level_cases.py``), handed out right after the notebooks
SHARING_A_MEMO = ("tests/reference/test_mapper_vs_unit_level.py", "tests/reference/test_unit_level.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The notebooks first: together they run a kernel for some 15 s, so started last they
    would leave one xdist worker running them while the other has nothing left; started first (one
    worker takes their module while the other takes the next ones), the many short modules after
    them even out the end. Next the modules of :data:`SHARING_A_MEMO`: while the notebooks keep one
    worker busy, the other takes them one after the other and simulates their common cases once
    (handed out apart, each worker simulated them all, ~4 s)."""
    def rank(item: pytest.Item) -> int:
        module = item.nodeid.split("::")[0]
        return 0 if module == "tests/test_notebooks.py" else 1 if module in SHARING_A_MEMO else 2

    items.sort(key=rank)


def runs_tests(config: pytest.Config) -> bool:
    """Whether this process runs tests (a pytest-xdist worker, or pytest without workers), rather
    than handing them to workers as pytest-xdist's controller does."""
    return hasattr(config, "workerinput") or config.getoption("dist", "no") == "no" \
        or not config.getoption("tx", None)


def leave_hypothesis_as_it_is(config: pytest.Config) -> None:
    """Import hypothesis's modules without rewriting their asserts.

    pytest rewrites the asserts of every module of a distribution that declares a pytest plugin, so
    that a failing assert there explains itself; hypothesis ships its plugin in its package, and its
    ~90 modules took each worker ~0.7 s to rewrite while collecting, and the controller as long at
    the very end (its terminal summary imports hypothesis), for asserts no test here reaches. pytest
    has no public way to take a name off its list; when the list is not where this expects it,
    nothing changes."""
    hook = getattr(config.pluginmanager, "rewrite_hook", None)
    marked, decided = getattr(hook, "_must_rewrite", None), getattr(hook, "_marked_for_rewrite_cache", None)
    if isinstance(marked, set) and isinstance(decided, dict) and "hypothesis" in marked:
        marked.discard("hypothesis")
        decided.clear()


def pytest_configure(config: pytest.Config) -> None:
    leave_hypothesis_as_it_is(config)
    made = None
    folder = os.environ.get(SESSION_CACHE_ENV)
    if folder is None:     # the first process of the session (xdist's controller, or the only one)
        folder = made = tempfile.mkdtemp(prefix="sn40l_sim-test-cache-")
        os.environ[SESSION_CACHE_ENV] = folder
    stack = contextlib.ExitStack()
    if runs_tests(config):
        from sn40l_sim.mapper import disk_cache
        from sn40l_sim.mapper.graph import clear_memo

        stack.callback(gc.set_threshold, *gc.get_threshold())
        gc.set_threshold(*GC_THRESHOLDS)
        stack.enter_context(pytest.MonkeyPatch.context()).setenv(disk_cache.CACHE_ENV, folder)
        stack.enter_context(disk_cache.cache_in(folder))
        # pytest ends with five full garbage collections (to surface unraisable exceptions); the
        # mapper's memos would be most of the heap by then, and traversing them took each process ~1 s
        stack.callback(clear_memo)
        # and Python's own at exit, after pytest is done, would go through all that is left again
        atexit.register(gc.freeze)
    config.stash[_state] = (stack, made)


def pytest_unconfigure(config: pytest.Config) -> None:
    stack, made = config.stash[_state]
    stack.close()
    if made is not None:
        del os.environ[SESSION_CACHE_ENV]
        shutil.rmtree(made, ignore_errors=True)
