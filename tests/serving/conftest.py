"""Fixtures shared by the serving tests."""
from __future__ import annotations

import pytest

from sn40l_sim.serving.decode_books import RunBook


@pytest.fixture
def runs(monkeypatch):
    """The number of steps each run of the by-requests book advanced in one event, as they happen
    (one :meth:`RunBook.steps_to_run` call per event that advances a node's steps)."""
    lengths: list[int] = []
    steps_to_run = RunBook.steps_to_run
    monkeypatch.setattr(RunBook, "steps_to_run",
                        lambda self, env: lengths.append(steps_to_run(self, env)) or lengths[-1])
    return lengths
