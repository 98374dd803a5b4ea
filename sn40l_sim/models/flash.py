"""Which (query tile, key/value tile) pairs a causal FlashAttention kernel computes.

Prefill attention streams query tiles of ``block_q`` rows against key/value tiles of ``block_kv``
columns. With causal masking a KV tile is skipped when its first key comes after the tile's last
query; every other pair is computed in full, masked entries included (skipping is at *block*
granularity, as FlashAttention does). So the FLOPs counted are those of the computed tile pairs,
which exceed the ``L * (L + 1) / 2`` unmasked scores by the masked halves of the diagonal tiles.

A later chunk of a chunked prefill (``prefix`` earlier tokens already cached) runs its ``L`` queries,
at positions ``[prefix, prefix + L)``, against all ``prefix + L`` keys: the pairs over the earlier
keys are all unmasked, so a chunk's attention grows with its position in the prompt.

Tiles of several shapes are several GEMMs, and the mapper stages each GEMM on units of its own in
the kernel's pipeline: Llama-3.1-8B's 16,383-token prompt ran six GEMM stages where 16,384 tokens
ran two, with about three times their pipeline fill and the PCUs split three ways, and its attention
took longer than the longer prompt's. A compiler has the choice FlashAttention kernels make: pad
the sequence to whole tiles and mask the padding, computing it in full. :func:`padded_tile_pairs`
is that choice; the builder builds a prefill's kernels both ways where they differ and the mapper
keeps the faster version of each (:attr:`~sn40l_sim.ir.FusedKernel.padded`). The padded version
streams whole tiles of K, V and the queries (the rows past the prompt are traffic, not a larger
tensor: the memory sizing is the prompt's) and writes only the prompt's rows of its output.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sn40l_sim.frozen import copied
from sn40l_sim.ir import FusedKernel


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



def padded_tile_pairs(length: int, block_q: int, block_kv: int, prefix: int = 0) -> list[tuple[int, int, int]] | None:
    """The tile pairs of :func:`causal_tile_pairs` with the edge tiles padded to whole tiles (the
    padding masked, computed in full): one shape, the same pairs. None when the tiles are of one
    shape already, whole or not (a prompt shorter than a tile: padding it only adds work).

    >>> padded_tile_pairs(10, 4, 4), padded_tile_pairs(16383, 8192, 8192)
    ([(4, 4, 6)], [(8192, 8192, 3)])
    >>> padded_tile_pairs(16384, 8192, 8192) is None, padded_tile_pairs(1000, 8192, 8192) is None
    (True, True)
    """
    tiles = causal_tile_pairs(length, block_q, block_kv, prefix)
    if len(tiles) < 2:
        return None
    return [(block_q, block_kv, sum(pairs for _, _, pairs in tiles))]


def padded_rows(length: int, block_q: int) -> int:
    """Query rows the padded tiles compute past the ``length`` rows of the prompt (or chunk).

    >>> padded_rows(16383, 8192), padded_rows(16384, 8192), padded_rows(10, 4)
    (1, 0, 2)
    """
    return -(-length // block_q) * block_q - length


#: the note (:attr:`~sn40l_sim.ir.FusedKernel.notes`) that marks a kernel's padded version: the
#: tokens of the whole tiles its edge tiles are padded to
PADDED_TILE_NOTE = "flash_padded_tile_tokens"
#: the note the mapper adds to the padded version it keeps: cycles a call it saves over the exact
#: edge tiles, by the objective the plans were chosen by (:func:`sn40l_sim.mapper.kernel.map_kernel`)
PADDED_SAVING_NOTE = "flash_padded_saves_cycles"


def with_padded(kernels: Sequence[FusedKernel], padded: Sequence[FusedKernel], tile_tokens: int) -> list[FusedKernel]:
    """``kernels`` (a graph's, in order), each one that ``padded`` (the same graph built with the
    edge tiles padded to whole tiles of ``tile_tokens`` query rows) changes carrying its padded
    version (:attr:`~sn40l_sim.ir.FusedKernel.padded`, named as a signature: identical layers share
    it), marked with :data:`PADDED_TILE_NOTE` so that whoever reads a mapped kernel can tell which
    version the mapper kept."""
    versions: dict[int, FusedKernel] = {}
    out = []
    for kernel, other in zip(kernels, padded, strict=True):
        if other.operators == kernel.operators:
            out.append(kernel)
            continue
        version = versions.get(id(other.operators))
        if version is None:
            notes = other.notes + ((PADDED_TILE_NOTE, tile_tokens),)
            version = versions[id(other.operators)] = copied(other, name="", layer=None, notes=notes)
        out.append(copied(kernel, padded=version))
    return out


def padded_tile_tokens(kernel: FusedKernel) -> int | None:
    """The tile the edge tiles of ``kernel`` are padded to when it is a padded version (the mapper
    kept it, or it is a kernel's :attr:`~sn40l_sim.ir.FusedKernel.padded`), else None.

    >>> from sn40l_sim.ir import FusedKernel
    >>> k = FusedKernel("L0.attention", "attention", "prefill", ())
    >>> padded_tile_tokens(k), padded_tile_tokens(copied(k, notes=((PADDED_TILE_NOTE, 8192),)))
    (None, 8192)
    """
    return next((int(value) for name, value in kernel.notes if name == PADDED_TILE_NOTE), None)
