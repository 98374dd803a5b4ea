"""Requests to serve: a fixed list, Poisson arrivals with seeded length distributions, or a trace.

The workload specs are the validated objects of :mod:`sn40l_sim.study.experiment` (``FixedWorkload``,
``PoissonWorkload``, ``TraceWorkload``); a trace file (the simulator's ``arrival_s, prompt_len,
output_len`` or the Azure LLM trace's ``TIMESTAMP, ContextTokens, GeneratedTokens``) is read by
:func:`sn40l_sim.serving.traces.read_trace`, once, by whoever assembles the experiment, and its
rows handed to :func:`build_requests` (a sweep's workers get the rows, not the file), which takes
the workload's time window, scales its arrival rate and, when asked, caps lengths above the
compiled graphs (each request records what it lost: :attr:`Request.capped_prompt_tokens`,
:attr:`Request.capped_output_tokens`). Arrival times become integer cycles of the simulated clock.

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

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.serving.context_limit import raise_context
from sn40l_sim.serving.prefix_cache import with_prefixes
from sn40l_sim.serving.traces import TraceRow, select_window


@dataclass(frozen=True, slots=True)
class Request:
    """One request: arrives at ``arrival_cycle``, prompt of ``prompt_len`` tokens, ``output_len``
    generated tokens (the first comes out of prefill, the rest out of decode steps)."""

    id: int
    arrival_cycle: int
    prompt_len: int
    output_len: int
    #: prompt tokens cut to fit the compiled graphs (a trace with ``cap_lengths``; 0 otherwise)
    capped_prompt_tokens: int = 0
    #: output tokens cut to fit ``max_new_tokens`` (a trace with ``cap_lengths``; 0 otherwise)
    capped_output_tokens: int = 0
    #: the shared prefix its prompt starts with (-1: none) and that prefix's tokens
    #: (:mod:`sn40l_sim.serving.prefix_cache`)
    prefix_id: int = -1
    prefix_len: int = 0


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


#: the most requests one run generates: a run keeps every request, its log and the decode steps,
#: about 3.2 KB a request in a busy serve (a million Poisson requests of Llama-3.1-8B at 400 a
#: second, 12.3 million steps, peaked at 3.25 GB: docs/architecture.md, "Serving by requests"), so
#: ten million need a machine of some 32 GB; two billion (the integer limit the count had) asked
#: numpy for 15 GB at once and died in a MemoryError traceback
MAX_REQUESTS = 10**7


#: the latest cycle a request may arrive at: the serving loop counts cycles in 64-bit integers (to
#: 2**63 - 1, 9.2e18) and the serve runs on after its last arrival, so this leaves it 7/8 of them;
#: at 1.6 GHz it is 22.8 years. A Poisson rate of 1e-6 requests/s over 20,000 requests, or a
#: trace spanning 1e6 s at rate_scale 1e-6, arrived past it and stopped run with an OverflowError
#: traceback after the steps were timed
MAX_ARRIVAL_CYCLES = 2**60


def check_arrivals(last_s: float, clock_hz: float) -> None:
    """Refuse a workload whose last request arrives later than the serving clock counts
    (:data:`MAX_ARRIVAL_CYCLES`), naming the seconds it may span at this clock (``check`` calls it
    too, so it refuses what a run would).

    >>> check_arrivals(1e6, 1.6e9)
    >>> check_arrivals(1e12, 1.6e9)
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: requests: the last request arrives 1e+12 s after the serve starts, 1.6e+21 cycles of the 1.6 GHz clock, past the 1.15e+18 (2**60) the serving loop counts to: expected arrivals within 7.21e+08 s (a higher arrival rate or rate_scale, or fewer requests)
    """
    if last_s * clock_hz > MAX_ARRIVAL_CYCLES:
        raise InputError(f"the last request arrives {last_s:.3g} s after the serve starts, {last_s * clock_hz:.3g} cycles "
                         f"of the {clock_hz / 1e9:g} GHz clock, past the {MAX_ARRIVAL_CYCLES:.3g} (2**60) the serving "
                         f"loop counts to: expected arrivals within {MAX_ARRIVAL_CYCLES / clock_hz:.3g} s (a higher "
                         "arrival rate or rate_scale, or fewer requests)", field="requests")


def last_arrival_s(spec: Any, seed: int, trace_rows: Sequence[TraceRow] | None = None,
                   known_below_s: float = 0.0) -> float | None:
    """The seconds after the serve starts at which :func:`build_requests` has the workload's last
    request arrive, without building the requests; None for a count that depends on the decode
    slots (``count: batch``). A Poisson workload whose last arrival cannot pass ``known_below_s``
    is not drawn (ten million arrivals take seconds): it returns ``known_below_s`` then.

    >>> from sn40l_sim.study.experiment import FixedWorkload
    >>> last_arrival_s(FixedWorkload(kind="fixed", count=5, interval_s=2.0, arrival_s=1.0, output_len=8), seed=0)
    9.0
    """
    if spec.kind == "trace":
        window = select_window(trace_rows or (), spec.start_s, spec.duration_s, spec.rate_scale)
        return max((r.arrival_s for r in window), default=0.0)
    if spec.kind == "fixed" and spec.requests is not None:
        return max(r.arrival_s for r in spec.requests)
    if spec.count in ("batch", None):
        return None
    if spec.kind == "fixed":
        return spec.arrival_s + (int(spec.count) - 1) * spec.interval_s
    n = int(spec.count)
    # n exponential gaps pass n + 50 sqrt(n) + 50 mean gaps with a chance under 1e-21 (Bernstein)
    if (n + 50 * math.sqrt(n) + 50) / spec.rate_per_s <= known_below_s:
        return known_below_s
    # the generator's first draws are the gaps, as build_requests draws them
    return float(_poisson_arrivals(np.random.Generator(np.random.PCG64(seed)), spec.rate_per_s, n)[-1])


def _poisson_arrivals(rng: np.random.Generator, rate_per_s: float, n: int) -> np.ndarray:
    return np.cumsum(rng.exponential(1.0 / rate_per_s, size=n))


def _request_count(count: int | str, rounds: int, slots: int) -> int:
    n = slots * rounds if count == "batch" else int(count)
    if n > MAX_REQUESTS:
        raise InputError(f"count: batch with rounds: {rounds} makes {slots} x {rounds} = {n} requests; expected at "
                         f"most {MAX_REQUESTS} (a run keeps every request, about 3.2 KB each)", field="requests")
    return n


def build_requests(spec: Any, *, prompt_len: int, max_new_tokens: int, slots: int, seed: int,
                   clock_hz: float, trace_rows: Sequence[TraceRow] | None = None,
                   max_context: int | None = None, max_context_set: str | None = None) -> list[Request]:
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
        The rows of the trace file (:func:`~sn40l_sim.serving.traces.read_trace`), for ``kind: trace``.
    max_context : int, optional
        The model's maximum context: no request's prompt and output together may exceed it (as a
        serving engine refuses a prompt plus ``max_tokens`` longer than the model's length; a trace
        that caps lengths caps the output to it).
    max_context_set : str, optional
        The experiment field that sets ``max_context`` (None: the model file's), named when a
        request is refused for it (:func:`~sn40l_sim.serving.context_limit.raise_context`).

    Raises
    ------
    InfeasibleError
        For a request longer than the compiled graphs (naming the trace's file and line, or the
        request), unless a trace workload asks to cap lengths.
    InputError
        For a trace window holding no request, or a request longer than the model's context.

    Examples
    --------
    A Poisson workload of 4 requests at 2 a second, each generating 16 tokens after a 1,024-token
    prompt; arrivals are cycles of the 1.6 GHz clock:

    >>> from sn40l_sim.study.experiment import PoissonWorkload
    >>> spec = PoissonWorkload(kind="poisson", rate_per_s=2.0, count=4, output_len={"dist": "constant", "value": 16})
    >>> requests = build_requests(spec, prompt_len=1024, max_new_tokens=64, slots=8, seed=0, clock_hz=1.6e9)
    >>> [round(r.arrival_cycle / 1.6e9, 3) for r in requests], {(r.prompt_len, r.output_len) for r in requests}
    ([0.34, 0.85, 0.86, 0.861], {(1024, 16)})
    >>> build_requests(spec, prompt_len=1024, max_new_tokens=8, slots=8, seed=0, clock_hz=1.6e9)
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InfeasibleError: request 0: output_len 16 exceeds max_new_tokens 8, the static decode graph's maximum generated length
    """
    capped: list[tuple[int, int]] | None = None
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
        arrivals = _poisson_arrivals(rng, spec.rate_per_s, n)
        prompts = ([prompt_len] * n if spec.prompt_len is None
                   else sample_lengths(spec.prompt_len, n, rng, prompt_len))
        outputs = sample_lengths(spec.output_len, n, rng, max_new_tokens)
        rows = [(float(arrivals[i]), prompts[i], outputs[i], f"request {i}") for i in range(n)]
    elif spec.kind == "trace":
        if trace_rows is None:
            raise ValueError("a trace workload needs trace_rows (read_trace)")
        window, capped = trace_window(spec, trace_rows, prompt_len=prompt_len, max_new_tokens=max_new_tokens,
                                      max_context=max_context, max_context_set=max_context_set)
        rows = [(r.arrival_s, r.prompt_len, r.output_len, f"{r.file}:{r.line}") for r in window]
    else:
        raise ValueError(f"unknown workload kind {spec.kind!r}")
    check_arrivals(max((row[0] for row in rows), default=0.0), clock_hz)
    for _, p, o, where in rows:
        _check_lengths(p, o, prompt_len, max_new_tokens, max_context, where=where, max_context_set=max_context_set)
    order = sorted(range(len(rows)), key=lambda i: (rows[i][0], i))
    requests = [Request(new_id, int(round(rows[i][0] * clock_hz)), int(rows[i][1]), int(rows[i][2]),
                        *(capped[i] if capped is not None else (0, 0)))
                for new_id, i in enumerate(order)]
    prefix = getattr(spec, "prefix", None)
    if prefix is not None:   # drawn from a stream of their own: the requests' other draws do not move
        requests = with_prefixes(requests, prefix.share, prefix.tokens, prefix.groups, seed)
    return requests


