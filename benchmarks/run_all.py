"""Every benchmark's figures beside their goals, in one table.

Each ``benchmarks/bench_*.py`` that defines ``goal_figures()`` is imported and called; it returns
``(what, figure, goal)`` tuples (see ``measure.py``): the figure a number in the goal's unit (or a
text), the goal ``"<= 1.0 s"`` or ``">= 1000"`` (``≤``/``≥`` too), or ``"-"`` for a figure shown for
information. A benchmark that fails prints its error in its row; the others still run.

Run from the repository root::

    python benchmarks/run_all.py [--only NAME ...] [--skip NAME ...]

NAME is a module's name without ``bench_`` (``run``, ``validate``, ``calibrate``, ``step``, ...).
Exit status 0 whatever the figures: the numbers are for reading (the test suite has no timed
assertions).
"""
from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_GOAL = re.compile(r"^\s*(<=|>=|≤|≥)\s*([0-9.eE+-]+)")


def discover() -> dict[str, Path]:
    """Benchmark name -> file, for every ``bench_*.py`` beside this script."""
    return {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}


def load(path: Path):
    """Import a benchmark file as a module."""
    sys.path.insert(0, str(HERE))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verdict(figure: object, goal: str) -> str:
    """``yes``/``NO`` when the figure is a number and the goal a bound, else ``-``.

    >>> verdict(0.8, "<= 1.0 s"), verdict(120.0, ">= 1000"), verdict("> 900", "<= 30 s"), verdict(3, "-")
    ('yes', 'NO', 'NO', '-')
    """
    match = _GOAL.match(goal)
    if match is None:
        return "-"
    if not isinstance(figure, (int, float)):
        return "NO" if str(figure).startswith(">") and match[1] in ("<=", "≤") else "-"
    bound = float(match[2])
    return "yes" if (figure <= bound if match[1] in ("<=", "≤") else figure >= bound) else "NO"


def shown(figure: object) -> str:
    """A figure as printed: three significant digits (integers whole)."""
    if isinstance(figure, bool) or not isinstance(figure, (int, float)):
        return str(figure)
    return f"{figure:d}" if isinstance(figure, int) else f"{figure:.3g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME")
    parser.add_argument("--skip", nargs="*", default=[], metavar="NAME")
    args = parser.parse_args(argv)
    known = discover()
    unknown = sorted((set(args.only or []) | set(args.skip)) - set(known))
    if unknown:
        parser.error(f"argument --only/--skip: unknown benchmark(s) {', '.join(unknown)}; "
                     f"expected one of {', '.join(known)}")
    rows: list[tuple[str, str, str, str, str]] = []
    for name, path in known.items():
        if (args.only is not None and name not in args.only) or name in args.skip:
            continue
        start = time.perf_counter()
        try:
            module = load(path)
            if not hasattr(module, "goal_figures"):
                if args.only is not None:   # named on purpose: say so rather than print an empty table
                    rows.append((name, f"no figures for this table: python benchmarks/{path.name} prints its own",
                                 "", "", ""))
                continue
            figures = module.goal_figures()
        except Exception as exc:   # one benchmark's failure is a row, not the end of the table
            rows.append((name, f"failed: {type(exc).__name__}: {exc}"[:100], "", "", ""))
            continue
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
        rows += [(name, what, shown(figure), goal, verdict(figure, goal)) for what, figure, goal in figures]
    header = ("bench", "what", "figure", "goal", "met")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    for r in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
