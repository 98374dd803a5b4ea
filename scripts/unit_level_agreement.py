"""The mapper and the tile-level formulas against the unit-level simulation on kernels nobody chose
(tests/reference/test_mapper_vs_unit_level.py and test_unit_level.py hold them on chosen ones).

    python scripts/unit_level_agreement.py                   # 60 random kernels, seed 0, a few minutes
    python scripts/unit_level_agreement.py --cases 200 --seed 3

A case draws, from a fixed seed, a kernel of the unit-level simulation
(:mod:`sn40l_sim.hardware.units.tile_kernels`: a GEMM of up to 128 x 128 x 128 on the PCUs its
column blocks split over, any datatype of the socket; one attention head of up to 64 queries, 128
keys and a head dimension of 64 in query tiles of 1 to 32 rows; a gather of up to 2,048 rows of 1
to 128 values), operands 1 to 3 hops away, and a socket with up to three fields changed the way
the test variants change them (PMU banks and bank width, address generators, hop latencies,
pipeline and reduction-tree latency, link width, tail-stage rate, ``pcu.accumulator_dtype``). It
runs the kernel cycle by cycle, through :func:`~sn40l_sim.hardware.units.tile_kernels.tile_level_cycles`
at the same hops, and through the mapper on the layout's units
(``tests/reference/unit_level_kernels.py``) against the unit level at one hop, the only distance
the mapper places a stage's PMUs at, and prints both errors per case, their distributions and the
cases beyond the tests' tolerances (tile level 5%, mapper 10%).

The ``layout`` column names the cases whose layout the mapper does not make, so that its error
there is no claim about the mapper: ``rows`` (query tiles of fewer rows than the PCU's stages, the
fewest rows it cuts a GEMM to), ``tiles`` (a number of query tiles that is not a power of two: it
halves an operator into pieces, and 3 data tiles get 4 pieces, two in some tiles), ``addresses``
(one address a cycle: a unit-level GEMM keeps its partial sums in one PMU, whose address generator
then serves two accesses a row, where the mapper stripes a stage's buffers over all its PMUs).
Exit status 1 when a case of a layout the mapper makes is beyond a tolerance, 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "reference")]

from unit_level_cases import SOCKET, variant  # noqa: E402
from unit_level_kernels import as_fused, budget_for  # noqa: E402

from sn40l_sim.hardware.units.tile_kernels import (  # noqa: E402
    AttentionKernel,
    GatherKernel,
    GemmKernel,
    tile_level_cycles,
)
from sn40l_sim.mapper import map_kernel  # noqa: E402
from sn40l_sim.reference.unit_level import simulate  # noqa: E402
from sn40l_sim.study.calibration import bounds  # noqa: E402

TILE_TOLERANCE, MAPPER_TOLERANCE = 0.05, 0.10
#: socket fields a case may change and the values it draws from (each a move of a test variant)
FIELDS = [
    ("pmu__banks", [8, 16, 64]),
    ("pmu__bank_width_bytes", [2, 8]),
    ("pmu__addresses_per_cycle", [1, 2, 8]),
    ("tile__vector_network__hop_latency_cycles", [2, 4, 6]),
    ("tile__scalar_network__hop_latency_cycles", [2, 4, 6]),
    ("tile__control_network__hop_latency_cycles", [2, 4, 6]),
    ("pcu__pipeline_latency_cycles", [6, 12, 16]),
    ("pcu__reduction_tree_latency_cycles", [1, 9]),
    ("tile__vector_network__link_bytes_per_cycle", [32, 64, 256]),
    ("pcu__tail_stage__transcendentals_per_lane_per_cycle", [0.25, 0.5]),
    ("pcu__accumulator_dtype", ["bf16", "fp16"]),
]


def draw_kernel(rng: random.Random) -> GemmKernel | AttentionKernel | GatherKernel:
    """A kernel small enough for a few seconds of unit-level simulation."""
    kind = rng.choice(["gemm", "gemm", "attention", "attention", "gather"])
    hops = rng.choice([1, 1, 2, 3])
    if kind == "gemm":
        m, k, n = rng.randint(1, 128), rng.randint(1, 128), rng.randint(1, 128)
        blocks = -(-n // SOCKET.pcu.lanes)
        pcus = rng.choice([p for p in range(1, blocks + 1) if blocks % p == 0])
        return GemmKernel(m, k, n, pcus, hops, rng.choice(["bf16", "bf16", "int8", "fp32", "fp16"]))
    if kind == "attention":
        q_tile = rng.choice([1, 2, 4, 8, 16, 32])
        tiles = rng.randint(1, max(1, 64 // q_tile))
        return AttentionKernel(q_tile * tiles, rng.randint(1, 128), rng.randint(1, 64), q_tile, hops)
    row = rng.choice([1, 2, 3, 4, 8, 16, 24, 64, 100, 128])
    rows = rng.randint(16, min(4096, int(SOCKET.pmu.capacity_bytes) // (2 * row)))
    return GatherKernel(rows, row, rng.randint(1, 2048), hops, rng.randint(0, 99))


def draw_changes(rng: random.Random) -> dict[str, object]:
    """Up to three socket fields changed (none in a third of the cases)."""
    return {field: rng.choice(values) for field, values in rng.sample(FIELDS, rng.choice([0, 0, 1, 1, 2, 3]))}


def layout_mapper_skips(kernel, changes: dict[str, object]) -> str:
    """Why the mapper does not make this case's layout (module docstring), or ``""``."""
    if isinstance(kernel, AttentionKernel):
        if kernel.q_tile < min(kernel.q_len, SOCKET.pcu.stages):
            return "rows"
        tiles = kernel.q_len // kernel.q_tile
        if tiles & (tiles - 1):
            return "tiles"
    if changes.get("pmu__addresses_per_cycle") == 1 and not isinstance(kernel, GatherKernel):
        return "addresses"
    return ""


