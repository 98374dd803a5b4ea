"""Which (query tile, key/value tile) pairs a causal FlashAttention kernel computes.

Prefill attention streams query tiles of ``block_q`` rows against key/value tiles of ``block_kv``
columns. With causal masking a KV tile is skipped when its first key comes after the tile's last
query; every other pair is computed in full, masked entries included (skipping is at *block*
granularity, as FlashAttention does). So the FLOPs counted are those of the computed tile pairs,
which exceed the ``L * (L + 1) / 2`` unmasked scores by the masked halves of the diagonal tiles.

A later chunk of a chunked prefill (``prefix`` earlier tokens already cached) runs its ``L`` queries,
at positions ``[prefix, prefix + L)``, against all ``prefix + L`` keys: the pairs over the earlier
keys are all unmasked, so a chunk's attention grows with its position in the prompt.
"""
from __future__ import annotations

from collections import Counter


def causal_tile_pairs(length: int, block_q: int, block_kv: int, prefix: int = 0) -> list[tuple[int, int, int]]:
    """Computed tile pairs of causal attention of ``length`` queries after ``prefix`` earlier
    tokens (over ``prefix + length`` keys), grouped by shape.

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

    The last 4 of those 10 tokens as a chunk after 6 cached ones: its query tiles start at 6.

    >>> causal_tile_pairs(4, 4, 4, prefix=6)  # queries 6..9 against key tiles 0..3, 4..7, 8..9
    [(4, 4, 2), (4, 2, 1)]
    """
    if length <= 0:
        return []
    keys = prefix + length
    n_kv = -(-keys // block_kv)
    last_cols = keys - (n_kv - 1) * block_kv
    shapes: Counter[tuple[int, int]] = Counter()
    for first in range(prefix, keys, block_q):
        rows = min(block_q, keys - first)
        last_query = first + rows - 1
        tiles = last_query // block_kv + 1
        if tiles == n_kv and last_cols != block_kv:
            shapes[(rows, block_kv)] += tiles - 1
            shapes[(rows, last_cols)] += 1
        else:
            shapes[(rows, block_kv)] += tiles
    return [(r, c, n) for (r, c), n in sorted(shapes.items(), key=lambda rc: (-rc[0][0], -rc[0][1])) if n]

