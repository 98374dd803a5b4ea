"""Compare every experiment's key results with its golden file in tests/golden/, and regenerate
the goldens on purpose with --update (the diff is printed either way). Experiments without a golden
are named, with the reason (a sweep, or no workload); on a terminal, progress goes to stderr.

example:
  python -m sn40l_sim golden            # show what moved; exit 1 if anything did
  python -m sn40l_sim golden --update   # and rewrite tests/golden/*.json
"""
from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``golden``'s arguments."""
    parser.add_argument("--update", action="store_true", help="rewrite the golden files with the new results")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run(args: argparse.Namespace) -> int:
    """Print the differences per experiment; rewrite with --update."""
    from sn40l_sim.errors import InputError
    from sn40l_sim.study import golden

    moved = False
    survey = golden.survey()
    for path, why in survey:   # named first, so that the verdicts are the last lines
        if why is not None:
            print(f"{path.name}: skipped: {why}")
    runnable = [path for path, why in survey if why is None]
    for i, experiment in enumerate(runnable, 1):
        if not args.quiet and sys.stderr.isatty():   # a log gets the verdict lines only, as each ends
            print(f"golden: simulating {experiment.name} ({i} of {len(runnable)}) ...", file=sys.stderr, flush=True)
        try:   # read before simulating: an unreadable golden is said at once
            old, unreadable = golden.load(experiment), None
        except InputError as exc:
            if not args.update or golden.golden_path(experiment).is_dir():   # --update cannot write over a folder
                raise
            old, unreadable = None, exc.message   # --update is how it is repaired
        new = golden.collect(experiment)
        if unreadable is not None:
            lines = [f"(unreadable golden, replaced: {unreadable})"]
        else:
            lines = ["(no golden yet)"] if old is None else golden.diff(old, new)
        print(f"{experiment.name}: {'unchanged' if not lines else f'{len(lines)} value(s) moved'}")
        for line in lines:
            print(f"  {line}")
        moved = moved or bool(lines)
        if args.update and lines:
            print(f"  wrote {golden.write(experiment, new)}")
    return 1 if moved and not args.update else 0
