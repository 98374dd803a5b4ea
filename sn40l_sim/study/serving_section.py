"""The serving sections of an experiment file: ``workload`` (with its length distributions) and
``serving``. Part of :mod:`sn40l_sim.study.experiment`, which re-exports the sections' models (all
but ``PrefixSharing``) and the default compiled sizes, not the field types or helpers.

Examples
--------
>>> ServingSection().batch, ServingSection().batch_sizes[:4], ServingSection().mode
('max', (1, 2, 4, 8), 'disaggregated')
>>> spec = ServingSection(speculative={"drafts": 2, "acceptance": 0.8}).speculative
>>> spec.drafts, round(spec.speculation().tokens_per_step, 6)
(2, 2.44)
>>> PoissonWorkload(kind="poisson", rate_per_s=2, output_len=64).output_len
ConstantLength(dist='constant', value=64)
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field

from sn40l_sim.errors import shown
from sn40l_sim.schema import (
    MAX_COUNT,
    Flag,
    Fraction,
    NonNegativeInt,
    PositiveInt,
    Range,
    Seconds,
    StrictInt,
    StrictModel,
    ranged,
    timed,
)
from sn40l_sim.serving.speculation import Speculation
from sn40l_sim.serving.workload import MAX_REQUESTS

if TYPE_CHECKING:
    from sn40l_sim.models.spec import ModelSpec

#: default compiled sizes of static graphs: powers of two (an assumption: the compiled
#: sizes of SN40L's static graphs are not published)
POWERS_OF_TWO_BATCH = tuple(2**i for i in range(13))            # 1 .. 4096
POWERS_OF_TWO_PREFILL = tuple(2**i for i in range(21))          # 1 .. 1 Mi tokens


#: the physical ranges of the plain numbers of these sections (the quantity types carry their own)
Tokens = ranged(Range("token count", 1, MAX_COUNT, "1", f"{MAX_COUNT} tokens"))
LogSigma = ranged(Range("log-space sigma", 0, 10, "0", "10", low_open=True))
RequestRate = ranged(Range("positive request rate", 1e-6, 1e6, "1e-6 requests/s", "1e6 requests/s", "requests/s"))
#: speculative decoding: drafts a verify step checks per sequence (published schemes use a few)
#: (a StrictInt, not a NonNegativeInt, whose own range 0 .. 2**31 - 1 would be the one a negative
#: value is told)
Drafts = Annotated[StrictInt, AfterValidator(Range("number of drafts", 0, 15, "0", "15"))]
#: the probability that a draft is accepted when the drafts before it were
Acceptance = ranged(Range("acceptance probability", 0, 1, "0", "1"))
#: requests a workload generates (serving/workload.py, MAX_REQUESTS: a run keeps them all; a StrictInt,
#: as Drafts, so that 0 is told this range and not PositiveInt's 1 .. 2**31 - 1)
RequestCount = Annotated[StrictInt, AfterValidator(Range("request count", 1, MAX_REQUESTS, "1",
                                                           f"{MAX_REQUESTS} (a run keeps every request)"))]
#: a trace window's length: a time, not zero
Duration = timed(Range("positive duration", 0, 1e6, "0 s", "1e6 s (11.6 days)", "s", low_open=True))
#: the most nodes of one kind a serving point runs: 4,096 16-socket nodes are 65,536 sockets, far
#: past any published SN40L deployment, and the serving loop keeps state per node and visits them
#: at its events (10,000 prefill nodes took 17 s for 3,000 requests where 8 take 1 s; 100,000 did
#: not finish in 100 s; a billion, a typo away, exhausted the machine's memory)
MAX_NODES = 4096
NodeCount = Annotated[StrictInt, AfterValidator(Range("node count", 0, MAX_NODES, "0", f"{MAX_NODES}"))]
PositiveNodeCount = Annotated[StrictInt, AfterValidator(Range("node count", 1, MAX_NODES, "1", f"{MAX_NODES}"))]
#: how many times as fast a trace's requests arrive (1e6 would serve a day's trace in a tenth of a second)
RateScale = ranged(Range("rate multiplier", 1e-6, 1e6, "1e-6", "1e6"))


#: what the tagged unions of these sections take (also the messages of a missing or unknown tag,
#: study/experiment.py)
LENGTH_EXPECTED = "an integer, or a mapping with dist: constant | uniform | lognormal"
WORKLOAD_EXPECTED = "a mapping with kind: fixed | poisson | trace"


def _a_mapping(expected: str) -> Any:
    """A check before a tagged union's: a value that is no mapping is told what the field takes,
    not pydantic's "Input should be a valid dictionary or object to extract fields from"."""
    def check(value: Any) -> Any:
        if not isinstance(value, (dict, BaseModel)):
            raise ValueError(f"expected {expected} (got {shown(value)})")
        return value
    return check


