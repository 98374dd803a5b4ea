"""The books a decode node keeps of its sequences: step by step, or by runs of steps.

The serving loop (:mod:`sn40l_sim.serving.loop`) asks a node's book how many decode steps to run
in one event, then has it record them: the tokens each step gave its sequences, the
:class:`~sn40l_sim.serving.serving_log.StepLog` of each step, and which sequences finished.

* :class:`StepwiseBook` is the reference: one step per event; every step draws each sequence's
  accepted drafts and recomputes the KV bytes of every sequence the node holds.
* :class:`RunBook` does the same work once per request: when a sequence joins, its tokens per
  step (its accepted drafts drawn in one go from its own generator, the same stream the reference
  reads one step at a time, for all requests at once when the serve starts:
  :mod:`sn40l_sim.serving.drafts`) and its cached tokens at the end of each of its steps are added to the
  node's arrays of steps to come, indexed by step. A step then reads its tokens and KV there, and
  a run of steps in which nothing can change the node (no event before its end that can reach it,
  :mod:`sn40l_sim.serving.run_bounds`; no sequence finishing before its last step) is advanced in
  one event. Every event the run skips is one of the node's own steps that changes no shared
  state, so the serving log is identical to the reference's.

With prefix caching sharing decode KV (:mod:`sn40l_sim.serving.prefix_cache`), a step's KV bytes
lose what the node's sequences save by storing each shared prefix once. Within a run the node holds
the same sequences, and a sequence whose cache already covers its prefix saves the same from step
to step (its cache only grows), so one computation serves the whole run; while a stepping sequence
with a prefix still caches fewer tokens than the prefix (a cache that starts below it), its saving
changes from step to step, and the book runs one step per event instead.

A sequence's cached tokens must grow by one per generated token from its length after prefill
until a cap (``min(cache_tokens(p, 0) + g, cap)``), as every KV policy's ``cache_len`` does; the
book checks that at the points where it matters and refuses a function that does not.

Examples
--------
>>> setup_tokens = lambda p, g: min(p + g, 12)
>>> cached_tokens(setup_tokens, 10, np.array([1, 2, 3, 4]))
array([11, 12, 12, 12])
"""
from __future__ import annotations

import functools
import heapq
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from sn40l_sim.serving.batching import SlotTable
from sn40l_sim.serving.drafts import request_draws, tokens_per_step
from sn40l_sim.serving.prefix_cache import decode_kv_tokens, has_prefix, prefix_tokens
from sn40l_sim.serving.serving_log import DecodeTokens, RequestLog, StepLog
from sn40l_sim.serving.step_table import StepTable

if TYPE_CHECKING:
    from sn40l_sim.serving.scheduler import Scheduler, Signal
    from sn40l_sim.serving.setup import ServingSetup


def cache_bounds(cache_tokens: Callable[[int, int], int], prompt_len: int, most: int) -> tuple[int, int]:
    """``cache_tokens(prompt_len, g)`` at ``g = 0`` and ``g = most``, from a function that must be
    ``min(cache_tokens(p, 0) + g, cap)`` (checked at the cap's knee).

    Raises
    ------
    ValueError
        When ``cache_tokens`` is not of that form at the points checked.
    """
    first = cache_tokens(prompt_len, 0)
    last = cache_tokens(prompt_len, most)
    knee = last - first  # the first g at the cap (beyond ``most`` when the cap is not reached)
    ok = 0 <= knee <= most and cache_tokens(prompt_len, knee) == last \
        and (knee == 0 or cache_tokens(prompt_len, knee - 1) == last - 1)
    if not ok:
        raise ValueError(f"cache_tokens({prompt_len}, g) must grow by one token per generated token from "
                         f"cache_tokens({prompt_len}, 0) = {first} until a cap; it is {last} at g = {most}")
    return first, last


def cached_tokens(cache_tokens: Callable[[int, int], int], prompt_len: int, generated: np.ndarray) -> np.ndarray:
    """``cache_tokens(prompt_len, g)`` for every ``g`` of the increasing array ``generated``, from
    three calls (:func:`cache_bounds`)."""
    first, last = cache_bounds(cache_tokens, prompt_len, int(generated[-1]))
    return np.minimum(first + generated, last)


