"""Unit-level run of one attention head on one tile: QK^T, softmax, PV, tile by tile.

Layout: Q, K^T and V preloaded in their PMUs; per query tile, a systolic PCU computes
``S = Q K^T`` (1/sqrt(d) folded into Q) into a double-buffered S PMU (FP32); three SIMD PCUs run
the softmax row by row: the first takes the row max through the cross-lane tree, the second
computes ``exp(s - max)`` in its tail stage (writing E to the P PMU in BF16) and the row sum
through the tree, the third divides E by the sum in its tail stage and writes P; a second
systolic PCU computes ``O = P V`` into a double-buffered O PMU. Buffers are handed over with
control tokens when a whole tile is written (or read), ``hops x control hop latency`` later.
"""
from __future__ import annotations

import math

import numpy as np
import simpy

from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.tile_kernels import AttentionKernel
from sn40l_sim.reference.unit_level.fabric import PMU, Packet, forward, mesh_path, signal_after
from sn40l_sim.reference.unit_level.gemm import BF16_BYTES, UnitLevelResult
from sn40l_sim.reference.unit_level.simd import SimdPCU, SimdProgram
from sn40l_sim.reference.unit_level.systolic import (
    SUM_BYTES,
    GemmWiring,
    psum_address,
    systolic_gemm,
    systolic_geometry,
)


