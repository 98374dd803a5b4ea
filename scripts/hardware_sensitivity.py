"""What would change if the hardware changed? Halve and double each numeric field of the SN40L
socket and node description, one at a time, and print how three figures move (docs/validation.md,
"Sensitivity to each hardware field").

    python scripts/hardware_sensitivity.py                        # every field, ~10 minutes on 2 cores
    python scripts/hardware_sensitivity.py --fields clock_hz p2p.latency_s --factors 0.5 2

A field is a numeric leaf of ``hw_configs/sn40l.yaml`` (changed as ``--set hardware.socket.<field>``)
or of ``hw_configs/sn40l_node16.yaml`` (``--set hardware.<field>``), its value times each factor
(an integer field keeps its type, so halving 1 asks for 0.5 and must be refused with exit status
2). The calibrated values (``calibrated:``, ``memory.hbm.efficiency``), the published totals the
loader checks against (``stated:``) and the socket count (``experiments/socket_scaling.yaml``) are
left alone. Each change is run (``python -m sn40l_sim run ... --no-plot --quiet``) on:

``ds_full``, ``ds_snap``
    The main experiment (``experiments/deepseek_tp16.yaml``): DeepSeek-R1's decode step at its
    largest batch, full cache and SnapStream (``decode_step_s``).
``l70_b1``
    Llama-3.1-70B at batch 1 on 16 sockets, a 1K prompt and 1K new tokens (the 70B point of
    ``experiments/per_user_speed.yaml``): its decode step.
``l8_8k``
    Llama-3.1-8B's 8K-token prompt on 16 sockets, one request: its TTFT (``ttft_s``: arrival to the
    end of the prefill, docs/results.md; the KV transfer to the decode node comes after it).

``--compact`` puts a field's factors on one row and flags a figure that moves the same way at x0.5
and x2 (``both up``: not monotonic in the field) or whose smaller move is over 0.6 of its larger
(``not convex``: with the plans held, a rate's doubling saves at most half of what its halving costs,
the figure being a sum of max(time, work / rate) terms, and a size's halving at most half of what its
doubling costs; more means the mapper changed regime, e.g. kernels that now stay loaded). The table gives each figure over the shipped machine's (1.000 = unchanged), with the decode batch
where a change of HBM capacity moved the experiment's largest batch (``batch: max``), or says the
run was refused (the reasons follow the table). The disk cache of mapped kernels (``SN40L_SIM_CACHE``) makes a second pass quick;
``--reuse`` also reuses the ``results.json`` of a run already in ``--out``. The figures are the
simulator's: nothing is read from a file of expected values.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from sn40l_sim.errors import InputError  # noqa: E402
from sn40l_sim.report.outputs import check_folder  # noqa: E402

SOCKET_FILE = REPO / "hw_configs" / "sn40l.yaml"
NODE_FILE = REPO / "hw_configs" / "sn40l_node16.yaml"
#: leaves not varied: calibrated (fitted; docs/validation.md), the loader's published totals, the
#: socket count (socket scaling is its own experiment) and names
SKIPPED = ("calibrated", "stated", "memory.hbm.efficiency", "sockets", "kind", "name", "socket")
#: column -> (workload, KV policy point, results.json field)
COLUMNS: dict[str, tuple[str, str, str]] = {
    "ds_full": ("deepseek", "full", "decode_step_s"),
    "ds_snap": ("deepseek", "snapstream", "decode_step_s"),
    "l70_b1": ("llama70b_b1", "full", "decode_step_s"),
    "l8_8k": ("llama8b_8k", "full", "ttft_s"),
}
_QUANTITY = re.compile(r"^\s*([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)\s*(\S.*)?$")


def _llama(name: str, model: str, prompt_len: int, new_tokens: int) -> dict[str, Any]:
    """One request of ``model`` at batch 1 on the 16-socket node, TP16 (``per_user_speed.yaml``'s form)."""
    return {"kind": "experiment", "name": name, "hardware": str(NODE_FILE),
            "model": str(REPO / "graphs" / f"{model}.yaml"),
            "parallel": {"prefill": {"tp": 16}, "decode": {"tp": 16}},
            "policies": [{"name": "full", "policy": "full"}],
            "shape": {"prompt_len": prompt_len, "batch": 1, "max_new_tokens": new_tokens},
            "workload": {"kind": "fixed", "count": 1, "output_len": new_tokens},
            "serving": {"mode": "disaggregated", "prefill_nodes": 1, "decode_nodes": 1, "batch": 1,
                        "max_new_tokens": new_tokens}}


WORKLOADS: dict[str, dict[str, Any] | Path] = {
    "deepseek": REPO / "experiments" / "deepseek_tp16.yaml",
    "llama70b_b1": _llama("llama70b_b1", "llama3_1_70b", 1024, 1024),
    "llama8b_8k": _llama("llama8b_8k", "llama3_1_8b", 8192, 16),
}


def _leaves(tree: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if path in SKIPPED:
            continue
        if isinstance(value, dict):
            yield from _leaves(value, path + ".")
        elif isinstance(value, (int, float, str)) and not isinstance(value, bool):
            if not isinstance(value, str) or _QUANTITY.match(value):
                yield path, value


def fields() -> dict[str, tuple[str, Any]]:
    """Field name -> (``--set`` path, shipped value): every numeric leaf of the two files."""
    socket = yaml.safe_load(SOCKET_FILE.read_text())
    node = yaml.safe_load(NODE_FILE.read_text())
    found = {path: (f"hardware.socket.{path}", value) for path, value in _leaves(socket)}
    found.update({f"node.{path}": (f"hardware.{path}", value) for path, value in _leaves(node)})
    return found


def scaled(value: Any, factor: float) -> str:
    """``value`` times ``factor`` in the file's own form: ``'1.6 GHz'`` x 2 -> ``'3.2 GHz'``, ``5`` x 0.5 ->
    ``'2.5'`` (an integer field is not rounded: a fraction of a port is bad input to refuse)."""
    if isinstance(value, str):
        number, unit = _QUANTITY.match(value).groups()
        return f"{float(number) * factor:.6g} {unit}".strip()
    result = value * factor
    return str(int(result)) if float(result).is_integer() else f"{result:.6g}"


def _run(workload: str, sets: dict[str, str], out: Path, reuse: bool) -> dict[str, Any] | str:
    """The rows of one ``run`` (by KV policy), or the one-line reason it was refused."""
    results, refused = out / "results.json", out / "refused.txt"
    if reuse and refused.exists():
        return refused.read_text().strip()
    if not (reuse and results.exists()):
        spec = WORKLOADS[workload]
        out.mkdir(parents=True, exist_ok=True)
        if isinstance(spec, dict):
            experiment = out / "experiment.yaml"
            experiment.write_text(yaml.safe_dump(spec, sort_keys=False))
        else:
            experiment = spec
        # one process a run: the script runs --jobs of them side by side, and a pool each costs a second
        command = [sys.executable, "-m", "sn40l_sim", "run", str(experiment), "--no-plot", "--quiet", "--jobs", "1",
                   "--out", str(out)]
        for path, value in sets.items():
            command += ["--set", f"{path}={value}"]
        results.unlink(missing_ok=True)
        refused.unlink(missing_ok=True)
        done = subprocess.run(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            reason = f"exit {done.returncode}: {last.replace(str(REPO) + '/', '')}"
            refused.write_text(reason + "\n")
            return reason
    return {row["name"]: row for row in json.loads(results.read_text())}


def _figures(rows: dict[str, dict[str, Any]] | str, workload: str) -> dict[str, tuple[float, int] | str]:
    """column -> (figure, decode batch) of one workload's run, or the reason it was refused."""
    got: dict[str, tuple[float, int] | str] = {}
    for column, (name, policy, metric) in COLUMNS.items():
        if name == workload:
            got[column] = rows if isinstance(rows, str) else (float(rows[policy][metric]), int(rows[policy]["batch"]))
    return got


def measure(chosen: list[str], factors: list[float], out: Path, jobs: int, reuse: bool) -> dict[tuple, dict]:
    """(field, factor) -> column -> figure (or refusal); the shipped machine under ("base", 1.0)."""
    known = fields()
    cases: list[tuple[str, float, dict[str, str]]] = [("base", 1.0, {})]
    for name in chosen:
        path, value = known[name]
        cases += [(name, f, {path: scaled(value, f)}) for f in factors]
    tasks = [(case, workload) for case in cases for workload in WORKLOADS]

    def one(task: tuple) -> tuple[tuple, dict]:
        (name, factor, sets), workload = task
        where = out / re.sub(r"[^A-Za-z0-9_.]+", "_", f"{name}_x{factor:g}") / workload
        return (name, factor), _figures(_run(workload, sets, where, reuse), workload)

    table: dict[tuple, dict] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for key, got in pool.map(one, tasks):
            table.setdefault(key, {}).update(got)
    return table


def _unrun(reason: str) -> str:
    """A cell for a run that gave no figure: ``refused`` for bad input (exit 2, e.g. half a port),
    ``failed`` otherwise (a traceback or a broken invariant, exit 1 or 3: a bug, not the field)."""
    return "refused" if reason.startswith("exit 2:") else "failed"


def _reasons(table: dict[tuple, dict], chosen: list[str], factors: list[float]) -> list[str]:
    """One line per run that gave no figure, the shipped machine's first, for after either table."""
    keys = [("base", 1.0)] + [(name, f) for name in chosen for f in factors]
    lines = [f"- `{name}` x{factor:g}: {value}" if name != "base" else f"- (shipped): {value}"
             for name, factor in keys for value in table[(name, factor)].values() if isinstance(value, str)]
    return list(dict.fromkeys(lines))


def markdown(table: dict[tuple, dict], chosen: list[str], factors: list[float]) -> str:
    """The table: the shipped figures, then each change's figures over them."""
    known = fields()
    base = table[("base", 1.0)]
    head = "| field | value | " + " | ".join(COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 2)]
    shipped = [_unrun(base[c]) if isinstance(base[c], str) else f"{base[c][0] * 1e3:.2f} ms" for c in COLUMNS]
    lines.append("| (shipped) | | " + " | ".join(shipped) + " |")
    for name in chosen:
        for factor in factors:
            got = table[(name, factor)]
            cells = []
            for column in COLUMNS:
                value = got[column]
                if isinstance(value, str):
                    cells.append(_unrun(value))
                else:
                    figure, batch = value
                    cell = (f"{figure * 1e3:.2f} ms" if isinstance(base[column], str)
                            else f"{figure / base[column][0]:.3f}")
                    # a step at another batch is another workload: say so beside its ratio
                    moved = isinstance(base[column], str) or batch != base[column][1]
                    cells.append(f"{cell} (batch {batch})" if moved else cell)
            lines.append(f"| `{name}` | {scaled(known[name][1], factor)} | " + " | ".join(cells) + " |")
    reasons = _reasons(table, chosen, factors)
    return "\n".join(lines + ([""] + reasons if reasons else []))


#: a figure is moved when it is further than this (relative) from the shipped one
MOVED = 5e-3
#: with the plans held, a rate's doubling saves at most half of what its halving costs (a sum of
#: max(time, work / rate) terms) and a size's halving at most half of what its doubling costs: above
#: this ratio of the smaller move to the larger the mapper changed plans, which the flag points to
CONVEX = 0.6


def flag(low: float, high: float) -> str:
    """What is odd about a figure at x0.5 (``low``) and x2 (``high``) of a field, both over the
    shipped figure: ``'both up'``/``'both down'`` (not monotonic in the field), ``'not convex'``
    (the smaller move over ``CONVEX`` of the larger), else ``''``.

    >>> flag(1.289, 0.884), flag(1.169, 1.025), flag(1.305, 0.656), flag(0.897, 1.206)
    ('', 'both up', 'not convex', '')
    """
    down, up = low - 1, high - 1
    if abs(down) <= MOVED or abs(up) <= MOVED:
        return ""
    if down * up > 0:
        return "both up" if up > 0 else "both down"
    return "not convex" if min(abs(down), abs(up)) > CONVEX * max(abs(down), abs(up)) else ""


def compact(table: dict[tuple, dict], chosen: list[str], factors: list[float], flat: float = 1e-3) -> str:
    """One row per field, its factors side by side (``a / b / c / d``, the columns in order); the
    fields whose every figure is within ``flat`` (relative) of the shipped one are named after the table."""
    base = table[("base", 1.0)]
    head = "| field | " + " | ".join(f"x{f:g}: " + " / ".join(COLUMNS) for f in factors) + " | flags |"
    lines, still = [head, "|" + "---|" * (len(factors) + 2)], []
    for name in chosen:
        cells, moved, flags = [], False, []
        if {0.5, 2.0} <= set(factors):
            for column in COLUMNS:
                low, high = table[(name, 0.5)][column], table[(name, 2.0)][column]
                usable = not any(isinstance(v, str) for v in (low, high, base[column]))
                same_batch = usable and low[1] == high[1] == base[column][1]
                odd = flag(low[0] / base[column][0], high[0] / base[column][0]) if same_batch else ""
                flags += [f"{column} {odd}"] if odd else []
        for factor in factors:
            parts = []
            for column in COLUMNS:
                value = table[(name, factor)][column]
                if isinstance(value, str) or isinstance(base[column], str):
                    parts.append(_unrun(value) if isinstance(value, str) else f"{value[0] * 1e3:.2f} ms")
                    moved = True
                    continue
                ratio = value[0] / base[column][0]
                moved |= abs(ratio - 1) > flat or value[1] != base[column][1]
                parts.append(f"{ratio:.3f}" + (f" (b{value[1]})" if value[1] != base[column][1] else ""))
            cells.append(" / ".join(parts))
        if moved:
            lines.append(f"| `{name}` | " + " | ".join(cells) + " | " + ", ".join(flags) + " |")
        else:
            still.append(f"`{name}`")
    if still:
        lines += ["", f"Within {flat:.1%} of the shipped figures at every factor: " + ", ".join(still) + "."]
    reasons = _reasons(table, chosen, factors)   # the docstring's "the reasons follow the table" here too
    return "\n".join(lines + ([""] + reasons if reasons else []))


def main(argv: list[str] | None = None) -> int:
    known = fields()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fields", nargs="+", choices=sorted(known), default=list(known), metavar="FIELD",
                        help="fields to vary (default: all; names as the table prints them)")
    parser.add_argument("--factors", nargs="+", type=float, default=[0.5, 2.0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("out") / "hardware_sensitivity")
    parser.add_argument("--reuse", action="store_true", help="reuse results.json already under --out")
    parser.add_argument("--compact", action="store_true",
                        help="one row per field, its factors side by side; unmoved fields listed after")
    args = parser.parse_args(argv)
    # NaN compares false with 0 and inf is no factor: both would only be refused run by run
    if args.jobs < 1 or not all(0 < f < math.inf for f in args.factors):
        parser.error("--jobs and every --factors value must be positive")
    # a factor or field given twice would run into the folder of the first (factors by their
    # folder name, f"{factor:g}": 2 and 2.0000001 share one) and print its row twice
    for option, names in (("--factors", [f"{f:g}" for f in args.factors]), ("--fields", args.fields)):
        if len(set(names)) < len(names):
            parser.error(f"{option}: each value once, got {' '.join(names)}")
    try:   # a file there ended the first run's mkdir in a traceback
        check_folder(args.out, "--out")
    except InputError as exc:
        parser.error(str(exc))
    table = measure(args.fields, args.factors, args.out.resolve(), args.jobs, args.reuse)
    print((compact if args.compact else markdown)(table, args.fields, args.factors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