class StepwiseBook:
    """The reference book: one step per event, every sequence's tokens and KV recomputed each step."""

    def __init__(self, index: int, setup: ServingSetup) -> None:
        self.index, self.setup = index, setup
        self.active: list[RequestLog] = []
        self._draws: dict[int, np.random.Generator] = {}

    @property
    def stepping(self) -> int:
        """Sequences the next step computes."""
        return len(self.active)

    def hold(self, log: RequestLog) -> None:
        """``log``'s cache starts occupying the node (reserved or arriving; nothing to do here)."""

    def drop(self, log: RequestLog) -> None:
        """``log``'s cache leaves the node without joining (nothing to do here)."""

    def join(self, logs: list[RequestLog]) -> None:
        """``logs`` take part in the steps from the next one on."""
        self.active.extend(logs)

    def steps_to_run(self, env: Scheduler) -> int:
        """Steps to advance in the next event: always one."""
        return 1

    def _step_tokens(self, log: RequestLog) -> int:
        spec = self.setup.speculation
        accepted = 0
        if spec.drafts:
            request_id = log.request.id
            if request_id not in self._draws:
                self._draws[request_id] = request_draws(self.setup.seed, request_id)
            accepted = spec.accepted(self._draws[request_id])
        return min(1 + accepted, log.request.output_len - log.generated)

    def record(self, start: int, count: int, node: _NodeView, steps: StepTable) -> list[RequestLog]:
        """Give the step's tokens, log it (before finished sequences leave, so its peak KV is what
        is recorded) and return the sequences that finished."""
        end = start + self.setup.decode_step_cycles
        tokens = 0
        for log in self.active:
            n = self._step_tokens(log)
            log.add_token(end, n)
            tokens += n
        held = self.active + node.arrived + node.incoming
        pairs = [(log.request, self.setup.cache_tokens(log.request.prompt_len, max(0, log.generated - 1)))
                 for log in held]
        caching, bpt = self.setup.prefix_caching, self.setup.kv_bytes_per_token
        kv, saved = (sum(n for _, n in pairs), 0) if caching is None else decode_kv_tokens(caching, pairs)
        steps.append(StepLog(self.index, start, end, len(self.active), node.table.in_use,
                             kv * bpt, tokens, saved * bpt))
        finished = [log for log in self.active if log.generated == log.request.output_len]
        self.active = [log for log in self.active if log.generated != log.request.output_len]
        return finished


class _Growable:
    """An int64 array indexed by step, grown as the steps to come are known."""

    def __init__(self) -> None:
        self.values = np.zeros(256, dtype=np.int64)

    def reserve(self, end: int) -> None:
        """Make steps up to ``end`` (excluded) readable (zero where nothing was added)."""
        if end > len(self.values):
            grown = np.zeros(max(end, 2 * len(self.values)), dtype=np.int64)
            grown[:len(self.values)] = self.values
            self.values = grown

    def add(self, at: int, values: np.ndarray) -> None:
        """Add ``values`` to the steps from ``at`` on."""
        end = at + len(values)
        self.reserve(end)
        self.values[at:end] += values


