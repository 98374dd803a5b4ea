"""Requests to serve: a fixed list, Poisson arrivals with seeded length distributions, or a trace.

The workload specs are the validated objects of :mod:`sn40l_sim.study.experiment` (``FixedWorkload``,
``PoissonWorkload``, ``TraceWorkload``); a trace file (CSV or JSONL of ``arrival_s, prompt_len,
output_len``) is read here by :func:`read_trace`, once, by whoever assembles the experiment, and its
rows handed to :func:`build_requests` (a sweep's workers get the rows, not the file). Arrival times
become integer cycles of the simulated clock.

Sampling uses one ``numpy`` PCG64 generator seeded from ``serving.seed``, drawing inter-arrival
gaps, then prompt lengths, then output lengths, so the same seed gives the same requests.

Examples
--------
>>> from sn40l_sim.study.experiment import PoissonWorkload
>>> spec = PoissonWorkload(kind="poisson", rate_per_s=2.0, count=3, output_len={"dist": "uniform", "low": 4, "high": 8})
>>> reqs = build_requests(spec, prompt_len=1024, max_new_tokens=8, slots=4, seed=7, clock_hz=1e9)
>>> [(r.id, r.prompt_len, 4 <= r.output_len <= 8) for r in reqs]
[(0, 1024, True), (1, 1024, True), (2, 1024, True)]
>>> reqs == build_requests(spec, prompt_len=1024, max_new_tokens=8, slots=4, seed=7, clock_hz=1e9)
True
"""
from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.schema import POSITIVE_COUNT, TIME


@dataclass(frozen=True)
class Request:
    """One request: arrives at ``arrival_cycle``, prompt of ``prompt_len`` tokens, ``output_len``
    generated tokens (the first comes out of prefill, the rest out of decode steps)."""

    id: int
    arrival_cycle: int
    prompt_len: int
    output_len: int


def sample_lengths(dist: Any, n: int, rng: np.random.Generator, high_default: int) -> list[int]:
    """``n`` lengths from a ``ConstantLength``, ``UniformLength`` or ``LognormalLength`` spec.

    Lognormal samples are rounded and clipped to ``[low, high]``; ``high`` defaults to
    ``high_default`` (the longest length the static graphs were compiled for).

    >>> from sn40l_sim.study.experiment import LognormalLength
    >>> rng = np.random.Generator(np.random.PCG64(0))
    >>> lengths = sample_lengths(LognormalLength(dist="lognormal", median=100, sigma=2.0), 1000, rng, 500)
    >>> min(lengths) >= 1, max(lengths) == 500
    (True, True)
    """
    if dist.dist == "constant":
        return [int(dist.value)] * n
    if dist.dist == "uniform":
        return [int(v) for v in rng.integers(dist.low, dist.high + 1, size=n)]
    if dist.dist == "lognormal":
        high = dist.high if dist.high is not None else high_default
        raw = np.exp(np.log(dist.median) + dist.sigma * rng.standard_normal(n))
        return [int(v) for v in np.clip(np.rint(raw), dist.low, max(high, dist.low))]
    raise ValueError(f"unknown length distribution {dist.dist!r}")


#: one request of a trace: ``(arrival_s, prompt_len, output_len, where)``, ``where`` naming its file and line
TraceRow = tuple[float, int, int, str]


def _request_count(count: int | str, rounds: int, slots: int) -> int:
    return slots * rounds if count == "batch" else int(count)


