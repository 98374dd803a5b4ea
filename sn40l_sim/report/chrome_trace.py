"""Chrome trace-event files (open in https://ui.perfetto.dev or ``chrome://tracing``) of simulated
points: the served requests on every node, and the kernel schedule of a prefill and of a decode
step on every socket.

The JSON object format: ``{"traceEvents": [...], "displayTimeUnit": "ms"}`` with complete events
(``"ph": "X"``, ``ts`` and ``dur`` in microseconds), counters (``"ph": "C"``) and metadata events
naming every process and thread. One process (``pid``) per node or per socket:

``<point> · prefill node i``
    ``prefill`` (one event per request, with its id and prompt length) and ``KV link`` (the
    transfer of its cache to a decode node, with the bytes, the KV policy's state included).
``<point> · decode node j``
    ``decode steps`` (active sequences and KV bytes of each step), a ``KV held`` counter, and one
    thread per slot with the request occupying it; a co-located node (``<point> · node j``) also has
    ``prefill`` and ``graph switch`` (the configurations of the graph it runs next, loaded again
    after the other graph ran: ``graph_switch`` in the node's busy time; for a model sharing the
    node, also the wait for its weights to be copied in).
``<point> · prefill|decode · socket s``
    The phase's kernels on the socket (``kernels``, ``setup`` = call overhead, reconfiguration
    and pipeline fill, ``tiles`` = the tile stream, ``HBM``/``DDR``/... = the kernel's traffic per memory tier
    (its collectives' staging through the activations' tier is theirs: ``staged_bytes``, below),
    ``P2P collectives``, ``kernel loops`` = the calls a kernel loop runs as one), with FLOPs, bytes and
    bound cycles in ``args``: a kernel's ``cycles_by_cause`` is its share of the phase by cause, each
    cycle of the socket counted once, so that they add up over the ``kernels`` lane to
    ``decode_step_breakdown_s`` in ``results.json`` (at the clock; the gaps between kernels, none in
    the shipped graphs, are ``idle``) even where its interval overlaps the next kernel's; its
    ``gate_cycles`` are the waits inside its stream for a collective (an earlier operator's, or the
    previous loop iteration's), which ``memory_bound_cycles`` and ``compute_bound_cycles`` leave out; a
    collective's ``args`` hold the graph's ``bytes`` (the whole tensor) and ``group``, and the
    ``sent_bytes``, ``link_bytes`` and ``staged_bytes`` it moved. The detail is placed at
    the first prefill that ran the prefill's graph whole (node 0's first; a trace's shorter prompts
    run shorter graphs) and at the first decode step of decode node 0 (every step of the static
    graph is the same); without a serving log they follow each other from 0.

The engine simulates one socket (``engine/run_graph.py``: tensor-parallel peers run the same
kernels at the same time and meet at every collective), so the other sockets of a phase's
tensor-parallel group are that schedule repeated: their events carry ``"mirrors_socket": 0``.
``sockets="simulated"`` writes the simulated socket only. Events that would overlap on one thread
(a kernel's collectives still running when the next kernel starts, or a looped kernel's iteration
whose collectives overlap the next iteration) go to a second row of it; so with kernel looping the
kernels' durations add up to more than the step, whose cycles each count once in ``results.json``
(``decode_kernel_cycles``).

Examples
--------
>>> from sn40l_sim.engine.trace import TraceEvent
>>> events = [TraceEvent("L0.qkv", "qkv", 0, 0, 1600), TraceEvent("L0.qkv", "qkv", 0, 160, 1600, category="stream"),
...           TraceEvent("L0.mha", "mha", 0, 1600, 3200), TraceEvent("L0.ar", "all_reduce", 0, 1500, 2000,
...           category="collective")]
>>> trace = {"traceEvents": phase_events(events, clock_hz=1.6e9, title="prefill", sockets=[0, 1], first_pid=1)}
>>> sorted({(e["pid"], e["tid"]) for e in trace["traceEvents"] if e["ph"] == "X"})
[(1, 0), (1, 2), (1, 5), (2, 0), (2, 2), (2, 5)]
>>> [e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"]
['prefill · socket 0', 'prefill · socket 1 (mirrors socket 0)']
>>> [(e["name"], e["ts"], e["dur"]) for e in trace["traceEvents"] if e["ph"] == "X" and (e["pid"], e["tid"]) == (1, 0)]
[('L0.qkv', 0.0, 1.0), ('L0.mha', 1.0, 1.0)]
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from sn40l_sim.engine.breakdown import kernel_causes
from sn40l_sim.report.outputs import write_text
from sn40l_sim.report.point_results import TRACE_SOURCE, point_results
from sn40l_sim.serving.kv_transfer import sent_bytes

#: lanes (threads) of a socket's process: category -> (tid, thread name); the memory tiers' lanes
#: come from :func:`memory_lane`, other categories share lane 6
SOCKET_LANES = {"kernel": (0, "kernels"), "setup": (1, "setup (call, reconfig, fill)"),
                "stream": (2, "tiles (stream)"), "collective": (5, "P2P collectives"),
                "loop": (6, "kernel loops")}
_OTHER_LANE = 6


def memory_lane(index: int) -> int:
    """Lane (tid) of the ``index``-th memory tier of the socket: 3 and 4, then 7 and up.

    >>> [memory_lane(i) for i in range(4)]
    [3, 4, 7, 8]
    """
    return 3 + index if index < 2 else _OTHER_LANE - 1 + index
#: a lane's overflow rows use tids ``tid + ROW_STRIDE * row``
ROW_STRIDE = 100_000


def _us(cycles: float, clock_hz: float) -> float:
    # nanosecond resolution keeps the file small and the text identical run to run
    return round(cycles / clock_hz * 1e6, 3)


def _meta(pid: int, name: str, sort: int, tid: int | None = None) -> list[dict]:
    if tid is None:
        return [{"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}},
                {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": sort}}]
    return [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}},
            {"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": sort}}]


class _Rows:
    """Rows of one lane: an event goes to the first row where it does not cross the last event
    (complete events on one thread must nest, not overlap)."""

    def __init__(self) -> None:
        self.ends: list[list[tuple[float, float]]] = []

    def row(self, start: float, end: float) -> int:
        for i, stack in enumerate(self.ends):
            while stack and stack[-1][1] <= start:
                stack.pop()
            if not stack or (stack[-1][0] <= start and end <= stack[-1][1]):
                stack.append((start, end))
                return i
        self.ends.append([(start, end)])
        return len(self.ends) - 1


def _lay_out(events: list[dict], names: dict[int, str], pid: int) -> list[dict]:
    """Give each event a row of its lane; returns thread metadata for every row used."""
    rows: dict[int, _Rows] = {}
    used: set[int] = set()
    for ev in sorted(events, key=lambda e: (e["tid"], e["ts"], -e["dur"])):
        lane = ev["tid"]
        # the end to the file's nanosecond resolution, as a viewer reads it (not ts + dur's float error)
        k = rows.setdefault(lane, _Rows()).row(ev["ts"], round(ev["ts"] + ev["dur"], 3))
        ev["tid"] = lane + ROW_STRIDE * k
        used.add(ev["tid"])
    meta = []
    for tid in sorted(used):
        lane, k = tid % ROW_STRIDE, tid // ROW_STRIDE
        meta += _meta(pid, names.get(lane, f"lane {lane}") + (f" #{k + 1}" if k else ""), tid, tid)
    return meta


def phase_events(events: Iterable[Any], clock_hz: float, *, title: str, sockets: Sequence[int] = (0,),
                 first_pid: int = 1, offset_cycles: float = 0, kernels: Iterable[Any] = (),
                 byte_seconds: Sequence[tuple[str, float]] = ()) -> list[dict]:
    """Trace events of one phase: one process per socket in ``sockets`` (the first is the simulated
    one, the others repeat its schedule).

    Parameters
    ----------
    events : iterable of TraceEvent
        The phase's events (:attr:`sn40l_sim.engine.phase.PhaseTiming.events`).
    clock_hz : float
        RDU clock.
    title : str
        Process name prefix (``"full · decode"``).
    sockets : sequence of int
        Socket numbers to draw.
    first_pid : int
        Process id of the first socket (the others follow).
    offset_cycles : float
        Where the phase starts, in cycles of ``clock_hz``.
    kernels : iterable of KernelTiming
        Per-kernel detail (FLOPs, bytes, bounds) for the ``args`` and the memory lanes.
    byte_seconds : sequence of (str, float)
        The phase's :attr:`~sn40l_sim.engine.phase.PhaseTiming.byte_seconds`, by which a kernel's
        memory-bound time is shared among its uses in ``cycles_by_cause``.
    """
    kernels = tuple(kernels)
    detail = {(k.name, k.start_cycle): k for k in kernels}
    # each kernel's share of the phase by cause, as the step's breakdown counts it (each cycle once)
    causes = {(kernels[i].name, kernels[i].start_cycle): parts
              for i, _, parts in kernel_causes(kernels, dict(byte_seconds))}
    tiers = list(dict.fromkeys(tier for k in detail.values() for tier in k.tier_bytes))
    lanes = {**{cat: tid for cat, (tid, _) in SOCKET_LANES.items()},
             **{tier: memory_lane(i) for i, tier in enumerate(tiers)}}
    base: list[dict] = []
    for ev in events:
        lane = lanes.get(ev.category, _OTHER_LANE)
        args: dict[str, Any] = {"kind": ev.kind, "layer": ev.layer, "cycles": ev.cycles, **dict(ev.detail)}
        k = detail.get((ev.name, ev.start_cycle)) if ev.category == "kernel" else None
        if k is not None:
            args["flops"] = k.flops
            args.update({f"{tier}_bytes": n for tier, n in k.tier_bytes.items()})
            args.update(weight_bytes=k.weight_bytes,
                        kv_bytes=k.kv_bytes, activation_bytes=k.activation_bytes,
                        memory_bound_cycles=k.memory_bound_cycles, compute_bound_cycles=k.compute_bound_cycles,
                        collective_exposed_cycles=k.collective_exposed_cycles,
                        launch_cycles=k.launch_cycles, barrier_cycles=k.barrier_cycles,
                        config_cycles=k.config_cycles, fill_cycles=k.fill_cycles, gate_cycles=k.gate_cycles,
                        iteration=k.iteration,
                        # a share rounding to no cycle (idle at -1e-13, float noise) read "-0.0"
                        cycles_by_cause={c: r for c, v in causes[(k.name, k.start_cycle)].items() if (r := round(v, 3))})
        base.append(_x(ev.name, ev.category, lane, ev.start_cycle + offset_cycles, ev.cycles, clock_hz, args))
        if ev.category == "stream":
            base += _memory(ev, detail, offset_cycles, clock_hz, lanes)
    names = {tid: name for tid, name in SOCKET_LANES.values()}
    names.update({memory_lane(i): f"{tier.upper()} traffic" for i, tier in enumerate(tiers)})
    out: list[dict] = []
    for i, socket in enumerate(sockets):
        pid = first_pid + i
        label = f"{title} · socket {socket}" + (f" (mirrors socket {sockets[0]})" if i else "")
        copies = [dict(ev, pid=pid, args=dict(ev["args"], mirrors_socket=sockets[0]) if i else ev["args"])
                  for ev in base]
        out += _meta(pid, label, pid) + _lay_out(copies, names, pid) + copies
    return out


def _x(name: str, cat: str, tid: int, start_cycle: float, cycles: float, clock_hz: float, args: dict) -> dict:
    # the end rounded as the start is: rounding the length apart made events that follow each other
    # overlap by a nanosecond, and the row layout then drew them on a second row of their lane
    ts = _us(start_cycle, clock_hz)
    return {"name": name, "cat": cat, "ph": "X", "pid": 0, "tid": tid, "ts": ts,
            "dur": round(_us(start_cycle + cycles, clock_hz) - ts, 3), "args": args}


def _memory(stream: Any, detail: dict, offset: float, clock_hz: float, lanes: dict[str, int]) -> list[dict]:
    """The kernel's bytes of each memory tier over its stream interval, with the average rate."""
    kernel = next((k for (name, start), k in detail.items()
                   if name == stream.name and k.start_cycle <= stream.start_cycle <= k.end_cycle), None)
    if kernel is None or stream.cycles <= 0:
        return []
    out = []
    for tier, n_bytes in kernel.tier_bytes.items():
        if n_bytes > 0:
            rate = n_bytes / (stream.cycles / clock_hz)
            out.append(_x(f"{tier.upper()} {stream.name}", tier, lanes[tier], stream.start_cycle + offset,
                          stream.cycles, clock_hz, {"bytes": n_bytes, "GB_per_s": round(rate / 1e9, 3),
                                                    "layer": stream.layer}))
    return out


