"""Utilisation figures of placed kernels and the table the ``map`` command prints.

A kernel's time is one call as the graph calls it
(:attr:`~sn40l_sim.mapper.placement.PlacedKernel.call_cycles`, :mod:`.calls`): its configuration
charged once over a run of consecutive calls of it, a looped call's iteration pipelined, and the
collectives it waits for (each timed alone, with its staging through the activations' tier); the
kernel-call boundaries (launch, barrier) are left to the engine. So a row's total is what its calls take in the graph, not ``count`` lone
calls, and the table's total is a floor of the engine's step. The ``coll us`` column is the part of
a call spent waiting for collectives (the rest is the kernel's own). The ``bound`` column says what
holds the largest part of the call (:func:`~.calls.as_called`): its configuration, its data tiles'
slowest resource, or ``collective`` when the collectives it waits for do, the tiles that run beside
them counted theirs (a prefill output projection whose all-reduce outlasts its GEMM); the totals'
``time by bound`` adds the rows up by that label.

Utilisations are achieved over that time, against raw peaks: compute is FLOPs over the socket's
BF16 systolic peak, each memory tier's is its bytes over the tier's bandwidth, SRAM is the buffers
held over the capacity of the tiles in use. The table shows a column for the socket's first tier
and for every other tier some kernel uses.

A prefill attention kernel may have been mapped in two versions, its FlashAttention edge tiles
exact or padded to whole tiles (:mod:`sn40l_sim.models.flash`); a row whose kernel is the padded
version ends with :data:`PADDED_MARK`, and :func:`padded_footnotes` says what that means and what it saved.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_socket, example_gemm_kernel
>>> from sn40l_sim.mapper.kernel import map_kernel
>>> socket = example_socket()
>>> u = utilisation(socket, map_kernel(socket, example_gemm_kernel()))
>>> 0.0 < u.compute <= 1.0, u.memory["hbm"] < u.compute   # a GEMM uses its PCUs more than HBM
(True, True)
"""
from __future__ import annotations

from dataclasses import dataclass

from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.mapper.placement import PlacedKernel
from sn40l_sim.models.flash import PADDED_SAVING_NOTE, padded_tile_tokens

#: what a row's name ends with when the mapper kept the kernel's version with its FlashAttention
#: edge tiles padded (:mod:`sn40l_sim.models.flash`): no space, so a row still splits into its cells
PADDED_MARK = "[padded]"


@dataclass(frozen=True)
class Utilisation:
    """Fractions of peak one placed kernel achieves over one call as it is called."""

    compute: float
    sram: float
    #: tier -> fraction of the tier's peak bandwidth (every tier of the socket)
    memory: dict[str, float]


def utilisation(socket: SocketSpec, pk: PlacedKernel) -> Utilisation:
    """Compute, SRAM and per-tier memory utilisation of ``pk`` over one call as it is called
    (``call_cycles``; 0 for a kernel of no cycles), each a fraction of the socket's peak.

    Examples
    --------
    Llama-3.1-8B's LM head (:func:`~sn40l_sim.mapper.kernel.map_kernel`'s example): a decode step's
    8 rows leave the PCUs idle while the weights stream at 39% of the socket's HBM peak, as much as
    the AGCUs of the one tile it runs on draw:

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> from sn40l_sim.ir import ParallelPlan, Shape
    >>> from sn40l_sim.mapper import map_kernel
    >>> from sn40l_sim.models.builder import build_graph
    >>> from sn40l_sim.models.loader import load_model
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> graph = build_graph(load_model("graphs/llama3_1_8b.yaml"), Shape("decode", 8, 0, 1024), ParallelPlan(tp=8))
    >>> u = utilisation(socket, map_kernel(socket, graph.kernels()[-2]))
    >>> f"{u.compute:.1%}", f"{u.memory['hbm']:.0%}", u.memory["ddr"]
    ('0.8%', '38%', 0.0)
    """
    seconds = pk.call_cycles / socket.clock_hz
    if seconds <= 0:
        return Utilisation(0.0, 0.0, dict.fromkeys(socket.memory, 0.0))
    sram_cap = socket.tile.pmus * socket.pmu.capacity_bytes
    used_tiles = [b for b in pk.sram_bytes_per_tile if b] or [0]
    return Utilisation(
        compute=pk.kernel.flops / seconds / figures.peak_flops(socket, "bf16"),
        sram=max(used_tiles) / sram_cap,
        memory={tier: _fraction(pk.tier_bytes.get(tier, 0), seconds, figures.memory_bytes_per_s(socket, tier))
                for tier in socket.memory})


