"""Validate hardware, model and experiment files without running anything.

Each file is loaded exactly as the simulator would load it (kind: socket / node / model /
experiment; an experiment's hardware and model files are checked with it). One line per file:
"ok" on stdout, or the error (file, field, line, what was expected) on stderr.
Exit status 0 if every file is valid, 2 if any is not.

example:
  python -m sn40l_sim check hw_configs/*.yaml
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sn40l_sim.errors import InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``check``'s arguments."""
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML files to validate")


def check_file(path: str | Path) -> str:
    """Load and validate one file; return its kind.

    Raises
    ------
    InputError
        The first problem found, in this file or in a file it references.

    Examples
    --------
    >>> check_file("hw_configs/sn40l_node16.yaml")
    'node'
    """
    from sn40l_sim.commands.describe import file_kind

    kind = file_kind(path)
    if kind in ("socket", "node"):
        from sn40l_sim.hardware.loader import load_hardware
        load_hardware(path)
    elif kind == "model":
        from sn40l_sim.models.loader import load_model
        load_model(path)
    elif kind == "experiment":
        from sn40l_sim.study.assemble import assemble
        from sn40l_sim.study.experiment import load_experiment
        assemble(load_experiment(path)).check_points()
    else:
        from sn40l_sim.yamlio import load_document
        raise load_document(path).error(("kind",), f"expected one of ['socket', 'node', 'model', 'experiment'], got {kind!r}")
    return kind


def run(args: argparse.Namespace) -> int:
    """Check every file; 0 if all are valid, 2 if any is not."""
    bad = 0
    for path in args.files:
        try:
            kind = check_file(path)
        except InputError as exc:
            bad += 1
            print(f"error: {exc}", file=sys.stderr)
        else:
            print(f"ok: {path} (kind: {kind})")
    return 2 if bad else 0