def serving_events(log: Any, clock_hz: float, *, title: str, first_pid: int,
                   sent: Callable[[int], int] | None = None) -> list[dict]:
    """Trace events of a :class:`~sn40l_sim.serving.loop.ServingLog`: prefill nodes (prefill and
    KV link lanes) and decode nodes (steps, a KV counter, one lane per slot). A transfer's bytes are
    ``sent(prompt_len)`` (:func:`~sn40l_sim.serving.kv_transfer.sent_bytes`, the policy's state
    too), or without it the cache alone at the log setup's bytes a token."""
    colocated = log.setup.mode == "colocated"
    n_prefill = 0 if colocated else log.setup.prefill_nodes
    out: list[dict] = []
    events: dict[int, list[dict]] = {}
    lanes: dict[int, dict[int, str]] = {}

    def add(pid: int, tid: int, lane: str, ev: dict) -> None:
        ev["pid"] = pid
        events.setdefault(pid, []).append(ev)
        lanes.setdefault(pid, {})[tid] = lane

    decode_pid = first_pid + n_prefill
    for r in log.requests:
        req = r.request
        args = {"request": req.id, "prompt_len": req.prompt_len, "output_len": req.output_len}
        if r.prefill_start >= 0:
            pid = decode_pid + r.prefill_node if colocated else first_pid + r.prefill_node
            # a chunked prompt is drawn chunk by chunk: the node's decode steps run between them
            spans = r.prefill_chunks or [(r.prefill_start, r.first_token)]
            for i, (start, end) in enumerate(spans):
                name = f"prefill req {req.id}" + (f" chunk {i}" if len(spans) > 1 else "")
                add(pid, 0, "prefill", _x(name, "prefill", 0, start, end - start, clock_hz, args))
        if r.transfer_start >= 0:
            add(first_pid + r.prefill_node, 1, "KV link", _x(
                f"KV req {req.id} -> decode {r.decode_node}", "kv_transfer", 1, r.transfer_start,
                r.transfer_end - r.transfer_start, clock_hz,
                dict(args, bytes=sent(req.prompt_len) if sent is not None
                     else log.setup.cache_tokens(req.prompt_len, 0) * log.setup.kv_bytes_per_token)))
        if r.join >= 0:
            tid = 10 + r.slot
            end = r.finish if r.finish >= 0 else log.end_cycle
            add(decode_pid + r.decode_node, tid, f"slot {r.slot}", _x(
                f"req {req.id}", "sequence", tid, r.join, end - r.join, clock_hz,
                dict(args, tokens=r.generated, first_token_us=_us(r.first_token, clock_hz))))
    for step in log.steps:
        pid = decode_pid + step.node
        add(pid, 1, "decode steps", _x("decode step", "decode_step", 1, step.start, step.end - step.start, clock_hz,
                                       {"active": step.active, "slots_in_use": step.slots_in_use,
                                        "kv_bytes": step.kv_bytes}))
        events[pid].append({"name": "KV held (GiB)", "ph": "C", "pid": pid, "tid": 0,
                            "ts": _us(step.end, clock_hz), "args": {"GiB": round(step.kv_bytes / 2**30, 4)}})
    # a co-located node loads a graph's configurations again before running it after the other
    # graph: busy time the node's lanes showed as a gap between a prefill and the next decode step
    for node, start, end, graph in log.switches:
        what = "wait for the model's weights" if graph == "weights" else f"load {graph} configurations"
        add(decode_pid + node, 2, "graph switch (configuration loads)",
            _x(what, "graph_switch", 2, start, end - start, clock_hz, {"graph": graph}))
    for i in range(n_prefill):
        out += _meta(first_pid + i, f"{title} · prefill node {i}", first_pid + i)
    for j in range(log.setup.decode_nodes):
        pid = decode_pid + j
        out += _meta(pid, f"{title} · {'node' if colocated else 'decode node'} {j}", pid)
    for pid in sorted(events):
        timed = [e for e in events[pid] if e["ph"] == "X"]
        out += _lay_out(timed, lanes[pid], pid) + events[pid]
    return out


