"""Decode attention across sequences, tiles and on-chip capacity: the split-KV combine.

A decode step's attention reads, on one socket, ``sequences`` independent caches (sequences, or
sequence x KV head) of ``kv_tokens`` tokens for ``rows`` query rows each (the
:class:`~sn40l_sim.ir.AttentionShape` the family's scores GEMM carries). The mapper spreads its
work evenly over the ``chip_tiles`` tiles in use, which is only possible by splitting caches:

* **across tiles** -- with fewer caches than tiles, each cache is split into ``ceil(tiles /
  caches)`` fragments (split-KV, as flash-decoding does on GPUs), one per tile;
* **by capacity** -- a fragment's score rows (``rows x tokens`` FP32 values) wait on chip between
  the scores and the weighted sum; they may take the hardware file's ``pmu.score_share`` of a tile's
  SRAM (half on the SN40L: the other half is the kernel's streams' double buffers), so a longer fragment is cut into chunks that fit.

Every fragment and chunk beyond the first of a cache leaves a partial result per row -- its running
maximum and sum and its ``value_width`` partial output, FP32 -- that must be merged: rescaled by
``exp(m_i - m)`` and added. That merge is a SIMD stage after the weighted sum
(:func:`combine_operator`, ``<scores>.combine``); when a tile's partials outgrow the same capacity
they go to memory and back. One long cache per socket therefore costs a little more than several
short ones of the same total length, and nothing else in the mapping depends on how the tokens are
split into sequences. A cache whose fragments and chunks are one needs no combine.

Examples
--------
One 128K DeepSeek cache per socket (3 query tokens x 128 heads) on 4 tiles: four fragments; four
32K caches: one per tile, nothing to merge.

>>> from sn40l_sim.ir import AttentionShape, Operator
>>> from sn40l_sim.mapper._examples import example_socket
>>> scores = lambda s, n: Operator("qk", "gemm", attention=AttentionShape(s, 384, n, 512))
>>> op = combine_operator(example_socket(), scores(1, 131072), chip_tiles=4)
>>> op.name, op.elements == 1 * 384 * 3 * 514
('qk.combine', True)
>>> combine_operator(example_socket(), scores(4, 32768), chip_tiles=4) is None
True
"""
from __future__ import annotations

import math

from sn40l_sim.frozen import copied
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.ir import DTYPE_BYTES, Operator

#: scores and partial results are kept in FP32 (the softmax's accumulation precision)
PARTIAL_BYTES = DTYPE_BYTES["fp32"]


def score_bytes_per_tile(socket: SocketSpec) -> float:
    """Bytes of a tile's SRAM the waiting score rows and partials may take: the hardware file's
    ``pmu.score_share`` of the tile's share of the socket's SRAM."""
    return socket.pmu.score_share * figures.sram_bytes(socket) / figures.tiles(socket)


def partials_per_cache(socket: SocketSpec, sequences: int, rows: int, kv_tokens: int, chip_tiles: int) -> int:
    """Partial results each cache leaves: fragments across tiles times chunks that fit on chip.

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> partials_per_cache(example_socket(), 1, 384, 131072, 4), partials_per_cache(example_socket(), 8, 384, 16384, 4)
    (4, 1)
    """
    fragments = math.ceil(chip_tiles / sequences) if sequences < chip_tiles else 1
    capacity = score_bytes_per_tile(socket)
    chunk_tokens = max(1, int(capacity // (rows * PARTIAL_BYTES)))
    return fragments * math.ceil(math.ceil(kv_tokens / fragments) / chunk_tokens)


def combine_operator(socket: SocketSpec, scores: Operator, chip_tiles: int) -> Operator | None:
    """The SIMD stage merging the partial results of ``scores``'s caches, or None when each cache
    leaves one (see the module docstring)."""
    shape = scores.attention
    if shape is None:
        return None
    partials = partials_per_cache(socket, shape.sequences, shape.rows, shape.kv_tokens, chip_tiles)
    if partials <= 1:
        return None
    width = shape.value_width + 2                      # output, running max, running sum
    merges = shape.sequences * shape.rows * (partials - 1)
    held = shape.sequences * shape.rows * partials * width * PARTIAL_BYTES
    capacity = score_bytes_per_tile(socket) * chip_tiles
    spilled = held if held > capacity else 0
    return Operator(f"{scores.name}.combine", "elementwise", elements=merges * width, transcendentals=merges,
                    act_in_bytes=spilled, act_out_bytes=spilled, dtype="fp32")


def with_combines(socket: SocketSpec, ops: tuple[Operator, ...] | list[Operator], chip_tiles: int) -> list[Operator]:
    """``ops`` with each decode attention's combine placed after its weighted sum (the first GEMM
    after the scores that is not another shape of them, and its own second shape)."""
    out = list(ops)
    for i in range(len(out) - 1, -1, -1):
        combine = combine_operator(socket, out[i], chip_tiles)
        if combine is None:
            continue
        # a scores GEMM of a second shape (GQA's KV heads with a query head fewer) is not the sum
        first = pv = next((j for j in range(i + 1, len(out))
                           if out[j].kind == "gemm" and not out[j].name.startswith(f"{out[i].name}#")), i)
        while pv + 1 < len(out) and out[pv + 1].name.startswith(f"{out[pv].name.split('#')[0]}#"):
            pv += 1     # and after the weighted sum's own second shape
        out[pv + 1:] = _reading_merged(combine, {op.name for op in out[first:pv + 1]}, out[first:pv + 1], out[pv + 1:])
    return out


def _reading_merged(combine: Operator, sums: set[str], summed: list[Operator], later: list[Operator]) -> list[Operator]:
    """``combine`` and the ``later`` operators, which read its merged rows where they named the
    weighted sums (:attr:`~sn40l_sim.ir.Operator.producers`); the combine reads the sums (the
    operator before it when they name no producers, a chain)."""
    if all(op.producers is None for op in summed):
        return [combine, *later]
    out = [copied(combine, producers=tuple(op.name for op in summed))]
    for op in later:
        if op.producers is not None and sums.intersection(op.producers):
            names = [combine.name if p in sums else p for p in op.producers]
            op = copied(op, producers=tuple(dict.fromkeys(names)))
        out.append(op)
    return out