class RunBook:
    """The book by requests: each sequence's tokens and cached tokens per step added once, when it
    joins, to the node's arrays of steps to come; runs of steps in one event."""

    def __init__(self, index: int, setup: ServingSetup, drafted: dict[int, tuple[int, np.ndarray]] | None = None) -> None:
        self.index, self.setup = index, setup
        self._step_cycles, self._kv_bytes_per_token = setup.decode_step_cycles, setup.kv_bytes_per_token
        self._drafts = setup.speculation.drafts
        #: what :func:`~sn40l_sim.serving.drafts.drafted_tokens` drew for the requests: id ->
        #: (tokens needed, tokens per step); taken as each joins, drawn then if missing or for
        #: another length
        self._drafted = drafted if drafted is not None else {}
        # pure functions of a prompt length and the tokens a sequence still needs: requests of a
        # trace share a few of both
        self._cache_tokens = functools.lru_cache(maxsize=4096)(setup.cache_tokens)
        self._bounds = functools.lru_cache(maxsize=4096)(functools.partial(cache_bounds, self._cache_tokens))
        self._count = np.zeros(0, dtype=np.int64)   # 1, 2, 3, ... (see _counting)
        #: end cycle of every step the node took (int64: a busy serve takes millions of steps, which
        #: a list of Python integers held at 40 bytes each)
        self.ends = array("q")
        self._tokens = _Growable()       # tokens each step gives (with drafts; else one per sequence)
        self._cached = _Growable()       # cached tokens of the stepped sequences at each step's end,
        self._constant = 0               # less this, the same at every step while they step
        #: the sequences finishing at each step, with their constant part of ``_cached``
        self._finishing: dict[int, list[tuple[RequestLog, int]]] = {}
        self._finish_steps: list[int] = []
        self._held_tokens = 0            # cached tokens of the sequences reserved or arrived, not yet stepping
        self.stepping = 0
        caching = setup.prefix_caching
        self._sharing = caching is not None and caching.share_decode_kv
        #: stepping sequences with a prefix (decode sharing on): request id -> (log, first step, cached tokens)
        self._prefixed: dict[int, tuple[RequestLog, int, np.ndarray]] = {}

    def _counting(self, remaining: int) -> np.ndarray:
        """``1 .. remaining``: a sequence's generated tokens after each step, one per step (a
        read-only view of one array the book keeps)."""
        if remaining > len(self._count):
            self._count = np.arange(1, max(remaining, 2 * len(self._count)) + 1, dtype=np.int64)
            self._count.flags.writeable = False
        return self._count[:remaining]

    def _cached_parts(self, prompt_len: int, remaining: int, per_step: np.ndarray | None) -> tuple[int, np.ndarray | None]:
        """A joining sequence's cached tokens after each of its steps (``per_step`` tokens each,
        None: one), as a constant and an array (None: nothing that varies),
        ``min(first + generated, last)``, from its bounds: the cap reached from its first step on
        (every policy that keeps a fixed budget) is a constant, the cap never reached is ``first``
        plus ``generated``; only a cap reached on the way needs an array of its own."""
        first, last = self._bounds(prompt_len, remaining)
        if last - first <= 1:        # every step generates at least one token
            return last, None
        generated = self._counting(remaining) if per_step is None else per_step.cumsum()
        if last - first == remaining:
            return first, generated
        return 0, np.minimum(first + generated, last)

    def _first_tokens(self, log: RequestLog) -> int:
        return self._cache_tokens(log.request.prompt_len, 0)

    def hold(self, log: RequestLog) -> None:
        """``log``'s cache starts occupying the node (a slot reserved for it)."""
        self._held_tokens += self._first_tokens(log)

    def drop(self, log: RequestLog) -> None:
        """``log``'s cache leaves the node without joining (a request of one token)."""
        self._held_tokens -= self._first_tokens(log)

    def join(self, logs: list[RequestLog]) -> None:
        """``logs`` take part in the steps from the next one on: their tokens and cached tokens per
        step go into the node's arrays, and each is due to finish at its last step."""
        at = len(self.ends)
        spec = self.setup.speculation
        for log in logs:
            req = log.request
            self._held_tokens -= self._cache_tokens(req.prompt_len, 0)
            remaining = req.output_len - log.generated
            per_step = None     # one token per step: a step gives as many as it steps sequences
            if spec.drafts:
                drafted = self._drafted.pop(req.id, None)
                per_step = drafted[1] if drafted is not None and drafted[0] == remaining else \
                    tokens_per_step(spec, request_draws(self.setup.seed, req.id), remaining)[0]
                self._tokens.add(at, per_step)
            steps = remaining if per_step is None else len(per_step)
            constant, varying = self._cached_parts(req.prompt_len, remaining, per_step)
            self._constant += constant
            if varying is not None:
                self._cached.add(at, varying)
            if self._sharing and has_prefix(req):
                cached = np.full(steps, constant, dtype=np.int64) if varying is None else constant + varying
                self._prefixed[req.id] = (log, at, cached)
            log.set_decode(DecodeTokens(self.ends, at, steps, per_step))
            last_step = at + steps - 1
            if last_step in self._finishing:
                self._finishing[last_step].append((log, constant))
            else:
                self._finishing[last_step] = [(log, constant)]
                heapq.heappush(self._finish_steps, last_step)
        self.stepping += len(logs)

    @property
    def next_finish_step(self) -> int:
        """The first step (index into :attr:`ends`) in which a stepping sequence finishes."""
        return self._finish_steps[0]

    def steps_to_run(self, env: Scheduler) -> int:
        """Steps to advance in one event: up to the first step a sequence finishes in, and only
        steps that end before ``env.peek()``: the next event of the simulation, or on several
        decode nodes the first that can change this one (:mod:`sn40l_sim.serving.run_bounds`)."""
        own = self._finish_steps[0] - len(self.ends) + 1
        if own == 1:   # a sequence finishes at the next step (most events of a full node)
            return 1
        if self._prefixed and not self._prefix_saving_fixed():
            return 1
        due = env.peek()
        if due == float("inf"):
            return own
        clear = (int(due) - int(env.now) - 1) // self.setup.decode_step_cycles
        return max(1, min(own, clear))

    def _prefix_saving_fixed(self) -> bool:
        """Whether every stepping sequence with a prefix caches at least its prefix at the next step
        (then what sharing saves stays the same until the node's sequences change)."""
        step = len(self.ends)
        return all(cached[step - at] >= prefix_tokens(log.request) for log, at, cached in self._prefixed.values())

    def _saved_tokens(self, node: _NodeView) -> int:
        """Cache tokens the node's sequences save at the next step by storing each shared prefix once."""
        step, cache_tokens = len(self.ends), self.setup.cache_tokens
        pairs = [(log.request, int(cached[step - at])) for log, at, cached in self._prefixed.values()]
        pairs += [(log.request, cache_tokens(log.request.prompt_len, max(0, log.generated - 1)))
                  for log in node.arrived + node.incoming if has_prefix(log.request)]
        return decode_kv_tokens(self.setup.prefix_caching, pairs)[1]

    def record(self, start: int, count: int, node: _NodeView, steps: StepTable) -> list[RequestLog]:
        """Log ``count`` steps from ``start`` and return the sequences that finished (at the last)."""
        cycles, bpt = self._step_cycles, self._kv_bytes_per_token
        held = self._held_tokens + self._constant
        # the same for every step of the run (steps_to_run runs one step while it would change)
        saved = self._saved_tokens(node) if self._sharing else 0
        held -= saved
        first = len(self.ends)
        last = first + count - 1
        index, stepping, in_use = self.index, self.stepping, node.table.in_use
        if last >= len(self._cached.values):   # (sequences whose cached tokens are constant add nothing)
            self._cached.reserve(last + 1)
        if count == 1:   # most events of a busy serve: skip the slicing and the list building
            end = start + cycles
            self.ends.append(end)
            tokens = self._tokens.values.item(first) if self._drafts else stepping
            steps.append((index, start, end, stepping, in_use, (self._cached.values.item(first) + held) * bpt,
                          tokens, saved * bpt))
        else:
            cached = self._cached.values[first:last + 1].tolist()
            tokens = self._tokens.values[first:last + 1].tolist() if self._drafts else [stepping] * count
            ends = range(start + cycles, start + (count + 1) * cycles, cycles)
            self.ends.extend(ends)
            steps.extend([StepLog(index, end - cycles, end, stepping, in_use, (kv + held) * bpt, n, saved * bpt)
                          for end, kv, n in zip(ends, cached, tokens, strict=True)])
        finishing = self._finishing.pop(last, None)
        if finishing is None:
            return []
        heapq.heappop(self._finish_steps)
        for log, constant in finishing:
            self._constant -= constant
            if self._prefixed:
                self._prefixed.pop(log.request.id, None)
        self.stepping -= len(finishing)
        return [log for log, _ in finishing]