def build_requests(spec: Any, *, prompt_len: int, max_new_tokens: int, slots: int, seed: int,
                   clock_hz: float, trace_rows: Sequence[TraceRow] | None = None) -> list[Request]:
    """The requests of a workload spec, sorted by arrival (ids in arrival order).

    Parameters
    ----------
    spec : FixedWorkload or PoissonWorkload or TraceWorkload
        The experiment's ``workload`` section.
    prompt_len : int
        The point's prompt length: the default prompt and the longest one the decode graph takes.
    max_new_tokens : int
        The decode graph's maximum generated length: the longest output allowed.
    slots : int
        Decode slots over all decode nodes (``count: batch`` means this many requests per round).
    seed : int
        Seed of the sampler.
    clock_hz : float
        Clock that turns arrival seconds into cycles.
    trace_rows : sequence of TraceRow, optional
        The rows of the trace file (:func:`read_trace`), for ``kind: trace``.

    Raises
    ------
    InfeasibleError
        For a request longer than the compiled graphs (naming the trace line or the request).
    """
    if spec.kind == "fixed":
        if spec.requests is not None:
            rows = [(r.arrival_s, r.prompt_len or prompt_len, r.output_len, f"requests[{i}]")
                    for i, r in enumerate(spec.requests)]
        else:
            n = _request_count(spec.count, spec.rounds, slots)
            rows = [(spec.arrival_s + i * spec.interval_s, spec.prompt_len or prompt_len, spec.output_len,
                     f"request {i}") for i in range(n)]
    elif spec.kind == "poisson":
        n = _request_count(spec.count, spec.rounds, slots)
        rng = np.random.Generator(np.random.PCG64(seed))
        arrivals = np.cumsum(rng.exponential(1.0 / spec.rate_per_s, size=n))
        prompts = ([prompt_len] * n if spec.prompt_len is None
                   else sample_lengths(spec.prompt_len, n, rng, prompt_len))
        outputs = sample_lengths(spec.output_len, n, rng, max_new_tokens)
        rows = [(float(arrivals[i]), prompts[i], outputs[i], f"request {i}") for i in range(n)]
    elif spec.kind == "trace":
        if trace_rows is None:
            raise ValueError("a trace workload needs trace_rows (read_trace)")
        rows = list(trace_rows)
    else:
        raise ValueError(f"unknown workload kind {spec.kind!r}")
    for _, p, o, where in rows:
        if p > prompt_len:
            raise InfeasibleError(f"{where}: prompt_len {p} exceeds the point's prompt length {prompt_len}, "
                                  "which the static decode graph is compiled for")
        if o > max_new_tokens:
            raise InfeasibleError(f"{where}: output_len {o} exceeds max_new_tokens {max_new_tokens}, "
                                  "the static decode graph's maximum generated length")
    order = sorted(range(len(rows)), key=lambda i: (rows[i][0], i))
    return [Request(new_id, int(round(rows[i][0] * clock_hz)), int(rows[i][1]), int(rows[i][2]))
            for new_id, i in enumerate(order)]


_COLUMNS = ("arrival_s", "prompt_len", "output_len")


def read_trace(path: Path) -> list[TraceRow]:
    """Rows ``(arrival_s, prompt_len, output_len, where)`` of a CSV or JSONL trace file.

    A ``.jsonl`` file has one JSON object per line; anything else is read as CSV with a header.
    Extra columns are errors (a typo would otherwise be ignored silently).

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
    >>> _ = path.write_text("arrival_s,prompt_len,output_len\\n0.5,100,10\\n0,200,5\\n")
    >>> read_trace(path)
    [(0.5, 100, 10, 't.csv line 2'), (0.0, 200, 5, 't.csv line 3')]
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read trace file: {exc.strerror or exc}", file=path) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not a text file (byte {exc.start} is not UTF-8); expected a CSV or JSONL trace",
                         file=path) from None
    records: list[tuple[int, dict]] = []
    if path.suffix == ".jsonl":
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"invalid JSON: {exc.msg}", file=path, line=number) from None
            if not isinstance(item, dict):
                raise InputError("expected a JSON object per line", file=path, line=number)
            records.append((number, item))
    else:
        reader = csv.DictReader(text.splitlines())
        if reader.fieldnames is None or tuple(f.strip() for f in reader.fieldnames) != _COLUMNS:
            raise InputError(f"expected the CSV header {','.join(_COLUMNS)}, got {reader.fieldnames}",
                             file=path, line=1)
        for item in reader:
            records.append((reader.line_num, {k.strip(): v for k, v in item.items()}))
    if not records:
        raise InputError("the trace has no requests", file=path)
    return [_trace_row(path, number, item) for number, item in records]


def _trace_row(path: Path, number: int, item: dict) -> TraceRow:
    extra = sorted(set(item) - set(_COLUMNS), key=str)
    if extra:
        raise InputError(f"unknown column {extra[0]!r}; expected {', '.join(_COLUMNS)}", file=path, line=number)
    values = []
    for column in _COLUMNS:
        if item.get(column) in (None, ""):
            raise InputError("missing value", file=path, field=column, line=number)
        try:
            value = float(item[column]) if column == "arrival_s" else _integer(item[column])
        except (TypeError, ValueError, OverflowError):
            raise InputError(f"expected {'a number' if column == 'arrival_s' else 'an integer'}, got "
                             f"{item[column]!r}", file=path, field=column, line=number) from None
        try:  # the schema's ranges: a time in seconds, a token count
            values.append(TIME(value) if column == "arrival_s" else POSITIVE_COUNT(value))
        except ValueError as exc:
            raise InputError(str(exc), file=path, field=column, line=number) from None
    return values[0], values[1], values[2], f"{path.name} line {number}"


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(value)
    number = float(value)
    if not number.is_integer():
        raise ValueError(value)
    return int(number)