def trace_window(spec: Any, trace_rows: Sequence[TraceRow], *, prompt_len: int, max_new_tokens: int,
                 max_context: int | None = None,
                 max_context_set: str | None = None) -> tuple[list[TraceRow], list[tuple[int, int]] | None]:
    """The rows of a trace workload's window, its arrivals scaled, lengths capped when the spec asks
    (with the prompt and output tokens each row lost; None when it does not ask), and checked
    against the static graphs. ``check`` calls it too, so it refuses what a run would.

    >>> from types import SimpleNamespace
    >>> rows = [TraceRow(0.0, 100, 10, "t.csv", 2), TraceRow(1.0, 900, 10, "t.csv", 3)]
    >>> spec = SimpleNamespace(start_s=0.0, duration_s=None, rate_scale=2.0, cap_lengths=True)
    >>> trace_window(spec, rows, prompt_len=512, max_new_tokens=16)[1]
    [(0, 0), (388, 0)]

    Raises
    ------
    InputError
        For a window holding no request (naming no field: the caller locates it).
    InfeasibleError
        For a row longer than the graphs without ``cap_lengths``, naming its file and line.
    """
    window = select_window(trace_rows, spec.start_s, spec.duration_s, spec.rate_scale)
    if not window:
        end = "the end" if spec.duration_s is None else f"{spec.start_s + spec.duration_s:g} s"
        arrivals = [r.arrival_s for r in trace_rows]
        raise InputError(f"no request of the trace arrives between {spec.start_s:g} s and {end} "
                         f"(the trace has {len(trace_rows)}, the last {max(arrivals) - min(arrivals):g} s "
                         "after the first)")
    capped = None
    if spec.cap_lengths:
        def longest_output(prompt: int) -> int:   # the graph's, and what the context leaves after the prompt
            return max_new_tokens if max_context is None else max(1, min(max_new_tokens, max_context - prompt))

        kept = [(min(r.prompt_len, prompt_len), r) for r in window]
        capped = [(r.prompt_len - p, max(0, r.output_len - longest_output(p))) for p, r in kept]
        window = [r._replace(prompt_len=p, output_len=min(r.output_len, longest_output(p))) for p, r in kept]
    for r in window:
        _check_lengths(r.prompt_len, r.output_len, prompt_len, max_new_tokens, max_context, file=r.file, line=r.line,
                       max_context_set=max_context_set)
    return window, capped


