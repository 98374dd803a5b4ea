"""The pieces a GEMM is cut into (:mod:`sn40l_sim.mapper.tiling`): from the whole, halve the
dimension whose halving leaves the smallest buffer ``A + B + C`` until there are enough pieces.

:func:`halved` is that greedy search, the first of ``GEMM_DIMS`` taken where halvings tie;
:func:`tied_pieces` follows every tied halving instead, so that the tiling's cost, not the order
of the dimensions, chooses between equally small pieces.
"""
from __future__ import annotations

import math

from sn40l_sim.ir import ACT_BYTES

#: GEMM dimensions in the order ties are broken when choosing which to halve
GEMM_DIMS = ("count", "n", "m", "k")


def gemm_buffer(piece: dict[str, int], b_bytes: float) -> float:
    """Bytes of one piece's operands and result, ``A + B + C`` (B at ``b_bytes`` an element)."""
    c, m, k, n = piece["count"], piece["m"], piece["k"], piece["n"]
    return c * (m * k * ACT_BYTES + k * n * b_bytes + m * n * ACT_BYTES)


def halved(dims: dict[str, int], minimum: dict[str, int], b_bytes: float, target: int,
           cuts: tuple[str, ...]) -> dict[str, int]:
    """A GEMM's piece: from the whole, halve the dimension (of ``cuts``, the first of
    ``GEMM_DIMS`` on ties) whose halving leaves the smallest buffer (:func:`gemm_buffer`),
    until there are ``target`` pieces or nothing can be halved.

    The same choices and the same float arithmetic as halving dicts of the piece and pricing them
    with :func:`gemm_buffer`, on plain integers (the mapper tiles thousands of GEMMs).

    >>> halved({"count": 1, "m": 64, "k": 1024, "n": 4096}, {"count": 1, "m": 32, "k": 64, "n": 32},
    ...         2.0, 8, ("count", "n", "m", "k"))
    {'count': 1, 'm': 64, 'k': 1024, 'n': 512}
    """
    # GEMM_DIMS order: count, n, m, k
    whole = (dims["count"], dims["n"], dims["m"], dims["k"])
    low = (minimum["count"], minimum["n"], minimum["m"], minimum["k"])
    allowed = tuple(d in cuts for d in GEMM_DIMS)
    key = (whole, low, b_bytes, allowed)
    steps = _halvings.get(key)
    if steps is None:
        if len(_halvings) >= _HALVINGS_SIZE:
            _halvings.clear()
        steps = _halvings[key] = [(piece_count(whole, whole), whole)]
    # the halvings do not depend on the target: the piece is the first step with at least
    # ``target`` pieces, or the finest (the tilings of one operator at 1, 2, 4, ... data tiles
    # walk one list, extended as far as a target asks)
    i = 0
    while True:
        if i == len(steps):
            finer = _halve_once(steps[-1][1], low, b_bytes, allowed)
            steps.append((0, None) if finer is None else (piece_count(whole, finer), finer))
        pieces, piece = steps[i]
        if piece is None:            # nothing left to halve: the finest piece
            piece = steps[i - 1][1]
            break
        if pieces >= target:
            break
        i += 1
    c, n, m, k = piece
    return {"count": c, "m": m, "k": k, "n": n}


#: each GEMM's halvings by (whole, minimum, B bytes, cuts), as (pieces, piece) steps from the
#: whole; a last step ``(0, None)`` marks the finest found (nothing left to halve). Cleared when full
_HALVINGS_SIZE = 20_000
_halvings: dict[tuple, list[tuple[int, tuple[int, int, int, int] | None]]] = {}


#: the pieces :func:`tied_pieces` found, by (whole, minimum, B bytes, cuts) and then by target;
#: cleared with :data:`_halvings`
_tied: dict[tuple, dict[int, frozenset[tuple[int, int, int, int]]]] = {}


def clear_halvings() -> None:
    """Forget every GEMM's memoised halvings."""
    _halvings.clear()
    _tied.clear()


def piece_count(whole: tuple[int, int, int, int], piece: tuple[int, int, int, int]) -> int:
    """Pieces of ``piece``'s size that cover ``whole`` (both ``(count, n, m, k)``)."""
    return (math.ceil(whole[0] / piece[0]) * math.ceil(whole[1] / piece[1]) * math.ceil(whole[2] / piece[2])
            * math.ceil(whole[3] / piece[3]))


def _halve_once(piece: tuple[int, int, int, int], low: tuple[int, int, int, int], b_bytes: float,
                allowed: tuple[bool, ...]) -> tuple[int, int, int, int] | None:
    """The piece ``(count, n, m, k)`` with the dimension halved that leaves the smallest buffer
    (the first on ties), or None when none can be halved."""
    ties = smallest_halvings(piece, low, b_bytes, allowed)
    return ties[0] if ties else None


