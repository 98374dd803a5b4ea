"""A PCU in systolic mode, stage by stage, and the wiring of a GEMM over a few of them.

Mapping (weight-stationary, the same one the tile-level model documents): N over the lanes, K
over the stages (``r`` values per lane per stage for packed narrow types), M streamed in time.
Each stage is a SimPy process holding one block's weights plus a shadow register (a one-slot
Store) that the weight loader fills, one vector per cycle, while the current block streams.
Each A row slice enters the first stage together with its partial-sum vector for the previous K
block, read back from the output PMU (chained accumulation); the last stage's result leaves
after the output registers (``pipeline_latency_cycles - stages`` cycles) for the output PMU.
The values are computed for real (NumPy), so a run also checks the dataflow.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import numpy as np
import simpy

from sn40l_sim.hardware.spec import PCUSpec, SocketSpec
from sn40l_sim.reference.unit_level.fabric import PMU, Packet, Wire, forward, mesh_path

#: bytes of one partial sum by the PCU's ``accumulator_dtype`` (written out here: the unit-level
#: simulation uses none of the tile-level unit models it checks)
SUM_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def systolic_geometry(pcu: PCUSpec, dtype: str) -> tuple[int, int, int]:
    """``(r, k_per_block, row_cycles)``: K values per lane per stage, per block, and cycles per row.

    >>> from sn40l_sim.hardware.units._examples import example_pcu
    >>> systolic_geometry(example_pcu(), "bf16"), systolic_geometry(example_pcu(), "fp32")
    ((1, 6, 1), (1, 6, 2))
    """
    rate = float(pcu.macs_per_lane_stage_per_cycle[dtype])
    if rate >= 1:
        r = int(math.floor(rate))
        return r, pcu.stages * r, 1
    return 1, pcu.stages, int(math.ceil(1.0 / rate - 1e-9))


class SystolicPCU:
    """One PCU running a list of GEMM blocks; inputs arrive on ``a_in``, ``psum_in``, ``w_in``.

    ``blocks`` is the block order: ``(block_id, rows, needs_psum)``. Tokens leave on ``out`` as
    :class:`Packet` with tag ``(block_id, row)`` and the FP32 partial-sum vector as data.
    """

    def __init__(self, env: simpy.Environment, pcu: PCUSpec, dtype: str,
                 blocks: list[tuple[object, int, bool]]) -> None:
        if pcu.pipeline_latency_cycles < pcu.stages:
            raise ValueError("pipeline_latency_cycles must cover one cycle per stage")
        self.env, self.pcu, self.blocks = env, pcu, blocks
        self.r, self.k_per_block, self.row_cycles = systolic_geometry(pcu, dtype)
        self.a_in, self.psum_in, self.w_in = Wire(env), Wire(env), Wire(env)
        self.links = [Wire(env) for _ in range(pcu.stages)]
        self.out = Wire(env, latency=pcu.pipeline_latency_cycles - pcu.stages)
        self.shadow = [simpy.Store(env, capacity=1) for _ in range(pcu.stages)]
        self.busy_cycles = 0
        env.process(self._feeder())
        env.process(self._loader())
        for i in range(pcu.stages):
            env.process(self._stage(i))

    def _feeder(self) -> Iterator[simpy.events.Event]:
        lanes = self.pcu.lanes
        for block_id, rows, needs_psum in self.blocks:
            for row in range(rows):
                a = yield from self.a_in.get()
                if needs_psum:
                    psum = (yield from self.psum_in.get()).data
                else:
                    psum = np.zeros(lanes)
                yield self.links[0].put([block_id, row, a.data, psum])

    def _loader(self) -> Iterator[simpy.events.Event]:
        # one lanes-wide weight vector per cycle through the PCU's vector input
        for block_id, _, _ in self.blocks:
            for i in range(self.pcu.stages):
                w = yield from self.w_in.get()
                yield self.env.timeout(1)
                yield self.shadow[i].put((block_id, w.data))

    def _stage(self, i: int) -> Iterator[simpy.events.Event]:
        active, weights = None, None
        nxt = self.links[i + 1] if i + 1 < self.pcu.stages else self.out
        lo, hi = i * self.r, (i + 1) * self.r
        last = i == self.pcu.stages - 1
        while True:
            tok = yield from self.links[i].get()
            if tok[0] != active:
                loaded, weights = yield self.shadow[i].get()
                assert loaded == tok[0], (loaded, tok[0])
                active = tok[0]
            yield self.env.timeout(self.row_cycles)
            if last:
                self.busy_cycles += self.row_cycles
            tok[3] = tok[3] + tok[2][lo:hi] @ weights
            if last:
                tok = Packet((tok[0], tok[1]), tok[3], self.pcu.lanes * SUM_BYTES[self.pcu.accumulator_dtype])
            yield nxt.put(tok)


@dataclass
class GemmWiring:
    """Where a systolic GEMM's operands live and how its tiles are gated.

    ``a_pmu(tile)``/``a_slice(tile, m, k0, k1) -> (key, address, nbytes, values)`` give the A row
    slices; ``b_pmus[p]``/``b_vector(nb, k) -> (key, address, nbytes, values)`` the weight rows
    (``nb`` a global column block, None past the end of K), ``values(stored)`` picking the
    numbers out of what the PMU holds under ``key``; ``c_pmu(tile, p)`` the PMU holding tile ``tile``'s partial sums on PCU
    ``p``; ``tile_ready(tile)`` an event gating the tile's A reads; ``tile_done(tile)`` is called
    when all of a tile's final outputs are written.
    """

    a_pmu: Callable[[int], PMU]
    a_slice: Callable[[int, int, int, int], tuple]
    b_pmus: list[PMU]
    b_vector: Callable[[int, int], tuple]
    c_pmu: Callable[[int, int], PMU]
    tile_ready: Callable[[int], simpy.events.Event | None]
    tile_done: Callable[[int], None]


def systolic_gemm(env: simpy.Environment, socket: SocketSpec, tiles: int, m: int, k: int, n: int,
                  pcus: int, hops: int, wiring: GemmWiring, dtype: str = "bf16") -> list[SystolicPCU]:
    """Build the processes of ``tiles`` GEMMs ``[m, k] @ [k, n]`` split over ``pcus`` PCUs by columns.

    Every PCU takes ``n_blocks / pcus`` column blocks and sees the same A slices (multicast from
    the A PMU). Loop order per PCU: tile, column block, K block, row. Each PCU has its own weight
    PMU and output PMU; every connection is a ``hops``-hop mesh path. See
    :func:`sn40l_sim.reference.unit_level.gemm.simulate_gemm` for a complete run.
    """
    pcu, net = socket.pcu, socket.tile.vector_network
    lanes, stages = pcu.lanes, pcu.stages
    psum_vector = lanes * SUM_BYTES[pcu.accumulator_dtype]     # bytes of one row's partial sums in a column block
    r, kpb, _ = systolic_geometry(pcu, dtype)
    n_blocks, k_blocks = -(-n // lanes), -(-k // kpb)
    if n_blocks % pcus:
        raise ValueError(f"{n_blocks} column blocks do not split evenly over {pcus} PCUs")
    nbl = n_blocks // pcus
    order = [(t, j, kb) for t in range(tiles) for j in range(nbl) for kb in range(k_blocks)]
    finals = {t: 0 for t in range(tiles)}
    units = []
    a_paths = []
    for p in range(pcus):
        blocks = [((t, j, kb), m, kb > 0) for t, j, kb in order]
        unit = SystolicPCU(env, pcu, dtype, blocks)
        units.append(unit)
        a_in, a_out = mesh_path(env, net, hops)
        a_paths.append(a_in)
        env.process(forward(a_out, unit.a_in))
        w_in, w_out = mesh_path(env, net, hops)
        env.process(forward(w_out, unit.w_in))
        env.process(wiring.b_pmus[p].reader(_weight_requests(wiring, order, p, nbl, r, stages, lanes),
                                            [w_in]))
        c_in, c_out = mesh_path(env, net, hops)
        env.process(forward(unit.out, c_in))
        ps_in, ps_out = mesh_path(env, net, hops)
        env.process(forward(ps_out, unit.psum_in))
        env.process(_psum_reader(wiring, order, p, m, nbl, psum_vector, ps_in))
        env.process(_psum_writer(wiring, c_out, len(order) * m, p, nbl, k_blocks, m, psum_vector,
                                 finals, pcus))
    env.process(_a_reader(wiring, order, tiles, m, kpb, k, a_paths))
    return units


def _a_reader(wiring: GemmWiring, order, tiles, m, kpb, k, paths):
    def requests(t):
        for tt, _, kb in order:
            if tt != t:
                continue
            k0, k1 = kb * kpb, min((kb + 1) * kpb, k)
            for row in range(m):
                key, address, nbytes, values = wiring.a_slice(t, row, k0, k1)
                yield key, address, nbytes, partial(_a_packet, values, kpb, nbytes)
    for t in range(tiles):
        yield from wiring.a_pmu(t).reader(requests(t), paths, start=wiring.tile_ready(t))


def _a_packet(values, kpb: int, nbytes: int, stored) -> Packet:
    vec = np.zeros(kpb)
    got = values(stored)
    vec[: len(got)] = got
    return Packet(None, vec, nbytes)


def _weight_requests(wiring: GemmWiring, order, p, nbl, r, stages, lanes):
    for _, j, kb in order:
        nb = p * nbl + j
        for i in range(stages):
            rows = [wiring.b_vector(nb, (kb * stages + i) * r + q) for q in range(r)]
            present = [x for x in rows if x is not None]
            if not present:
                # padding stage: zero weights made in the PCU, no PMU read, no link bytes
                yield None, 0, 0, partial(_weight_packet, rows, r, lanes, 0)
                continue
            nbytes = sum(x[2] for x in present)
            yield present[0][0], present[0][1], nbytes, partial(_weight_packet, rows, r, lanes, nbytes)


def _weight_packet(rows, r: int, lanes: int, nbytes: int, stored) -> Packet:
    w = np.zeros((r, lanes))
    for q, x in enumerate(rows):
        if x is not None:
            vals = x[3](stored)
            w[q, : len(vals)] = vals
    return Packet(None, w, nbytes)


def psum_address(row: int, j: int, nbl: int, vector_bytes: int) -> int:
    """Byte address of row ``row``, local column block ``j`` in a PCU's partial-sum buffer of
    ``vector_bytes``-byte vectors (``lanes`` partial sums each).

    >>> psum_address(row=2, j=1, nbl=4, vector_bytes=32 * 4)    # (2 * 4 + 1) vectors of 32 FP32
    1152
    """
    return (row * nbl + j) * vector_bytes


def _psum_reader(wiring: GemmWiring, order, p, m, nbl, nbytes, path_in):
    for t in sorted({t for t, _, _ in order}):
        requests = [((t, p, j, kb - 1, row), psum_address(row, j, nbl, nbytes), nbytes,
                     partial(_psum_packet, nbytes))
                    for tt, j, kb in order if tt == t and kb > 0 for row in range(m)]
        yield from wiring.c_pmu(t, p).reader(requests, [path_in])


def _psum_packet(nbytes: int, stored) -> Packet:
    return Packet(None, stored, nbytes)


def _psum_writer(wiring: GemmWiring, inbound: Wire, count, p, nbl, k_blocks, m, vector_bytes, finals,
                 pcus):
    for _ in range(count):
        pkt = yield from inbound.get()
        (t, j, kb), row = pkt.tag
        pmu = wiring.c_pmu(t, p)
        yield from pmu.access("write", psum_address(row, j, nbl, vector_bytes), pkt.nbytes)
        pmu.store((t, p, j, kb, row), pkt.data)
        if kb == k_blocks - 1:
            finals[t] += 1
            if finals[t] == nbl * m * pcus:
                wiring.tile_done(t)