def _fraction(n_bytes: float, seconds: float, peak: float) -> float:
    return n_bytes / seconds / peak if seconds and peak else 0.0


def shown_tiers(socket: SocketSpec, kernels: tuple[PlacedKernel, ...] | list[PlacedKernel]) -> tuple[str, ...]:
    """Tiers the ``map`` table shows: the socket's first, and every other one a kernel uses."""
    used = {tier for pk in kernels for tier, n in pk.tier_bytes.items() if n}
    return tuple(tier for i, tier in enumerate(socket.memory) if i == 0 or tier in used)


@dataclass(frozen=True)
class Row:
    """One line of the ``map`` table: a kernel, or ``count`` consecutive-or-not identical ones."""

    name: str
    count: int
    placed: PlacedKernel

    @property
    def total_cycles(self) -> int:
        """Cycles of all ``count`` calls, each as it is called (``call_cycles``)."""
        return self.count * self.placed.call_cycles


def collapse(kernels: tuple[PlacedKernel, ...] | list[PlacedKernel]) -> list[Row]:
    """One row per distinct kernel signature called alike, in order of first appearance, with its
    count.

    The row is named by a pattern every kernel of it matches (``*`` for any prefix, as a shell
    pattern): its kernel's name when it is one kernel, ``*.ffn`` for ``L03.ffn`` .. ``L60.ffn``,
    ``*sampling`` for ``sampling`` and ``MTP0.sampling`` (named ``sampling`` x2, the row read as one
    kernel called twice where the graph and the trace show two). Calls of one kernel that cost
    differently as they are called (a run of consecutive calls and a lone one) are rows of their own.

    >>> from types import SimpleNamespace as NS
    >>> pk = lambda name: NS(kernel=NS(name=name, signature=lambda: "s"), call_cycles=1, call_bound="hbm")
    >>> [(r.name, r.count) for r in collapse([pk("L03.ffn"), pk("L04.ffn")])]
    [('*.ffn', 2)]
    >>> [(r.name, r.count) for r in collapse([pk("sampling"), pk("MTP0.sampling")])]
    [('*sampling', 2)]
    """
    order: list = []
    rows: dict = {}
    names: dict = {}
    for pk in kernels:
        sig = (pk.kernel.signature(), pk.call_cycles, pk.call_bound)
        if sig not in rows:
            order.append(sig)
            rows[sig] = [pk, 0]
        rows[sig][1] += 1
        names.setdefault(sig, set()).add(pk.kernel.name)
    return [Row(_pattern(names[sig]), rows[sig][1], rows[sig][0]) for sig in order]


def _pattern(names: set[str]) -> str:
    """A name every one of ``names`` matches, ``*`` standing for a layer's prefix (``L03.``)."""
    if len(names) == 1:
        return next(iter(names))
    bases = {name.split(".", 1)[-1] for name in names}
    if len(bases) > 1:
        return "*"
    base = bases.pop()
    return ("*." if all("." in name for name in names) else "*") + base


