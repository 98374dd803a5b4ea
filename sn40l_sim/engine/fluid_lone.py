"""The cycles a transfer takes alone in a :class:`~sn40l_sim.engine.fluid.FluidNetwork`, without
running it: :func:`lone_flow_cycles` (and elementwise, :func:`lone_flow_cycles_array`), with the
network's completion tolerance they must agree with.

Kept apart from :mod:`.fluid` (which imports these) so that the network's module stays small.
"""
from __future__ import annotations

import math

import numpy as np

#: a flow whose remaining bytes fall below this fraction of its size (plus a hair) is complete;
#: it only absorbs float noise, since flows are woken at or after their exact finishing time
_DONE_REL = 1e-9
_DONE_ABS = 1e-6
#: how far (in cycles) a lone flow's exact duration must stay from a whole cycle, and from the
#: completion tolerance above one, for :func:`lone_flow_cycles` to vouch for the network's rounding
_SAFE_MARGIN = 1e-6


def lone_flow_cycles(n_bytes: int, bytes_per_cycle: float) -> int | None:
    """Cycles a flow of ``n_bytes`` takes in a :class:`FluidNetwork` when it shares no channel.

    A flow alone on its channels runs at its narrowest channel's capacity from the cycle it starts
    and completes at the next whole cycle after its last byte (at least one cycle). The network
    reaches that through a float ``remaining`` decremented at every event, so when the exact
    duration lies within float noise of a whole cycle, or within the completion tolerance above
    one (where an unrelated event in that cycle would complete it early), the answer depends on
    the other flows' events; then this returns ``None`` and the caller must run the network.

    Parameters
    ----------
    n_bytes : int
        Bytes of the flow (at least 1).
    bytes_per_cycle : float
        The flow's rate: the smallest capacity along its path (and its cap).

    Examples
    --------
    >>> lone_flow_cycles(1001, 10.0), lone_flow_cycles(5, 10.0)
    (101, 1)
    >>> lone_flow_cycles(1000, 10.0) is None   # exactly 100 cycles: left to the event loop
    True
    """
    exact = n_bytes / bytes_per_cycle
    frac = exact - math.floor(exact)
    tolerance = (_DONE_REL * n_bytes + _DONE_ABS) / bytes_per_cycle
    if frac <= tolerance + _SAFE_MARGIN or frac >= 1.0 - _SAFE_MARGIN:
        return None
    return max(1, math.ceil(exact - 1e-9))


def lone_flow_cycles_array(n_bytes: np.ndarray, bytes_per_cycle: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`lone_flow_cycles` elementwise: the cycles (int64) and where they are vouched for.

    >>> cycles, known = lone_flow_cycles_array(np.array([1001, 5, 1000]), np.array([10.0, 10.0, 10.0]))
    >>> cycles.tolist(), known.tolist()
    ([101, 1, 100], [True, True, False])
    """
    exact = n_bytes / bytes_per_cycle
    frac = exact - np.floor(exact)
    tolerance = (_DONE_REL * n_bytes + _DONE_ABS) / bytes_per_cycle
    known = (frac > tolerance + _SAFE_MARGIN) & (frac < 1.0 - _SAFE_MARGIN)
    return np.maximum(1, np.ceil(exact - 1e-9)).astype(np.int64), known