def context_message(where: str, prompt: int, output: int, max_context: int, max_context_set: str | None = None) -> str:
    """What refuses a request whose prompt and output together exceed the model's context (naming
    the experiment field ``max_context_set`` when it sets the maximum)."""
    return (f"{where}: a prompt of {prompt} tokens and {output} generated after it make {prompt + output}, beyond "
            f"the model's maximum context of {max_context} tokens: at most {max(0, max_context - prompt)} after such "
            f"a prompt ({raise_context(prompt + output, max_context_set, max_context)})")


def _check_lengths(prompt: int, output: int, prompt_len: int, max_new_tokens: int, max_context: int | None = None,
                   *, where: str = "", file: str | None = None, line: int | None = None,
                   max_context_set: str | None = None) -> None:
    """Refuse a request longer than the static graphs or than the model's context, naming where it
    comes from."""
    at = f"{where}: " if where else ""
    hint = " (or cap lengths to the compiled graphs: workload.cap_lengths: true)" if file else ""
    if prompt > prompt_len:
        raise InfeasibleError(f"{at}prompt_len {prompt} exceeds the point's prompt length {prompt_len}, "
                              f"which the static decode graph is compiled for{hint}", file=file, line=line)
    if output > max_new_tokens:
        raise InfeasibleError(f"{at}output_len {output} exceeds max_new_tokens {max_new_tokens}, "
                              f"the static decode graph's maximum generated length{hint}", file=file, line=line)
    if max_context is not None and prompt + output > max_context:
        raise InputError(context_message(where or "a request", prompt, output, max_context, max_context_set) + hint,
                         file=file, line=line)