def format_table(socket: SocketSpec, kernels: tuple[PlacedKernel, ...] | list[PlacedKernel]) -> str:
    """The per-kernel table with a totals line: each kernel's cycles per call as it is called
    (module docstring), times in microseconds at the socket's clock."""
    tiers = shown_tiers(socket, kernels)
    tier_heads = "".join(f"{tier.upper() + '%':>6} " for tier in tiers)
    head = (f"{'kernel':<22} {'x':>4} {'tiles':>5} {'PCU/tile':>8} {'PMU/tile':>8} {'comp%':>6} "
            f"{'SRAM%':>6} {tier_heads}{'bound':<10} {'n_tiles':>8} {'cycles':>11} {'us':>10} {'coll us':>8} {'total us':>11}")
    lines = [head, "-" * len(head)]
    clock = socket.clock_hz
    total = flops = waits = 0
    moved = dict.fromkeys(tiers, 0)
    by_bound: dict[str, int] = {}
    for row in collapse(kernels):
        pk = row.placed
        u = utilisation(socket, pk)
        tier_cells = "".join(f"{100 * u.memory[tier]:>6.1f} " for tier in tiers)
        name = row.name if padded_tile_tokens(pk.kernel) is None else row.name[:22 - len(PADDED_MARK)] + PADDED_MARK
        lines.append(
            f"{name:<22.22} {('x' + str(row.count)) if row.count > 1 else '':>4} {pk.chip_tiles:>5} "
            f"{max(pk.pcus_per_tile, default=0):>8} {max(pk.pmus_per_tile, default=0):>8} "
            f"{100 * u.compute:>6.1f} {100 * u.sram:>6.1f} {tier_cells}{pk.call_bound:<10} "
            f"{pk.n_tiles:>8} {pk.call_cycles:>11} {pk.call_cycles / clock * 1e6:>10.1f} "
            f"{pk.call_collective_cycles / clock * 1e6:>8.1f} {row.total_cycles / clock * 1e6:>11.1f}")
        total += row.total_cycles
        waits += row.count * pk.call_collective_cycles
        flops += row.count * pk.kernel.flops
        for tier in tiers:
            moved[tier] += row.count * pk.tier_bytes.get(tier, 0)
        by_bound[pk.call_bound] = by_bound.get(pk.call_bound, 0) + row.total_cycles
    lines.append("-" * len(head))
    seconds = total / clock
    comp = flops / seconds / figures.peak_flops(socket, "bf16") if seconds else 0.0
    memory = "".join(f", {tier.upper()} {100 * _fraction(moved[tier], seconds, figures.memory_bytes_per_s(socket, tier)):.1f}% "
                     "of peak" for tier in tiers)
    shares = ", ".join(f"{b} {100 * c / total:.1f}%" for b, c in sorted(by_bound.items(), key=lambda kv: -kv[1])) if total else ""
    lines.append(f"{'total':<22} {len(kernels):>4} kernels, {total} cycles = {seconds * 1e6:.1f} us (waiting for "
                 f"collectives {waits / clock * 1e6:.1f} us); compute {100 * comp:.1f}% of peak{memory}; "
                 f"time by bound: {shares}")
    return "\n".join(lines)


def padded_footnotes(kernels: tuple[PlacedKernel, ...] | list[PlacedKernel]) -> list[str]:
    """One line per row of the ``map`` table whose kernel the mapper kept with its FlashAttention
    edge tiles padded (marked :data:`PADDED_MARK`): the tile they were padded to and the cycles a
    call it saves over the exact edge tiles, by the objective the mapper chose by. Empty when no
    kernel was padded (a prompt of whole tiles, or one whose exact edge tiles were faster)."""
    lines = []
    for row in collapse(kernels):
        tile = padded_tile_tokens(row.placed.kernel)
        if tile is None:
            continue
        saved = dict(row.placed.kernel.notes).get(PADDED_SAVING_NOTE)
        faster = f" (faster than the exact edge tiles by {saved:,.0f} cycles a call)" if saved is not None else ""
        name = row.name[:22 - len(PADDED_MARK)] + PADDED_MARK
        lines.append(f"{name}: FlashAttention edge tiles padded to whole {tile:,}-token tiles, the padding "
                     f"masked{faster}")
    return lines