@dataclass
class DecodeNode:
    """A decode node of the serving loop (:mod:`sn40l_sim.serving.loop`): its slots, its book and
    the sequences it holds that are not stepping."""

    index: int
    table: SlotTable
    wake: Signal
    #: the node's sequences that are stepping, and what their steps give (the books above)
    book: StepwiseBook | RunBook
    #: sequences whose cache has arrived and that join at the next step
    arrived: list[RequestLog] = field(default_factory=list)
    #: sequences with a reserved slot whose cache is still crossing the link (or being prefilled)
    incoming: list[RequestLog] = field(default_factory=list)
    #: its boundaries' place among other nodes' on a cycle; a boundary due now; its run's end cycle,
    #: last step and whether a prefill chunk follows (the loop's ``_step_boundary``, :mod:`.run_bounds`)
    chain: int = 0
    late_pending: bool = False
    run_end: tuple[int, int, bool] | None = None

    def hold(self, log: RequestLog) -> None:
        """A slot is reserved for ``log``: its cache is on its way (or being prefilled here)."""
        self.incoming.append(log)
        self.book.hold(log)


class _NodeView(Protocol):
    """What a book reads of its node: the slot table and the sequences held there, not stepping."""

    table: SlotTable
    arrived: list[RequestLog]
    incoming: list[RequestLog]

