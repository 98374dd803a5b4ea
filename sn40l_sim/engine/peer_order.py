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
``i``'s transfers are member 0's shifted by ``i``.

Examples
--------
>>> peer_order(0, 4), peer_order(2, 4)
([1, 2, 3], [3, 0, 1])
>>> set_up_rank(4)[2].tolist()        # member 2 sets up its message to member 3 first, to 1 last
[2, 3, 0, 1]
"""
from __future__ import annotations

import numpy as np


def peer_order(i: int, p: int) -> list[int]:
    """The members member ``i`` of ``p`` sends to, in the order it sets the transfers up."""
    return [(i + k) % p for k in range(1, p)]


def set_up_rank(p: int) -> np.ndarray:
    """``rank[i, j]``: the place (1 .. p-1) of member ``j`` in :func:`peer_order` ``(i, p)``
    (0 on the diagonal)."""
    index = np.arange(p)
    return (index[None, :] - index[:, None]) % p