def _int_is_constant(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return {"dist": "constant", "value": value}
    return _a_mapping(LENGTH_EXPECTED)(value)


class ConstantLength(StrictModel):
    """Every request has ``value`` tokens."""

    dist: Literal["constant"]
    value: PositiveInt


class UniformLength(StrictModel):
    """Integers uniform in ``[low, high]`` (both included)."""

    dist: Literal["uniform"]
    low: PositiveInt
    high: PositiveInt


class LognormalLength(StrictModel):
    """Lognormal with the given ``median`` and log-space ``sigma``, rounded and clipped to
    ``[low, high]`` (``high`` defaults to the point's prompt length / ``max_new_tokens``)."""

    dist: Literal["lognormal"]
    median: Tokens
    sigma: LogSigma
    low: PositiveInt = 1
    high: PositiveInt | None = None


#: a length distribution; a bare integer means a constant
LengthDist = Annotated[ConstantLength | UniformLength | LognormalLength,
                       Field(discriminator="dist"), BeforeValidator(_int_is_constant)]


class PrefixSharing(StrictModel):
    """Which requests share a prompt prefix: each, with probability ``share``, starts with one of
    ``groups`` prefixes (a system prompt, a conversation's earlier turns) of ``tokens`` tokens (at
    most its prompt less one), drawn with ``serving.seed`` (:mod:`sn40l_sim.serving.prefix_cache`)."""

    share: Fraction
    tokens: PositiveInt
    groups: PositiveInt = 1


class RequestEntry(StrictModel):
    """One request of a fixed list (``prompt_len`` defaults to the point's prompt length)."""

    arrival_s: Seconds = 0.0
    prompt_len: PositiveInt | None = None
    output_len: PositiveInt


class FixedWorkload(StrictModel):
    """``count`` identical requests ``interval_s`` apart from ``arrival_s``, or a ``requests`` list."""

    kind: Literal["fixed"]
    count: RequestCount | Literal["batch"] | None = None
    rounds: RequestCount = 1
    prompt_len: PositiveInt | None = None
    output_len: PositiveInt | None = None
    arrival_s: Seconds = 0.0
    interval_s: Seconds = 0.0
    requests: tuple[RequestEntry, ...] | None = None
    #: requests that share a prompt prefix (none by default)
    prefix: PrefixSharing | None = None


class PoissonWorkload(StrictModel):
    """``count`` requests with exponential inter-arrival times of mean ``1 / rate_per_s``."""

    kind: Literal["poisson"]
    rate_per_s: RequestRate
    count: RequestCount | Literal["batch"] = "batch"
    rounds: RequestCount = 1
    #: default: every prompt has the point's prompt length
    prompt_len: LengthDist | None = None
    output_len: LengthDist
    #: requests that share a prompt prefix (none by default)
    prefix: PrefixSharing | None = None


class TraceWorkload(StrictModel):
    """Requests read from a trace file (:mod:`sn40l_sim.serving.traces`): a CSV with the header
    ``arrival_s,prompt_len,output_len`` or the Azure LLM inference trace's
    ``TIMESTAMP,ContextTokens,GeneratedTokens``, or a JSONL file; optionally a time window of it,
    its arrival rate scaled, and lengths above the compiled graphs capped (and reported)."""

    kind: Literal["trace"]
    path: str
    #: the window's start, seconds after the trace's first request (arrivals count from it)
    start_s: Seconds = 0.0
    #: the window's length (None: to the end of the trace)
    duration_s: Duration | None = None
    #: arrival rate multiplier: arrivals come ``rate_scale`` times as fast (same requests, same order)
    rate_scale: RateScale = 1.0
    #: cap prompts above the point's prompt length and outputs above ``max_new_tokens`` to them
    #: (the results report how many and how many tokens); without it such a request is an error
    cap_lengths: Flag = False
    #: requests that share a prompt prefix (none by default)
    prefix: PrefixSharing | None = None


Workload = Annotated[FixedWorkload | PoissonWorkload | TraceWorkload, Field(discriminator="kind"),
                     BeforeValidator(_a_mapping(WORKLOAD_EXPECTED))]


def workload_summary(workload: FixedWorkload | PoissonWorkload | TraceWorkload) -> str:
    """The workload in one line, as the experiment gives it: its kind, then every setting that
    differs from its default (a list of requests as its length), so two runs that served different
    requests say so in their results (``compare`` names it in a point's heading).

    >>> workload_summary(TraceWorkload(kind="trace", path="t.csv", rate_scale=3))
    'trace, path=t.csv, rate_scale=3.0'
    >>> workload_summary(PoissonWorkload(kind="poisson", rate_per_s=2, output_len={"dist": "uniform", "low": 1, "high": 9}))
    'poisson, rate_per_s=2.0, output_len={"dist":"uniform","low":1,"high":9}'
    """
    settings = workload.model_dump(exclude_defaults=True, exclude={"kind"}, mode="json")
    return ", ".join([workload.kind, *(f"{key}={_setting_text(value)}" for key, value in settings.items())])


def _setting_text(value: object) -> str:
    if isinstance(value, list):
        return f"[{len(value)} entries]"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


class SpeculativeSection(StrictModel):
    """Speculative decoding with the model's multi-token-prediction (MTP) module as the draft.

    Each decode step verifies ``drafts`` tokens per sequence (the main model over ``drafts + 1``
    rows, the MTP module run ``drafts`` times) and each draft is accepted with probability
    ``acceptance`` when the ones before it were: a step yields ``(1 - a^(k+1)) / (1 - a)`` tokens
    per sequence on average (:mod:`sn40l_sim.serving.speculation`). The model needs an ``mtp``
    section. The SnapStream paper's setting is ``{drafts: 2, acceptance: 0.8}`` (its "x 2.4 at an
    assumed 80% acceptance", docs/reference.md §3).
    """

    drafts: Drafts
    acceptance: Acceptance

    def speculation(self) -> Speculation:
        """The serving model's :class:`~sn40l_sim.serving.speculation.Speculation`."""
        return Speculation(self.drafts, self.acceptance)


def _refuse_tokens_per_forward(value: Any) -> Any:
    if value is not None:
        raise ValueError("no longer a multiplier: tokens per forward now follow from the speculation "
                         "the decode step computes; write serving.speculative: {drafts: 2, acceptance: 0.8} "
                         "(the SnapStream paper's x2.4), or leave both out for plain decode")
    return value


class ServingSection(StrictModel):
    """How requests are served (see :mod:`sn40l_sim.serving.loop`)."""

    mode: Literal["disaggregated", "colocated"] = "disaggregated"
    #: nodes that only prefill (disaggregated; default 1). Must be absent or 0 when co-located.
    prefill_nodes: NodeCount | None = None
    #: nodes that decode (co-located: nodes that do both)
    decode_nodes: PositiveNodeCount = 1
    #: decode slots per node: ``max`` (the largest of ``batch_sizes`` that fits) or a number, which
    #: is the compiled batch itself (not rounded to one of ``batch_sizes``)
    batch: PositiveInt | Literal["max"] = "max"
    #: the compiled batches of the static decode graph that ``batch: max`` chooses from
    batch_sizes: tuple[PositiveInt, ...] = POWERS_OF_TWO_BATCH
    #: the compiled prompt lengths of the static prefill graph: a prompt runs the smallest that
    #: holds it (by default, powers of two closed by the model's max_context: study/assemble.py)
    prefill_lens: tuple[PositiveInt, ...] = POWERS_OF_TWO_PREFILL
    #: the static decode graph's maximum generated length (default: ``shape.max_new_tokens``)
    max_new_tokens: PositiveInt | None = None
    #: speculative decoding (none by default: one token per sequence and step)
    speculative: SpeculativeSection | None = None
    #: refused with a message saying what to write instead (it was a plain multiplier of the
    #: reported throughput; ``speculative`` now states what the decode step computes)
    tokens_per_forward: Annotated[Any, AfterValidator(_refuse_tokens_per_forward)] = None
    #: link carrying the KV cache from a prefill node to a decode node (``p2p``: the P2P ports each
    #: socket's node topology leaves spare, at least one; serving/kv_transfer.py)
    kv_transfer: Literal["host_link", "p2p"] = "host_link"
    seed: NonNegativeInt = 0
    #: reuse the KV of prompt prefixes that requests share (workload.prefix says which do;
    #: serving/prefix_cache.py)
    prefix_cache: Flag = False
    #: co-located: prompt tokens prefilled between two decode steps (None: whole prompts first;
    #: serving/chunked_prefill.py)
    prefill_chunk: PositiveInt | None = None

    def node_settings(self) -> str:
        """What chunked prefill and prefix caching change in what a node does, for ``describe``'s
        serving line (run's records carry their groups); empty without them.

        >>> ServingSection(mode="colocated", prefill_chunk=2048, prefix_cache=True).node_settings()
        '; at most 2,048 prompt tokens prefilled between two decode steps (serving.prefill_chunk); prompt prefixes requests share reused (serving.prefix_cache)'
        """
        chunk = f"; at most {self.prefill_chunk:,} prompt tokens prefilled between two decode steps " \
            "(serving.prefill_chunk)" if self.prefill_chunk else ""
        return chunk + ("; prompt prefixes requests share reused (serving.prefix_cache)" if self.prefix_cache else "")


def prefill_lens(serving: Any, model: ModelSpec) -> tuple[int, ...]:
    """The compiled prompt lengths of the static prefill graph: the experiment's
    ``serving.prefill_lens`` when it gives them, else powers of two closed by the model's maximum
    context (no graph is compiled for more positions than the model has: DeepSeek-R1's 163,840-token
    context ran a 150,000-token prompt on a 262,144-token graph, timed and sized as such).

    >>> from types import SimpleNamespace
    >>> serving = SimpleNamespace(prefill_lens=(1, 2, 4, 8, 16), model_fields_set=set())
    >>> prefill_lens(serving, SimpleNamespace(max_context=10)), prefill_lens(serving, SimpleNamespace(max_context=None))
    ((1, 2, 4, 8, 10), (1, 2, 4, 8, 16))
    """
    limit = model.max_context
    if "prefill_lens" in serving.model_fields_set or limit is None:
        return tuple(serving.prefill_lens)
    return tuple(n for n in serving.prefill_lens if n < limit) + (limit,)
