"""Which (query tile, key/value tile) pairs a causal FlashAttention kernel computes.

Prefill attention streams query tiles of ``block_q`` rows against key/value tiles of ``block_kv``
columns. With causal masking a KV tile is skipped when its first key comes after the tile's last
query; every other pair is computed in full, masked entries included (skipping is at *block*
granularity, as FlashAttention does). So the FLOPs counted are those of the computed tile pairs,
which exceed the ``L * (L + 1) / 2`` unmasked scores by the masked halves of the diagonal tiles.
"""
from __future__ import annotations

from collections import Counter


def causal_tile_pairs(length: int, block_q: int, block_kv: int) -> list[tuple[int, int, int]]:
    """Computed tile pairs of causal attention over ``length`` tokens, grouped by shape.

    Returns
    -------
    list of (rows, cols, pairs)
        ``pairs`` computed tile pairs of ``rows`` queries by ``cols`` keys, sorted by shape
        (full tiles first); edge tiles are smaller when ``length`` is not a multiple of a block.

    Examples
    --------
    A 128K prompt in 8192-token tiles: 16 query tiles, 16 * 17 / 2 = 136 pairs.

    >>> causal_tile_pairs(131072, 8192, 8192)
    [(8192, 8192, 136)]
    >>> causal_tile_pairs(10, 4, 4)  # tiles of 4, 4 and 2 rows/cols
    [(4, 4, 3), (2, 4, 2), (2, 2, 1)]
    """
    if length <= 0:
        return []
    n_kv = -(-length // block_kv)
    last_cols = length - (n_kv - 1) * block_kv
    shapes: Counter[tuple[int, int]] = Counter()
    for first in range(0, length, block_q):
        rows = min(block_q, length - first)
        last_query = first + rows - 1
        tiles = last_query // block_kv + 1
        if tiles == n_kv and last_cols != block_kv:
            shapes[(rows, block_kv)] += tiles - 1
            shapes[(rows, last_cols)] += 1
        else:
            shapes[(rows, block_kv)] += tiles
    return [(r, c, n) for (r, c), n in sorted(shapes.items(), key=lambda rc: (-rc[0][0], -rc[0][1])) if n]

