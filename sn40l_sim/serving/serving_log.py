"""What the serving loop records: per request, per decode step, and for the run.

A request's output tokens come out one at a time (the first from prefill; every token with the
step-by-step loop) or by the run of decode steps its sequence took part in: its node's step end
cycles from one step index on, and the tokens each step gave it (one each without speculation).
:attr:`RequestLog.token_cycles` expands both into the list of cycles, so what the report derives
from it (TTFT, TPOT, inter-token latency) does not depend on how the loop advanced.

Examples
--------
>>> from sn40l_sim.serving.workload import Request
>>> log = RequestLog(Request(0, 0, 10, 5))
>>> log.add_token(100)
>>> log.set_decode(DecodeTokens(ends=[110, 120, 130, 140], first_step=1, steps=2, per_step=np.array([1, 3])))
>>> log.token_cycles, log.generated, log.last_token
([100, 120, 130, 130, 130], 5, 130)
"""
from __future__ import annotations

from collections.abc import MutableSequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sn40l_sim.serving.workload import Request

if TYPE_CHECKING:
    from sn40l_sim.serving.prefix_cache import PrefixTracker
    from sn40l_sim.serving.setup import ServingSetup
    from sn40l_sim.serving.step_table import StepTable


class DecodeTokens(NamedTuple):
    """The tokens a sequence got from a run of its node's decode steps (a named tuple: one per
    request, made as it joins).

    Attributes
    ----------
    ends : sequence of int
        End cycle of every step of the node (shared with the node; it grows as the node steps: an
        ``array('q')`` by requests, a list in the doctests).
    first_step, steps : int
        Index in ``ends`` of the sequence's first step, and how many steps it took part in.
    per_step : numpy.ndarray or None
        Tokens each of those steps gave it (None: one per step).
    """

    ends: MutableSequence[int]
    first_step: int
    steps: int
    per_step: np.ndarray | None = None

    @property
    def total(self) -> int:
        """Tokens over all the steps."""
        return self.steps if self.per_step is None else int(self.per_step.sum())

    def cycles(self) -> np.ndarray:
        """The cycle of every token (int64), in order."""
        ends = np.asarray(self.ends[self.first_step:self.first_step + self.steps], dtype=np.int64)
        return ends if self.per_step is None else np.repeat(ends, self.per_step)


@dataclass(slots=True)
class RequestLog:
    """What happened to one request (all times in cycles; -1 where a stage did not happen)."""

    request: Request
    prefill_node: int = -1
    prefill_start: int = -1
    first_token: int = -1
    transfer_start: int = -1
    transfer_end: int = -1
    decode_node: int = -1
    slot: int = -1
    #: when the slot was taken (reserved for the transfer, or at prefill when co-located)
    slot_acquired: int = -1
    join: int = -1
    finish: int = -1
    #: chunked prefill: the (start, end) cycles of each chunk of the prompt (empty: one prefill
    #: from ``prefill_start`` to ``first_token``; decode steps may run between two chunks)
    prefill_chunks: list[tuple[int, int]] = field(default_factory=list, repr=False)
    #: tokens given one at a time (the first from prefill), in order, before ``decode``'s
    single_tokens: list[int] = field(default_factory=list, repr=False)
    #: tokens given by a run of decode steps (None when every token was given one at a time)
    decode: DecodeTokens | None = field(default=None, repr=False)

    def add_token(self, cycle: int, count: int = 1) -> None:
        """``count`` tokens came out at ``cycle``."""
        if count == 1:
            self.single_tokens.append(cycle)
        else:
            self.single_tokens.extend([cycle] * count)

    def set_decode(self, tokens: DecodeTokens) -> None:
        """The tokens the sequence's decode steps give (after the single ones)."""
        self.decode = tokens

    @property
    def generated(self) -> int:
        """Output tokens so far."""
        return len(self.single_tokens) + (self.decode.total if self.decode is not None else 0)

    @property
    def last_token(self) -> int:
        """Cycle of the last output token (-1 before the first)."""
        if self.decode is not None and self.decode.steps:
            return self.decode.ends[self.decode.first_step + self.decode.steps - 1]
        return self.single_tokens[-1] if self.single_tokens else -1

    def token_array(self) -> np.ndarray:
        """The cycle each output token came out (int64), the first one from prefill."""
        single = np.asarray(self.single_tokens, dtype=np.int64)
        return single if self.decode is None else np.concatenate([single, self.decode.cycles()])

    @property
    def token_cycles(self) -> list[int]:
        """The cycle each output token came out, the first one from prefill."""
        if self.decode is None:
            return list(self.single_tokens)
        return self.token_array().tolist()


class StepLog(NamedTuple):
    """One decode step of one node: sequences stepped, tokens they got, slots holding a sequence
    and KV bytes resident at its end (a named tuple: a serve logs one per node and step)."""

    node: int
    start: int
    end: int
    active: int
    slots_in_use: int
    kv_bytes: int
    #: tokens the step gave its sequences: ``active`` plus the accepted drafts
    tokens: int = 0
    #: KV bytes not held because sequences share a prefix (prefix caching; 0 otherwise)
    kv_bytes_saved: int = 0


@dataclass
class ServingLog:
    """The outcome of :func:`sn40l_sim.serving.loop.simulate`."""

    setup: ServingSetup
    requests: list[RequestLog]
    steps: StepTable
    end_cycle: int
    #: busy cycles per node, by role: ``prefill[i]``, ``decode[i]`` (decode steps), ``link[i]``
    busy: dict[str, list[int]]
    #: what prefix caching reused (None without it)
    prefixes: PrefixTracker | None = None
    #: where the window the run's rates are over starts (None: its first request's arrival): a
    #: model's share of a run of several models on one node starts where the node's run does, so
    #: that every model's rates are over one window (report/multi_model_fields.py)
    start_cycle: int | None = None
    #: each graph switch of a co-located node: ``(node, start, end, graph)``, the configurations of
    #: ``graph`` loaded again before it runs (their cycles are ``busy["graph_switch"]``); of a model
    #: sharing a node, also ``"weights"``: the node waiting for the model's weights to be copied in
    switches: list[tuple[int, int, int, str]] = field(default_factory=list)

    @property
    def span_start(self) -> int:
        """Start of the window the run's rates are over (it ends at ``end_cycle``)."""
        if self.start_cycle is not None:
            return self.start_cycle
        return min(r.request.arrival_cycle for r in self.requests)
