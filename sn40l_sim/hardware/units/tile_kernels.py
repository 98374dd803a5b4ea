"""Small single-tile kernels, and their cycles composed from the tile-level unit models.

These are the kernels the unit-level simulation (:mod:`sn40l_sim.engine.unit_level`) runs cycle
by cycle; :func:`tile_level_cycles` predicts the same kernels from the formulas of
:mod:`sn40l_sim.hardware.units` alone, and the tests hold the two within 5%.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GemmKernel:
    """``C[m, n] = A[m, k] @ B[k, n]`` on ``pcus`` PCUs (split by column blocks), operands in PMUs
    ``hops`` mesh hops away from each PCU."""

    m: int
    k: int
    n: int
    pcus: int = 1
    hops: int = 1
    dtype: str = "bf16"


@dataclass(frozen=True)
class AttentionKernel:
    """One head: ``softmax(Q K^T) V`` with ``Q[q_len, head_dim]``, ``K, V[kv_len, head_dim]``,
    processed in query tiles of ``q_tile`` rows through a QK^T PCU, three softmax PCUs (row max;
    exp and row sum; normalisation) and a PV PCU, with double-buffered PMUs between them."""

    q_len: int
    kv_len: int
    head_dim: int
    q_tile: int
    hops: int = 1


@dataclass(frozen=True)
class GatherKernel:
    """``out[i] = table[idx[i]]`` for ``n_indices`` random rows of ``row_elems`` BF16 values,
    read from one PMU and written to another ``hops`` away. ``seed`` draws the indices."""

    table_rows: int
    row_elems: int
    n_indices: int
    hops: int = 1
    seed: int = 0