def smallest_halvings(piece: tuple[int, int, int, int], low: tuple[int, int, int, int], b_bytes: float,
                      allowed: tuple[bool, ...], whole: tuple[int, int, int, int] | None = None,
                      ) -> list[tuple[int, int, int, int]]:
    """The pieces ``(count, n, m, k)`` with one dimension halved that leave the smallest buffer:
    several where halvings tie (in ``GEMM_DIMS`` order), none when none can be halved. Given the
    ``whole`` GEMM, also those whose mean piece (the whole over the pieces that cover it) leaves the
    smallest buffer, after them.

    A dimension one short of a power of two rounds its halves up, so of two halvings that tie on
    the power of two the one that halves it again leaves a piece a row larger: Llama-3.1-8B's
    attention ``P V`` at 511 tokens (``m = k = 511``) cut to 64 x 511 pieces where 512 tokens tied
    and also found 128 x 256, faster on 59 PCUs of a tile (13,945 against 14,121
    cycles a call). The mean pieces of 511 and 512 halve alike (each a share of the whole, with no
    rounding), so following their ties too offers a prompt the pieces of the power of two above it.

    >>> first = smallest_halvings((1, 128, 128, 511), (1, 32, 6, 6), 0.5, (True,) * 4)
    >>> first, smallest_halvings((1, 128, 128, 511), (1, 32, 6, 6), 0.5, (True,) * 4, (4, 128, 511, 511))
    ([(1, 128, 64, 511)], [(1, 128, 64, 511), (1, 128, 128, 256)])
    """
    ties = _least(piece, low, b_bytes, allowed, piece)
    if whole is not None:
        # the mean piece: each dimension's whole over the pieces of that size that cover it
        ties += [t for t in _least(piece, low, b_bytes, allowed, whole) if t not in ties]
    return ties


def _least(piece: tuple[int, int, int, int], low: tuple[int, int, int, int], b_bytes: float,
           allowed: tuple[bool, ...], whole: tuple[int, int, int, int]) -> list[tuple[int, int, int, int]]:
    """The halvings of ``piece`` (as :func:`smallest_halvings`) whose buffer is the least, priced on
    the mean pieces of ``whole`` (on ``piece`` itself when ``whole`` is ``piece``)."""
    def mean(i: int, size: int) -> float:
        return size if whole is piece else whole[i] / math.ceil(whole[i] / size)

    c, n, m, k = (mean(i, v) for i, v in enumerate(piece))
    act = ACT_BYTES
    best_size, ties = 0.0, []
    for i, value in enumerate(piece):
        if not allowed[i]:
            continue
        half = math.ceil(value / 2)
        if half < low[i] or half == value:
            continue
        h = mean(i, half)
        # gemm_buffer of the piece with dimension i halved
        if i == 0:
            size = h * (m * k * act + k * n * b_bytes + m * n * act)
        elif i == 1:
            size = c * (m * k * act + k * h * b_bytes + m * h * act)
        elif i == 2:
            size = c * (h * k * act + k * n * b_bytes + h * n * act)
        else:
            size = c * (m * h * act + h * n * b_bytes + m * n * act)
        if not ties or size < best_size:
            best_size, ties = size, []
        if size == best_size:
            ties.append(piece[:i] + (half,) + piece[i + 1:])
    return ties


def tied_pieces(dims: dict[str, int], minimum: dict[str, int], b_bytes: float, target: int,
                cuts: tuple[str, ...]) -> list[dict[str, int]]:
    """Every piece :func:`halved` could give had it broken its ties otherwise: the halvings that
    leave equally small buffers are all followed, each path to its first piece of at least
    ``target`` pieces (or its finest). :func:`halved`'s piece comes first.

    A tie is no reason to prefer a dimension, yet the first-on-ties order decided the tiling: a
    power-of-two number of rows ties its ``m`` and ``k`` halvings, where one row more does not,
    and the ``k`` split it then takes streamed faster, so a 1025-token prefill mapped faster than a
    1024-token one. The tiling's cost now chooses between them
    (:func:`~sn40l_sim.mapper.tiling.gemm_tilings`).

    >>> tied_pieces({"count": 1, "m": 1024, "k": 4096, "n": 3584}, {"count": 1, "m": 32, "k": 64, "n": 32},
    ...             2.0, 32, ("count", "n", "m", "k"))
    [{'count': 1, 'm': 512, 'k': 1024, 'n': 896}, {'count': 1, 'm': 1024, 'k': 512, 'n': 896}]
    """
    first = halved(dims, minimum, b_bytes, target, cuts)
    whole = (dims["count"], dims["n"], dims["m"], dims["k"])
    low = (minimum["count"], minimum["n"], minimum["m"], minimum["k"])
    allowed = tuple(d in cuts for d in GEMM_DIMS)
    key = (whole, low, b_bytes, allowed)
    by_target = _tied.get(key)
    if by_target is None:
        if len(_tied) >= _HALVINGS_SIZE:
            _tied.clear()
        by_target = _tied[key] = {}
    found = by_target.get(target)
    if found is None:
        # a path stops at its first piece of at least ``target`` pieces, and a halving never
        # lowers the count, so the paths to a higher target go on from a lower one's ends: the
        # search starts there (the tilings of one GEMM at 1, 2, 4, ... data tiles)
        start = max((t for t in by_target if t < target), default=None)
        found = by_target[target] = _follow_ties(whole, low, b_bytes, allowed, target,
                                                 {whole} if start is None else by_target[start])
    return [first] + [{"count": c, "m": m, "k": k, "n": n}
                      for c, n, m, k in sorted(found) if (c, m, k, n) != (first["count"], first["m"], first["k"],
                                                                             first["n"])]


def _follow_ties(whole: tuple[int, int, int, int], low: tuple[int, int, int, int], b_bytes: float,
                 allowed: tuple[bool, ...], target: int,
                 frontier: set[tuple[int, int, int, int]] | frozenset[tuple[int, int, int, int]]
                 ) -> frozenset[tuple[int, int, int, int]]:
    """The ends of every path of tied halvings from the pieces ``frontier`` on: each path's first
    piece of at least ``target`` pieces, or its finest."""
    found: set[tuple[int, int, int, int]] = set()
    while frontier:
        later: set[tuple[int, int, int, int]] = set()
        for piece in frontier:
            ties = smallest_halvings(piece, low, b_bytes, allowed, whole) if piece_count(whole, piece) < target else []
            later.update(ties)
            if not ties:
                found.add(piece)
        frontier = later
    return frozenset(found)