def mapped_cycles(kernel, socket) -> int:
    """The mapper's cycles on the layout's units, call overhead excluded, configuration loaded at
    the fastest rate the schema allows (as tests/reference/test_mapper_vs_unit_level.py maps)."""
    fastest = bounds(socket, "calibrated.config_load_bytes_per_s")[1]
    free = socket.calibrated.model_copy(update={"config_load_bytes_per_s": fastest})
    placed = map_kernel(socket.model_copy(update={"calibrated": free}), as_fused(kernel), budget=budget_for(kernel))
    return placed.cycles - placed.overhead_cycles


def run_case(kernel, changes: dict[str, object]) -> dict[str, object]:
    """Unit level and tile level at the kernel's hops, unit level and mapper at one hop."""
    socket = variant(**changes) if changes else SOCKET
    unit = simulate(kernel, socket).cycles
    near = replace(kernel, hops=1)
    unit_near = unit if kernel.hops == 1 else simulate(near, socket).cycles
    tile, mapper = tile_level_cycles(kernel, socket), mapped_cycles(near, socket)
    return dict(kernel=kernel, changes=changes, unit=unit, tile=tile, unit_near=unit_near, mapper=mapper,
                tile_error=(tile - unit) / unit, mapper_error=(mapper - unit_near) / unit_near,
                layout=layout_mapper_skips(kernel, changes))


def spread(errors: list[float]) -> str:
    """Median, 90th percentile and worst of the absolute errors."""
    if not errors:
        return "no cases"
    ranked = sorted(abs(e) for e in errors)
    return (f"median {statistics.median(ranked):.1%}, 90th percentile {ranked[int(0.9 * (len(ranked) - 1))]:.1%}, "
            f"worst {ranked[-1]:.1%} ({len(ranked)} cases)")


def main(argv: list[str] | None = None) -> int:
    """Run the cases and print the table; exit 1 if a case the mapper lays out is off."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=60, help="random kernels to run (default 60)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draw (default 0)")
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error(f"--cases: expected a positive number of cases, got {args.cases}")
    rng = random.Random(args.seed)
    rows = []
    print(f"{'kernel':<72} {'socket changes':<58} {'unit':>6} {'tile':>6} {'error':>7}  "
          f"{'unit@1':>6} {'mapper':>6} {'error':>7}  layout")
    for _ in range(args.cases):
        row = run_case(draw_kernel(rng), draw_changes(rng))
        rows.append(row)
        changes = ", ".join(f"{k.replace('__', '.')}={v}" for k, v in row["changes"].items()) or "-"
        print(f"{row['kernel']!s:<72} {changes:<58} {row['unit']:>6} {row['tile']:>6} {row['tile_error']:>+7.1%}  "
              f"{row['unit_near']:>6} {row['mapper']:>6} {row['mapper_error']:>+7.1%}  {row['layout'] or '-'}",
              flush=True)
    made = [r for r in rows if not r["layout"]]
    print(f"\ntile level vs unit level: {spread([r['tile_error'] for r in rows])}")
    print(f"mapper vs unit level, layouts it makes: {spread([r['mapper_error'] for r in made])}")
    print(f"mapper vs unit level, layouts it does not make: {spread([r['mapper_error'] for r in rows if r['layout']])}")
    off = [r for r in rows if abs(r["tile_error"]) > TILE_TOLERANCE
           or (not r["layout"] and abs(r["mapper_error"]) > MAPPER_TOLERANCE)]
    for r in off:
        print(f"beyond tolerance: {r['kernel']} {r['changes'] or ''}: tile level {r['tile']} vs {r['unit']} "
              f"({r['tile_error']:+.1%}), mapper {r['mapper']} vs {r['unit_near']} ({r['mapper_error']:+.1%})")
    return 1 if off else 0


if __name__ == "__main__":
    sys.exit(main())
