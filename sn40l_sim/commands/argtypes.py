"""Argument types the command-line tools share (the scripts and benchmarks too): a number that must
be positive is refused in one line by argparse (exit 2), rather than giving an empty run, an
endless one or a traceback.

>>> positive_int("3"), positive_ints("1,16,256"), positive_float("0.5"), input_path("a.yaml")
(3, [1, 16, 256], 0.5, PosixPath('a.yaml'))
>>> positive_int("0")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a positive whole number, got '0'
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a count of repeats, workers, cases, ...)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def positive_ints(text: str) -> list[int]:
    """An argparse type: comma-separated whole numbers of at least 1 (batches, cache or prompt lengths)."""
    try:
        values = [int(item) for item in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive whole numbers (e.g. 1,16,256), "
                                         f"got {text!r}")
    return values


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0 (a time limit in seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (0 < value and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def input_path(text: str) -> Path:
    """An argparse type: a file or folder to read, given as a non-empty path. ``Path('')`` is the
    current folder, so an empty argument (an unset shell variable, ``compare out/a ""``) read
    whatever the working folder held instead of saying that no path was given."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a path, got {'an empty one' if not text else repr(text)}")
    return Path(text)


def input_path_text(text: str) -> str:
    """:func:`input_path` for the commands that take the path as text (an experiment, a file to check)."""
    input_path(text)
    return text   # as given: messages show paths as they were written