def _prefill_detail_at(log: Any, prompt_len: int) -> tuple[int, bool]:
    """Where a point's prefill detail (the graph of a ``prompt_len``-token prompt) is drawn: at the
    first prefill that ran that graph whole, node 0's first; and whether any request ran it.

    A trace's requests bring their own prompts, most of them shorter than the graph's: drawn at node
    0's first prefill (``hetero_nodes.yaml``'s: 374 tokens, 67 ms), the graph's 455 ms of kernels ran
    on long after the prefill the node's lane ended. A request that ran it in chunks, or after a
    prefix hit, ran it in parts: the detail then starts at its first part."""
    graph = log.setup.prefill_cycles(prompt_len)
    started = [r for r in log.requests if r.prefill_start >= 0]
    ran = [r for r in started if log.setup.prefill_cycles(r.request.prompt_len) == graph]
    whole = [r for r in ran if r.first_token - r.prefill_start == graph]
    first = min(whole or ran or started, key=lambda r: (r.prefill_node != 0, r.prefill_start), default=None)
    return (first.prefill_start if first is not None else 0), bool(ran) or not started


def point_events(result: Any, *, first_pid: int = 1, sockets: str = "group") -> list[dict]:
    """All trace events of one :class:`~sn40l_sim.serving.point.PointResult`."""
    s, clock, log = result.setup, result.clock_hz, result.log
    out: list[dict] = []
    pid = first_pid
    prefill_at, decode_at, ran = 0, int(result.prefill.cycles), True
    if log is not None:
        # the bytes a transfer's time was reckoned from (H2O's scores and ArkVale's digests too)
        out += serving_events(log, clock, title=s.name, first_pid=pid, sent=lambda prompt_len: sent_bytes(
            s.model, s.policy, prompt_len, s.max_new_tokens, s.speculation.drafts))
        pid += (0 if s.mode == "colocated" else s.prefill_nodes) + s.decode_nodes
        prefill_at, ran = _prefill_detail_at(log, s.prompt_len)
        steps0 = [st.start for st in log.steps if st.node == 0]
        decode_at = min(steps0, default=decode_at)
    # prefill nodes of other hardware count their phase in their own clock, the serving log in the
    # decode node's: each phase is drawn at its node's clock, its start moved to that clock
    prefill_clock = s.prefill_node.socket.clock_hz if s.prefill_node is not None else clock
    # a chunked prompt is served chunk by chunk, but the socket detail is the whole prompt's prefill:
    # drawn at the first chunk without a word, it ran on through the node's decode steps
    chunk = getattr(s, "prefill_chunk", None)
    prefill_title = "prefill" + (f" (the whole {s.prompt_len}-token prompt; served in {chunk}-token chunks)"
                                 if chunk else "")
    if log is not None and not ran:
        prefill_title += f" (the {s.prompt_len}-token prompt's graph, which no request ran: drawn at the first prefill)"
    for phase, timing, plan, at, phase_clock in (
            (prefill_title, result.prefill, s.prefill_plan, prefill_at, prefill_clock),
            ("decode", result.decode, s.decode_plan, decode_at, clock)):
        group = list(range(max(1, plan.tp))) if sockets == "group" else [0]
        out += phase_events(timing.events, phase_clock, title=f"{s.name} · {phase}", sockets=group, first_pid=pid,
                            offset_cycles=at if phase_clock == clock else at * (phase_clock / clock), kernels=timing.kernels,
                            byte_seconds=timing.byte_seconds)
        pid += len(group)
    return out


