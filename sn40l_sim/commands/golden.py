"""Compare every experiment's key results with its golden file in tests/golden/, and regenerate
the goldens on purpose with --update (the diff is printed either way).

example:
  python -m sn40l_sim golden            # show what moved; exit 1 if anything did
  python -m sn40l_sim golden --update   # and rewrite tests/golden/*.json
"""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``golden``'s arguments."""
    parser.add_argument("--update", action="store_true", help="rewrite the golden files with the new results")


def run(args: argparse.Namespace) -> int:
    """Print the differences per experiment; rewrite with --update."""
    from sn40l_sim.study import golden

    moved = False
    for experiment in golden.experiments():
        new = golden.collect(experiment)
        old = golden.load(experiment)
        lines = ["(no golden yet)"] if old is None else golden.diff(old, new)
        print(f"{experiment.name}: {'unchanged' if not lines else f'{len(lines)} value(s) moved'}")
        for line in lines:
            print(f"  {line}")
        moved = moved or bool(lines)
        if args.update and lines:
            print(f"  wrote {golden.write(experiment, new)}")
    return 1 if moved and not args.update else 0
