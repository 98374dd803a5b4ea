"""A PCU in SIMD mode, stage by stage: ALU stages, the tail stage, the cross-lane tree.

Vectors of ``lanes`` values enter one per cycle. Each of the ``stages`` stage processes applies
its op in one cycle; the last stage is the tail stage, which also evaluates transcendentals at
``tail_stage.transcendentals_per_lane_per_cycle x lanes`` per cycle (a vector with more takes
several cycles there). Results leave after the output registers (``pipeline_latency_cycles -
stages`` cycles). With a reduction, each vector then passes the cross-lane tree
(``reduction_tree_latency_cycles``, one vector per cycle) and a row accumulator that emits one
scalar per row.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import simpy

from sn40l_sim.hardware.spec import PCUSpec
from sn40l_sim.reference.unit_level.fabric import Packet, Wire

#: bytes of one scalar on the scalar network (FP32)
SCALAR_BYTES = 4


@dataclass
class SimdProgram:
    """What one SIMD PCU does to each vector of a row.

    ``alu[i](x, s)`` is stage ``i``'s op on vector ``x`` given the row's scalar ``s`` (missing
    stages pass the vector through); ``tail(x, s)`` is the tail stage's transcendental op and
    ``transcendentals`` how many it evaluates per valid element. ``reduce`` (e.g. ``np.max``)
    combines the valid lanes of the row's vectors into one scalar; ``init`` starts it.
    """

    alu: dict[int, Callable[[np.ndarray, float], np.ndarray]] = field(default_factory=dict)
    tail: Callable[[np.ndarray, float], np.ndarray] | None = None
    transcendentals: int = 0
    reduce: Callable[[float, float], float] | None = None
    init: float = 0.0
    #: the PCU waits for one scalar per row on ``scalar_in`` (e.g. the row max)
    needs_scalar: bool = False
    #: vectors go on to ``vector_out`` (else only the reduction leaves)
    emits_vectors: bool = True


class SimdPCU:
    """One PCU streaming ``rows`` rows of ``vectors_per_row`` vectors through ``program``.

    Input vectors arrive on ``inp`` as packets tagged ``(row, col)`` whose data is
    ``(values, n_valid)``; results leave on ``vector_out`` (same tags) and, with a reduction,
    one scalar packet per row on ``scalar_out``.

    Examples
    --------
    Row maxima of two rows of 64 values (2 vectors each) on a 32-lane, 6-stage, 10-cycle PCU
    with a 5-cycle tree: a row's max leaves 10 + 5 cycles after its last vector enters (cycles 1
    and 3, one vector per cycle).

    >>> from sn40l_sim.hardware.units._examples import example_pcu
    >>> env = simpy.Environment()
    >>> unit = SimdPCU(env, example_pcu(), SimdProgram(reduce=max, init=-np.inf, emits_vectors=False),
    ...                rows=[0, 1], vectors_per_row=2, out_bytes=64)
    >>> data = np.arange(128.0).reshape(4, 32)
    >>> def feed():
    ...     for i, vec in enumerate(data):
    ...         yield unit.inp.put(Packet(i, (vec, 32), 128))
    >>> got = []
    >>> def collect():
    ...     for _ in range(2):
    ...         pkt = yield from unit.scalar_out.get()
    ...         got.append((float(pkt.data), env.now))
    >>> _ = env.process(feed()); _ = env.process(collect()); env.run()
    >>> got
    [(63.0, 16), (127.0, 18)]
    """

    def __init__(self, env: simpy.Environment, pcu: PCUSpec, program: SimdProgram,
                 rows: list, vectors_per_row: int, out_bytes: int) -> None:
        if pcu.pipeline_latency_cycles < pcu.stages:
            raise ValueError("pipeline_latency_cycles must cover one cycle per stage")
        self.env, self.pcu, self.program = env, pcu, program
        self.rows, self.vpr, self.out_bytes = rows, vectors_per_row, out_bytes
        self.inp, self.scalar_in = Wire(env), Wire(env)
        self.links = [Wire(env) for _ in range(pcu.stages)]
        self.out = Wire(env, latency=pcu.pipeline_latency_cycles - pcu.stages)
        self.vector_out = Wire(env)
        self.scalar_out = Wire(env)
        self.tail_rate = pcu.tail_stage.transcendentals_per_lane_per_cycle * pcu.lanes
        self.busy_cycles = 0
        env.process(self._feeder())
        for i in range(pcu.stages):
            env.process(self._stage(i))
        env.process(self._drain())

    def _feeder(self) -> Iterator[simpy.events.Event]:
        for _ in self.rows:
            scalar = 0.0
            if self.program.needs_scalar:
                scalar = (yield from self.scalar_in.get()).data
            for _ in range(self.vpr):
                pkt = yield from self.inp.get()
                values, valid = pkt.data
                yield self.links[0].put([pkt.tag, np.array(values, dtype=float), valid, scalar])

    def _stage(self, i: int) -> Iterator[simpy.events.Event]:
        last = i == self.pcu.stages - 1
        op = self.program.alu.get(i)
        nxt = self.out if last else self.links[i + 1]
        while True:
            tok = yield from self.links[i].get()
            cycles = 1
            if last and self.program.tail is not None:
                n_trans = self.program.transcendentals * tok[2]
                cycles = max(1, math.ceil(n_trans / self.tail_rate - 1e-9))
            yield self.env.timeout(cycles)
            if op is not None:
                tok[1] = op(tok[1], tok[3])
            if last:
                self.busy_cycles += cycles
                if self.program.tail is not None:
                    tok[1] = self.program.tail(tok[1], tok[3])
            yield nxt.put(tok)

    def _drain(self) -> Iterator[simpy.events.Event]:
        program = self.program
        tree = Wire(self.env, latency=self.pcu.reduction_tree_latency_cycles) if program.reduce else None
        if tree is not None:
            self.env.process(self._accumulate(tree))
        while True:
            tag, values, valid, _ = yield from self.out.get()
            if program.emits_vectors:
                yield self.vector_out.put(Packet(tag, (values, valid), self.out_bytes))
            if tree is not None:
                # one vector per cycle into the tree; the tree output is that vector's reduction
                part = values[0]
                for v in values[1:valid]:
                    part = program.reduce(part, v)
                yield tree.put((tag, part))

    def _accumulate(self, tree: Wire) -> Iterator[simpy.events.Event]:
        for row in self.rows:
            acc = self.program.init
            for _ in range(self.vpr):
                _, part = yield from tree.get()
                acc = self.program.reduce(acc, part)
            yield self.scalar_out.put(Packet(row, acc, SCALAR_BYTES))
