"""Where Table 5 row 1's two decode steps differ, kernel by kernel and cause by cause: the
measurement of docs/validation.md ("Table 5 row 1, kernel by kernel").

    python scripts/table5_row1.py                     # the main experiment's two points
    python scripts/table5_row1.py --set execution.idle_units=priced

The SnapStream paper measured DeepSeek-R1's decode step on one 16-socket node at 88.5 ms with a
full 133K cache at batch 16 and 83.8 ms with SnapStream's 32K caches at batch 64 (docs/reference.md
§3); the simulator's ``decode_step_breakdown_s`` gives each cause a total over the step, which hides
where a cause comes from and lets opposite changes in different kernels cancel. This script times
both steps of ``experiments/deepseek_tp16.yaml`` as ``run`` does (``Assembly.step_timer``, each at
its maximum batch and its cache length) and splits each kernel's share of the step's critical path
by cause (:func:`~sn40l_sim.engine.breakdown.kernel_causes`, the per-kernel parts whose sum is the
breakdown). The kernels are grouped by role: the three dense layers' MLA and FFN, the MoE layers'
MLA and FFN, the MTP module's kernels, and the rest by name.

Two things to read it by:

* ``attention`` and ``other`` share a compute-bound kernel's streaming time by FLOPs, so a batch
  whose projections grow moves time from the first to the second without the kernel being longer:
  their sum (``compute``, printed too) is what the kernel spent computing.
* a group's row is every call of it in the step (the MoE layers' kernels are 58 calls each).

Prints the two steps, then one table of SnapStream less full cache in ms (negative: the batch-64
step pays less), then each point's own table. Nothing is read from a file of expected values.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from sn40l_sim.engine.breakdown import CATEGORIES, kernel_causes  # noqa: E402
from sn40l_sim.study.assemble import assemble  # noqa: E402
from sn40l_sim.study.runner import simulate_assembly  # noqa: E402
from sn40l_sim.study.sweep.base import experiment_with_sets  # noqa: E402
from sn40l_sim.study.sweep.sets import parse_sets  # noqa: E402

MAIN = REPO / "experiments" / "deepseek_tp16.yaml"
#: column headings of the causes of :data:`~sn40l_sim.engine.breakdown.CATEGORIES`
SHORT = {"weights_streaming": "weights", "kv_reads": "kv", "activations": "act", "attention_compute": "attn",
         "other_compute": "other", "collectives": "coll", "launch": "launch", "synchronisation": "sync",
         "configuration": "config", "pipeline_fill": "fill", "idle": "idle"}
_LAYER = re.compile(r"^L(\d+)\.(.+)$")


def group_of(name: str, dense_layers: int) -> str:
    """The role of a kernel call named ``name`` in a decode graph whose first ``dense_layers``
    layers are dense: ``dense.`` or ``moe.`` and its kind for a layer's kernel, ``mtp.`` and its kind
    for the MTP module's, else the name.

    >>> [group_of(n, 3) for n in ("L00.mla", "L03.ffn", "L60.mla", "MTP1.lm_head", "lm_head")]
    ['dense.mla', 'moe.ffn', 'moe.mla', 'mtp.lm_head', 'lm_head']
    """
    layer = _LAYER.match(name)
    if layer:
        return f"{'dense' if int(layer.group(1)) < dense_layers else 'moe'}.{layer.group(2)}"
    if name.startswith("MTP") and "." in name:
        return "mtp." + name.split(".", 1)[1]
    return name


def step_parts(experiment: Path = MAIN, sets: tuple[str, ...] = ()) -> dict[str, tuple[float, dict[str, dict[str, float]]]]:
    """Each point of ``experiment`` (with ``run --set`` items ``sets``): its decode step in ms at
    the batch and cache length ``run`` records, and ms by group (:func:`group_of`) and cause, each
    kernel's gap before it counted as ``idle``: a point's parts add up to its step."""
    exp, hardware = experiment_with_sets(experiment, parse_sets(list(sets)))
    asm = assemble(exp, hardware_overrides=hardware or None)
    records = simulate_assembly(asm, serve=False, without_prefill=[p.name for p in asm.points])
    dense = asm.model.dense_layers
    ms = 1e3 / asm.node.socket.clock_hz
    out = {}
    for point, record in zip(asm.points, records, strict=True):
        setup = asm.setup(point)
        step = asm.step_timer(setup).decode_step(record["batch"], record["kv_len"], setup.speculation.drafts)
        groups: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(CATEGORIES, 0.0))
        for i, gap, parts in kernel_causes(step.kernels, dict(step.byte_seconds)):
            row = groups[group_of(step.kernels[i].name, dense)]
            row["idle"] += gap * ms
            for cause, cycles in parts.items():
                row[cause] += cycles * ms
        out[point.name] = (step.seconds * 1e3, dict(groups))
    return out


def table(groups: dict[str, dict[str, float]]) -> list[str]:
    """``groups`` (ms by group and cause) as aligned lines, with ``compute`` (attention + other),
    each group's total and a total row."""
    causes = [c for c in CATEGORIES if any(abs(row[c]) >= 5e-4 for row in groups.values())]
    head = f"{'':12}" + "".join(f"{SHORT[c]:>8}" for c in causes) + f"{'compute':>9}{'total':>9}"
    lines = [head]
    total = dict.fromkeys(CATEGORIES, 0.0)
    for name in sorted(groups):
        row = groups[name]
        for c in CATEGORIES:
            total[c] += row[c]
        lines.append(_line(name, row, causes))
    lines.append(_line("total", total, causes))
    return lines


def _line(name: str, row: dict[str, float], causes: list[str]) -> str:
    compute = row["attention_compute"] + row["other_compute"]
    return (f"{name:12}" + "".join(f"{row[c]:8.3f}" for c in causes) + f"{compute:9.3f}"
            f"{sum(row.values()):9.3f}")


def difference(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """``b`` less ``a``, group by group and cause (a group one lacks counts as zero there)."""
    zero = dict.fromkeys(CATEGORIES, 0.0)
    return {g: {c: b.get(g, zero)[c] - a.get(g, zero)[c] for c in CATEGORIES} for g in set(a) | set(b)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", type=Path, default=MAIN, help="an experiment of two points (default the main one)")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", dest="sets",
                        help="change one field of the experiment or its hardware, as run --set; repeatable")
    args = parser.parse_args(argv)
    parts = step_parts(args.experiment, tuple(args.sets))
    if len(parts) != 2:
        parser.error(f"argument --experiment: expected two points, {args.experiment} has {len(parts)}")
    (first, (step_a, a)), (second, (step_b, b)) = parts.items()
    print(f"decode step: {first} {step_a:.2f} ms, {second} {step_b:.2f} ms ({second} less {first}: "
          f"{step_b - step_a:+.2f} ms)")
    print(f"\n{second} less {first} (ms)")
    print("\n".join(table(difference(a, b))))
    for name, (_, groups) in parts.items():
        print(f"\n{name} (ms)")
        print("\n".join(table(groups)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
