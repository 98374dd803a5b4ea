"""What ``write_trace`` and ``write_requests`` draw from: the :class:`~sn40l_sim.serving.point.PointResult`
objects ``simulate_experiment(..., on_result=results.append)`` collects, checked, so that a Python
caller's slip (the records it returns, which are dicts, or None) is one clear error."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sn40l_sim.errors import InputError

#: what ``write_trace`` draws (its ``source``), as its error says
TRACE_SOURCE = "a PointResult (simulate_experiment's on_result), a list of them, a PhaseTiming or a trace dict"


def point_results(value: Any, argument: str, expected: str, attribute: str = "setup") -> list[Any]:
    """``value`` as a list of point results (objects with ``attribute``), else an :class:`InputError`
    saying ``argument: expected <expected>, got <type>`` (the records in their place raised an
    AttributeError, 'dict' object has no attribute 'setup', from deep inside).

    >>> point_results([], "source", "a list of PointResults")
    []
    >>> point_results([{"name": "full"}], "source", "a list of PointResults")
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: source: expected a list of PointResults, got dict in a list
    """
    items = list(value) if isinstance(value, Iterable) and not isinstance(value, (str, bytes, dict)) else None
    wrong = value if items is None else next((i for i in items if not hasattr(i, attribute)), None)
    if items is None or wrong is not None:
        raise InputError(f"{argument}: expected {expected}, got {type(wrong).__name__}" + (" in a list" if items else ""))
    return items