def simulate_attention(kernel: AttentionKernel, socket: SocketSpec, seed: int = 0) -> UnitLevelResult:
    """Run one attention head cycle by cycle; return cycles and ``O`` (with NumPy's answer).

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> res = simulate_attention(AttentionKernel(q_len=16, kv_len=32, head_dim=16, q_tile=8), socket)
    >>> bool(np.allclose(res.outputs["O"], res.outputs["expected"]))
    True
    """
    if kernel.q_len % kernel.q_tile:
        raise ValueError(f"q_len {kernel.q_len} is not a multiple of q_tile {kernel.q_tile}")
    env = simpy.Environment()
    rng = np.random.default_rng(seed)
    qt, kv, d, hops = kernel.q_tile, kernel.kv_len, kernel.head_dim, kernel.hops
    tiles = kernel.q_len // qt
    pcu, lanes = socket.pcu, socket.pcu.lanes
    nc = -(-kv // lanes)                      # S vectors per row
    s_vector = lanes * SUM_BYTES[pcu.accumulator_dtype]  # S is the QK^T GEMM's last partial sums, left in its output PMU
    q = rng.standard_normal((kernel.q_len, d)) / math.sqrt(d)
    k = rng.standard_normal((kv, d))
    v = rng.standard_normal((kv, d))
    ctrl = hops * socket.tile.control_network.hop_latency_cycles

    def pmu(name: str) -> PMU:
        return PMU(env, socket.pmu, name)

    q_pmu, k_pmu, v_pmu = pmu("Q"), pmu("K"), pmu("V")
    q_pmu.store("Q", q)
    k_pmu.store("KT", k.T.copy())
    v_pmu.store("V", v)
    s_pmus, p_pmus, o_pmus = [pmu("S0"), pmu("S1")], [pmu("P0"), pmu("P1")], [pmu("O0"), pmu("O1")]
    ev = {name: [env.event() for _ in range(tiles)] for name in ("qk", "sm", "s_free", "pv")}
    end = {"t": 0}

    def after(name: str, t: int):
        return ev[name][t] if 0 <= t < tiles else None

    # --- S = Q K^T --------------------------------------------------------------------------
    qk = GemmWiring(
        a_pmu=lambda t: q_pmu,
        a_slice=lambda t, row, k0, k1: ("Q", ((t * qt + row) * d + k0) * BF16_BYTES,
                                        (k1 - k0) * BF16_BYTES,
                                        lambda s, r=t * qt + row: s[r, k0:k1]),
        b_pmus=[k_pmu],
        b_vector=lambda nb, kk: None if kk >= d else (
            "KT", (kk * kv + nb * lanes) * BF16_BYTES, (min(kv, (nb + 1) * lanes) - nb * lanes) * BF16_BYTES,
            lambda s: s[kk, nb * lanes:(nb + 1) * lanes]),
        c_pmu=lambda t, p: s_pmus[t % 2],
        tile_ready=lambda t: after("s_free", t - 2),
        tile_done=lambda t: signal_after(env, ev["qk"][t], ctrl))
    qk_units = systolic_gemm(env, socket, tiles, qt, d, kv, 1, hops, qk)
    k_last_qk = -(-d // systolic_geometry(pcu, "bf16")[1]) - 1

    # --- softmax: row max | exp and row sum | normalise ----------------------------------------
    rows = [(t, row) for t in range(tiles) for row in range(qt)]
    vector_bytes = lanes * BF16_BYTES
    pcu_max = SimdPCU(env, pcu, SimdProgram(reduce=max, init=-math.inf, emits_vectors=False),
                      rows, nc, vector_bytes)
    pcu_exp = SimdPCU(env, pcu, SimdProgram(alu={0: lambda x, s: x - s}, tail=lambda x, s: np.exp(x),
                                            transcendentals=1, reduce=lambda a, b: a + b,
                                            needs_scalar=True), rows, nc, vector_bytes)
    pcu_norm = SimdPCU(env, pcu, SimdProgram(tail=lambda x, s: x / s, transcendentals=1,
                                             needs_scalar=True), rows, nc, vector_bytes)
    net, scalar_net = socket.tile.vector_network, socket.tile.scalar_network
    for src, dst, nw in ((pcu_max.scalar_out, pcu_exp.scalar_in, scalar_net),
                         (pcu_exp.scalar_out, pcu_norm.scalar_in, scalar_net)):
        path_in, path_out = mesh_path(env, nw, hops)
        env.process(forward(src, path_in))
        env.process(forward(path_out, dst))

    def s_requests(t):
        for row in range(qt):
            for c in range(nc):
                valid = min(lanes, kv - c * lanes)
                yield ((t, 0, c, k_last_qk, row), psum_address(row, c, nc, s_vector), s_vector,
                       lambda s, tag=(t, row, c), valid=valid: Packet(tag, (s, valid), s_vector))

    s_reads_done = [0] * tiles

    def s_reader(into):
        path_in, path_out = mesh_path(env, net, hops)
        env.process(forward(path_out, into))
        for t in range(tiles):
            gate = [e for e in (ev["qk"][t], after("pv", t - 2)) if e is not None]
            yield env.all_of(gate)
            yield from s_pmus[t % 2].reader(s_requests(t), [path_in])
            s_reads_done[t] += 1
            if s_reads_done[t] == 2:
                signal_after(env, ev["s_free"][t], ctrl)

    env.process(s_reader(pcu_max.inp))
    env.process(s_reader(pcu_exp.inp))

    e_base, p_base = 0, qt * nc * vector_bytes

    def e_place(pkt):
        t, row, c = pkt.tag
        return ("E", t, row, c), e_base + (row * nc + c) * vector_bytes, pkt.data

    def write_path(src, place, count, on_write=None):
        path_in, path_out = mesh_path(env, net, hops)
        env.process(forward(src, path_in))
        env.process(_route_writes(path_out, count, place, lambda key: p_pmus[key[1] % 2], on_write))

    write_path(pcu_exp.vector_out, e_place, len(rows) * nc)

    def e_requests(t):
        for row in range(qt):
            for c in range(nc):
                yield (("E", t, row, c), e_base + (row * nc + c) * vector_bytes, vector_bytes,
                       lambda s, tag=(t, row, c): Packet(tag, s, vector_bytes))

    def e_reader():
        path_in, path_out = mesh_path(env, net, hops)
        env.process(forward(path_out, pcu_norm.inp))
        for t in range(tiles):
            yield from p_pmus[t % 2].reader(e_requests(t), [path_in])

    env.process(e_reader())
    p_rows: dict = {}
    written = [0] * tiles

    def p_place(pkt):
        t, row, c = pkt.tag
        return ("P", t, row, c), p_base + (row * nc + c) * vector_bytes, pkt.data

    def p_written(key):
        _, t, row, c = key
        parts = p_rows.setdefault((t, row), {})
        values, valid = p_pmus[t % 2].data[key]
        parts[c] = values[:valid]
        if len(parts) == nc:
            p_pmus[t % 2].store(("Prow", t, row), np.concatenate([parts[i] for i in range(nc)]))
            written[t] += 1
            if written[t] == qt:
                signal_after(env, ev["sm"][t], ctrl)

    write_path(pcu_norm.vector_out, p_place, len(rows) * nc, p_written)

    # --- O = P V -----------------------------------------------------------------------------
    def pv_done(t):
        end["t"] = env.now
        signal_after(env, ev["pv"][t], ctrl)

    pv = GemmWiring(
        a_pmu=lambda t: p_pmus[t % 2],
        a_slice=lambda t, row, k0, k1: (("Prow", t, row), p_base + row * nc * vector_bytes + k0 * BF16_BYTES,
                                        (k1 - k0) * BF16_BYTES, lambda s: s[k0:k1]),
        b_pmus=[v_pmu],
        b_vector=lambda nb, kk: None if kk >= kv else (
            "V", (kk * d + nb * lanes) * BF16_BYTES, (min(d, (nb + 1) * lanes) - nb * lanes) * BF16_BYTES,
            lambda s: s[kk, nb * lanes:(nb + 1) * lanes]),
        c_pmu=lambda t, p: o_pmus[t % 2],
        tile_ready=lambda t: ev["sm"][t],
        tile_done=pv_done)
    pv_units = systolic_gemm(env, socket, tiles, qt, kv, d, 1, hops, pv)
    env.run()

    k_last_pv = -(-kv // systolic_geometry(pcu, "bf16")[1]) - 1
    nb_pv = -(-d // lanes)
    out = np.zeros((kernel.q_len, nb_pv * lanes))
    for t in range(tiles):
        for j in range(nb_pv):
            for row in range(qt):
                out[t * qt + row, j * lanes:(j + 1) * lanes] = o_pmus[t % 2].data[(t, 0, j, k_last_pv, row)]
    scores = q @ k.T
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    expected = (weights / weights.sum(axis=1, keepdims=True)) @ v
    busy = {"qk": qk_units[0].busy_cycles, "pv": pv_units[0].busy_cycles,
            "softmax_max": pcu_max.busy_cycles, "softmax_exp": pcu_exp.busy_cycles,
            "softmax_norm": pcu_norm.busy_cycles,
            "S.read": sum(p.ports["read"].busy_cycles for p in s_pmus)}
    return UnitLevelResult(cycles=int(end["t"]), outputs={"O": out[:, :d], "expected": expected},
                           busy_cycles=busy)


def _route_writes(inbound, count, place, pmu_of, on_write):
    """Process: write ``count`` packets, each into the PMU its key names, then report it."""
    for _ in range(count):
        pkt = yield from inbound.get()
        key, address, value = place(pkt)
        target = pmu_of(key)
        yield from target.access("write", address, pkt.nbytes)
        target.store(key, value)
        if on_write is not None:
            on_write(key)
