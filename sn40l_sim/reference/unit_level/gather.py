"""Unit-level run of a gather: indexed reads from one PMU into another across the mesh.

The table sits row-major in a PMU (row ``r`` at byte ``r * row_bytes``); the indices are held by
its address generators. Each row is read as one access (or several full-port accesses when it is
wider than the port); accesses issue in index order, as many per cycle as the address generators,
the port width and the banks allow (two accesses to one bank in a cycle: the second waits). The
values are packed into vectors of ``lanes`` BF16 values and cross the mesh to the output PMU.
"""
from __future__ import annotations

import numpy as np
import simpy

from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.tile_kernels import GatherKernel
from sn40l_sim.reference.unit_level.fabric import PMU, Packet, Wire, mesh_path
from sn40l_sim.reference.unit_level.gemm import BF16_BYTES, UnitLevelResult


def simulate_gather(kernel: GatherKernel, socket: SocketSpec) -> UnitLevelResult:
    """Run ``kernel`` cycle by cycle; return cycles and the gathered rows (with NumPy's answer).

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> res = simulate_gather(GatherKernel(table_rows=256, row_elems=8, n_indices=64), socket)
    >>> bool((res.outputs["out"] == res.outputs["expected"]).all())
    True
    """
    env = simpy.Environment()
    rng = np.random.default_rng(kernel.seed)
    row_elems, lanes = kernel.row_elems, socket.pcu.lanes
    row_bytes = row_elems * BF16_BYTES
    if kernel.table_rows * row_bytes > socket.pmu.capacity_bytes:
        raise ValueError("the table does not fit in one PMU")
    table = rng.standard_normal((kernel.table_rows, row_elems))
    indices = rng.integers(0, kernel.table_rows, size=kernel.n_indices)
    src, dst = PMU(env, socket.pmu, "table"), PMU(env, socket.pmu, "out")
    src.store("table", table)
    port = socket.pmu.banks * socket.pmu.bank_width_bytes * socket.pmu.read_ports
    flat = Wire(env)
    path_in, path_out = mesh_path(env, socket.tile.vector_network, kernel.hops)
    total = kernel.n_indices * row_elems
    n_packets = -(-total // lanes)
    end = {"t": 0}

    def reader():
        for idx in indices:
            for offset in range(0, row_bytes, port):
                nbytes = min(port, row_bytes - offset)
                yield from src.access("read", int(idx) * row_bytes + offset, nbytes)
                first = offset // BF16_BYTES
                yield flat.put(table[idx, first:first + nbytes // BF16_BYTES])

    def packer():
        pending: list[float] = []
        sent = 0
        while sent < n_packets:
            values = yield from flat.get()
            pending.extend(values)
            while len(pending) >= lanes or (pending and sent == n_packets - 1
                                             and len(pending) == total - sent * lanes):
                chunk, pending = pending[:lanes], pending[lanes:]
                yield path_in.put(Packet(sent, np.array(chunk), len(chunk) * BF16_BYTES))
                sent += 1

    def writer():
        for _ in range(n_packets):
            pkt = yield from path_out.get()
            yield from dst.access("write", pkt.tag * lanes * BF16_BYTES, pkt.nbytes)
            dst.store(pkt.tag, pkt.data)
        end["t"] = env.now

    for proc in (reader(), packer(), writer()):
        env.process(proc)
    env.run()
    out = np.concatenate([dst.data[i] for i in range(n_packets)]).reshape(kernel.n_indices, row_elems)
    busy = {"table.read": src.ports["read"].busy_cycles, "out.write": dst.ports["write"].busy_cycles}
    return UnitLevelResult(cycles=int(end["t"]), outputs={"out": out, "expected": table[indices]},
                           busy_cycles=busy)
