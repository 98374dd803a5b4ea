"""The order in which a member of a direct collective sets up its transfers: shifted, not ascending.

In the direct algorithm (:meth:`~sn40l_sim.engine.collectives._Run.direct`) every member sends one
message to every other member, and a socket sets its messages up one after the other on its DMA
engines. Member ``i`` of ``p`` sets up its ``k``-th message (``k = 1 .. p-1``) to member
``(i + k) mod p``: the shifted (pairwise-exchange) schedule that implementations of a direct
all-to-all use so that at any moment every member is sending to a different member. Sending in
ascending member order instead would have every member start with member 0 (or 1), then all move
on to member 1 (or 2), ...: an incast on one receiver at a time, which is what the pairwise
exchange avoids -- MPI's pairwise-exchange all-to-all (Thakur, Rabenseifner and Gropp,
"Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), 2005: in step ``k``
process ``i`` sends to ``i + k`` and receives from ``i - k``) and NCCL's all-to-all loop over peers
by offset from the caller's rank.

The order also keeps the collective symmetric under a rotation of the members: on a ring, member
``i``'s transfers are member 0's shifted by ``i``. On a torus (or a hypercube) whose sockets are
all members, shifting socket numbers is not a translation of the torus, so there the shift is
coordinate-wise instead (``dims``, :func:`sn40l_sim.hardware.topology.lattice_dims`): member
``x``'s ``k``-th destination is ``x + k`` added digit by digit, each digit modulo its ring (an
exclusive or on a hypercube, the hypercube's pairwise exchange). With dimension-order routes
(:mod:`.links`), which are translation-invariant, every member's transfers are then member 0's
moved by a translation of the torus, and at every step each link carries the same load.

Examples
--------
>>> peer_order(0, 4), peer_order(2, 4)
([1, 2, 3], [3, 0, 1])
>>> set_up_rank(4)[2].tolist()        # member 2 sets up its message to member 3 first, to 1 last
[2, 3, 0, 1]
>>> peer_order(5, 8, (4, 2))    # column 1, row 1 of a 4 x 2 torus: one column on first, ...
[6, 7, 4, 1, 2, 3, 0]
"""
from __future__ import annotations

import functools
import math

import numpy as np


@functools.lru_cache(maxsize=64)
def _shifted(p: int, dims: tuple[int, ...] | None) -> np.ndarray:
    """``dest[i, k]``: member ``i``'s ``k``-th destination, ``k = 0 .. p-1`` (0 is itself): ``i``
    plus ``k`` digit by digit in the torus ``dims``, or modulo ``p`` when ``dims`` is None or is
    not a torus of exactly ``p`` members. Memoised (read-only): the schedule asks for every
    member's order of every member, a ``p x p`` table each time."""
    if dims is None or math.prod(dims) != p:
        dims = (p,)
    sizes, places = np.array(dims), np.cumprod((1, *dims[:-1]))
    digits = (np.arange(p)[:, None] // places[None, :]) % sizes[None, :]
    dest = ((digits[:, None, :] + digits[None, :, :]) % sizes) @ places
    dest.flags.writeable = False
    return dest


def peer_order(i: int, p: int, dims: tuple[int, ...] | None = None) -> list[int]:
    """The members member ``i`` of ``p`` sends to, in the order it sets the transfers up
    (translations of the torus ``dims`` when its sockets are the ``p`` members)."""
    if dims is None or math.prod(dims) != p:
        return [(i + k) % p for k in range(1, p)]
    return _shifted(p, dims)[i, 1:].tolist()


def translations(p: int, dims: tuple[int, ...] | None = None) -> np.ndarray:
    """``T[x, k]``: member ``x`` moved by ``k`` (digit by digit in the torus ``dims``, else modulo
    ``p``); row ``x`` is ``x`` followed by :func:`peer_order` ``(x, p, dims)``.

    >>> translations(4).tolist()[1]
    [1, 2, 3, 0]
    """
    return _shifted(p, dims)


def set_up_rank(p: int, dims: tuple[int, ...] | None = None) -> np.ndarray:
    """``rank[i, j]``: the place (1 .. p-1) of member ``j`` in :func:`peer_order` ``(i, p, dims)``
    (0 on the diagonal)."""
    dest = _shifted(p, dims)
    rank = np.empty_like(dest)
    np.put_along_axis(rank, dest, np.arange(p)[None, :], axis=1)
    return rank
