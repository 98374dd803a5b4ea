"""Readable quantities in YAML (``64 GiB``, ``1.6 TB/s``, ``1.6 GHz``, ``150 ns``) to SI numbers.

Sizes come out in bytes, bandwidths in bytes/s, frequencies in Hz, times in seconds, FLOP rates in
FLOP/s. Plain numbers pass through unchanged (they are taken to be in the base unit already).
"""
from __future__ import annotations

import numbers
import re

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
# divisors rather than factors so that "150 ns" is exactly 150 / 1e9
_TIME = {"s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "\u03bcs": 1e6, "ns": 1e9, "ps": 1e12}

_NUMBER = r"(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
#: the micro sign (U+00B5) and the Greek mu (U+03BC) look the same: both are read
_QUANTITY = re.compile(_NUMBER + r"\s*(?P<unit>[A-Za-z\u00b5\u03bc/]*)\s*$")

#: quantity kind -> the unit suffixes it accepts (after an SI or binary prefix)
KINDS = {
    "bytes": ("B",),
    "bandwidth": ("B/s",),
    "frequency": ("Hz",),
    "time": tuple(_TIME),
    "flops": ("FLOPS", "FLOP/s"),
}


def _scale(prefix: str) -> float | None:
    if prefix in _BINARY:
        return _BINARY[prefix]
    return _PREFIX.get(prefix)


def parse_quantity(value: object, kind: str) -> float:
    """Convert ``value`` to the base unit of ``kind``.

    Parameters
    ----------
    value : str or int or float
        A number (already in the base unit) or a string such as ``"64 GiB"``.
    kind : {"bytes", "bandwidth", "frequency", "time", "flops"}
        What the quantity measures.

    Returns
    -------
    float
        The value in bytes, bytes/s, Hz, seconds or FLOP/s.

    Raises
    ------
    ValueError
        With a message saying what was expected.

    Examples
    --------
    >>> parse_quantity("64 GiB", "bytes") == 64 * 2**30
    True
    >>> parse_quantity("1.6 TB/s", "bandwidth")
    1600000000000.0
    >>> parse_quantity("1.6 GHz", "frequency")
    1600000000.0
    >>> parse_quantity("150 ns", "time")
    1.5e-07
    >>> parse_quantity(512, "bytes")
    512.0
    """
    if kind not in KINDS:
        raise KeyError(f"unknown quantity kind {kind!r}")
    if isinstance(value, bool):
        raise ValueError(f"expected a {kind} quantity, got a boolean")
    if isinstance(value, numbers.Real):   # numpy's numbers too (np.float32 is not a float)
        try:
            return float(value)
        except OverflowError:   # an integer past a float's range (400 digits): no quantity is that large
            raise ValueError(f"expected a finite {kind} quantity such as {_example(kind)!r}, got {value!r}") from None
    if not isinstance(value, str):
        raise ValueError(f"expected a {kind} quantity such as {_example(kind)!r}, got {value!r}")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(f"expected a {kind} quantity such as {_example(kind)!r}, got {value!r}")
    number = float(match.group("num"))
    unit = match.group("unit")
    if unit == "":
        return number
    if kind == "time":
        if unit in _TIME:
            return number / _TIME[unit]
    else:
        for suffix in KINDS[kind]:
            if unit.endswith(suffix):
                scale = _scale(unit[: -len(suffix)])
                if scale is not None:
                    return number * scale
    raise ValueError(f"expected a {kind} unit such as {_example(kind)!r}, got unit {unit!r} in {value!r}")


def _example(kind: str) -> str:
    return {"bytes": "64 GiB", "bandwidth": "1.6 TB/s", "frequency": "1.6 GHz",
            "time": "150 ns", "flops": "638 TFLOPS"}[kind]


def format_bytes(n_bytes: float) -> str:
    """Binary-prefixed size for reports.

    >>> format_bytes(545259520)
    '520.0 MiB'
    """
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n_bytes) >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes:.0f} B"


def gib_text(n_bytes: float) -> str:
    """``n_bytes`` in GiB to two decimals, or to two significant figures where two decimals would
    print a nonzero size as zero: a shortfall of a few KiB as "0.00 GiB would spill" (a prompt one
    token too long), or a decode batch's few MiB of activations as "activations 0.00 GiB" among
    what a socket needs.

    >>> gib_text(2**30), gib_text(327680), gib_text(0)
    ('1.00', '0.00031', '0.00')
    """
    text = f"{n_bytes / 2**30:.2f}"
    return f"{n_bytes / 2**30:.2g}" if n_bytes and float(text) == 0 else text