def build_trace(results: Sequence[Any], *, sockets: str = "group", workload_source: str | None = None) -> dict:
    """The trace object of several points (each in its own block of processes).

    Parameters
    ----------
    results : sequence of PointResult
        Simulated points (``run`` collects them).
    sockets : {"group", "simulated"}
        Draw every socket of each phase's tensor-parallel group, or the simulated socket only.
    workload_source : str, optional
        The request trace the points served and the attribution its licence asks for
        (:func:`~sn40l_sim.serving.traces.trace_source`), kept in ``otherData``: the file carries
        every request's arrival and lengths, a copy of the trace, wherever it is written.
    """
    if sockets not in ("group", "simulated"):
        raise ValueError(f"sockets must be 'group' or 'simulated', got {sockets!r}")
    events: list[dict] = []
    for result in results:
        first = 1 + max((e["pid"] for e in events), default=0)
        events += point_events(result, first_pid=first, sockets=sockets)
    names = [r.setup.name for r in results]
    other: dict[str, Any] = {"generator": "sn40l_sim", "points": names, "time_unit": "us"}
    if workload_source is not None:
        other["workload_source"] = workload_source
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def phase_trace(timing: Any, *, title: str = "phase", sockets: Sequence[int] = (0,)) -> dict:
    """The trace object of one :class:`~sn40l_sim.engine.phase.PhaseTiming` alone (from 0)."""
    clock = timing.cycles / timing.seconds if timing.seconds else 1.0
    events = phase_events(timing.events, clock, title=title, sockets=sockets, kernels=timing.kernels,
                          byte_seconds=timing.byte_seconds)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(path: str | Path, source: Any, *, sockets: str = "group", workload_source: str | None = None) -> Path:
    """Write a trace file and return its path.

    Parameters
    ----------
    path : str or Path
        The ``.json`` file to write (folders are created).
    source : PointResult, sequence of PointResult, PhaseTiming, or dict
        What to draw; a dict is written as it is (a trace object already built).
    sockets, workload_source
        See :func:`build_trace` (for points).
    """
    if isinstance(source, dict):
        trace = source
    elif hasattr(source, "events") and hasattr(source, "kernels"):
        trace = phase_trace(source, title=source.phase)
    elif hasattr(source, "setup") and hasattr(source, "prefill"):
        trace = build_trace([source], sockets=sockets, workload_source=workload_source)
    else:
        trace = build_trace(point_results(source, "source", TRACE_SOURCE), sockets=sockets, workload_source=workload_source)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(trace, separators=(",", ":")) + "\n")
    return path
