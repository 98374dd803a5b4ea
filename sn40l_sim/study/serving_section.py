"""The serving sections of an experiment file: ``workload`` (with its length distributions) and
``serving``. Part of :mod:`sn40l_sim.study.experiment`, which re-exports every name here.

Examples
--------
>>> ServingSection().batch, ServingSection().batch_sizes[:4], ServingSection().mode
('max', (1, 2, 4, 8), 'disaggregated')
>>> PoissonWorkload(kind="poisson", rate_per_s=2, output_len=64).output_len
ConstantLength(dist='constant', value=64)
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from sn40l_sim.schema import MAX_COUNT, NonNegativeInt, PositiveInt, Range, Seconds, StrictModel, ranged

#: default compiled sizes of static graphs: powers of two (an assumption: the compiled
#: sizes of SN40L's static graphs are not published)
POWERS_OF_TWO_BATCH = tuple(2**i for i in range(13))            # 1 .. 4096
POWERS_OF_TWO_PREFILL = tuple(2**i for i in range(21))          # 1 .. 1 Mi tokens


#: the physical ranges of the plain numbers of these sections (the quantity types carry their own)
Tokens = ranged(Range("token count", 1, MAX_COUNT, "1", f"{MAX_COUNT} tokens"))
LogSigma = ranged(Range("log-space sigma", 0, 10, "0", "10", low_open=True))
RequestRate = ranged(Range("positive request rate", 0, 1e6, "0", "1e6 requests/s", "requests/s", low_open=True))
#: multi-token prediction: tokens a forward pass yields (1 without; speculative schemes reach a few)
TokensPerForward = ranged(Range("number of tokens per forward pass", 1, 16, "1", "16"))


def _int_is_constant(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return {"dist": "constant", "value": value}
    return value


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


class RequestEntry(StrictModel):
    """One request of a fixed list (``prompt_len`` defaults to the point's prompt length)."""

    arrival_s: Seconds = 0.0
    prompt_len: PositiveInt | None = None
    output_len: PositiveInt


class FixedWorkload(StrictModel):
    """``count`` identical requests ``interval_s`` apart from ``arrival_s``, or a ``requests`` list."""

    kind: Literal["fixed"]
    count: PositiveInt | Literal["batch"] | None = None
    rounds: PositiveInt = 1
    prompt_len: PositiveInt | None = None
    output_len: PositiveInt | None = None
    arrival_s: Seconds = 0.0
    interval_s: Seconds = 0.0
    requests: tuple[RequestEntry, ...] | None = None


class PoissonWorkload(StrictModel):
    """``count`` requests with exponential inter-arrival times of mean ``1 / rate_per_s``."""

    kind: Literal["poisson"]
    rate_per_s: RequestRate
    count: PositiveInt | Literal["batch"] = "batch"
    rounds: PositiveInt = 1
    #: default: every prompt has the point's prompt length
    prompt_len: LengthDist | None = None
    output_len: LengthDist


class TraceWorkload(StrictModel):
    """Requests read from a CSV (header ``arrival_s,prompt_len,output_len``) or JSONL file."""

    kind: Literal["trace"]
    path: str


Workload = Annotated[FixedWorkload | PoissonWorkload | TraceWorkload, Field(discriminator="kind")]


class ServingSection(StrictModel):
    """How requests are served (see :mod:`sn40l_sim.serving.loop`)."""

    mode: Literal["disaggregated", "colocated"] = "disaggregated"
    #: nodes that only prefill (disaggregated; default 1). Must be absent or 0 when co-located.
    prefill_nodes: NonNegativeInt | None = None
    #: nodes that decode (co-located: nodes that do both)
    decode_nodes: PositiveInt = 1
    #: decode slots per node: ``max`` (largest compiled size that fits) or a number
    batch: PositiveInt | Literal["max"] = "max"
    batch_sizes: tuple[PositiveInt, ...] = POWERS_OF_TWO_BATCH
    prefill_lens: tuple[PositiveInt, ...] = POWERS_OF_TWO_PREFILL
    #: the static decode graph's maximum generated length (default: ``shape.max_new_tokens``)
    max_new_tokens: PositiveInt | None = None
    tokens_per_forward: TokensPerForward = 1.0
    #: link carrying the KV cache from a prefill node to a decode node
    kv_transfer: Literal["host_link", "p2p"] = "host_link"
    seed: NonNegativeInt = 0
