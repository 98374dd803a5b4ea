"""What the serving loop (:mod:`sn40l_sim.serving.loop`) is given: node counts, step costs as
numbers and functions of the prompt, cache lengths and the serving options, in cycles and tokens."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from sn40l_sim.serving.prefix_cache import PrefixCaching
from sn40l_sim.serving.speculation import Speculation


def no_cycles(prompt_len: int) -> int:
    """No cycles, whatever the prompt (a cost a setup does not pay)."""
    return 0


class PrefillRun(NamedTuple):
    """A prefill graph a co-located node runs, as its loop knows it: ``rows`` prompt tokens (a whole
    prompt's, or, ``part``, a chunk's or a prefix hit's suffix's) after ``earlier`` tokens of the
    prompt (a chunk's earlier chunks, or, ``hit``, a prefix's cached tokens)."""

    rows: int
    earlier: int = 0
    part: bool = False
    hit: bool = False


@dataclass(frozen=True)
class ServingSetup:
    """Everything the serving model needs, in cycles and tokens.

    Attributes
    ----------
    mode : {"disaggregated", "colocated"}
    prefill_nodes, decode_nodes : int
        Node counts (``prefill_nodes`` is ignored when co-located).
    slots : int
        Compiled decode batch per decode node.
    decode_step_cycles : int
        One decode step of the static graph (all slots).
    prefill_cycles, transfer_cycles : callable
        ``prompt_len -> cycles`` of prefill and of the KV transfer to a decode node.
    cache_tokens : callable
        ``(prompt_len, generated) -> tokens`` cached per layer (the KV policy's ``cache_len``): one
        more per generated token from ``cache_tokens(prompt_len, 0)`` until a cap, as every
        policy's is.
    kv_bytes_per_token : int
        KV bytes per cached token over all layers.
    slot_cache_tokens : int
        Tokens reserved per slot where a sequence's whole cache lives: its static slot, or the
        store of a policy that keeps one in another tier (the occupancy is measured against it).
    speculation : Speculation
        Drafts verified per step and their acceptance rate (none by default: one token per step).
    seed : int
        Seeds the draws of accepted drafts (with each request's id).
    prefix_caching : PrefixCaching or None
        Reuse of shared prompt prefixes (:mod:`sn40l_sim.serving.prefix_cache`; None: every prompt
        prefilled and stored whole).
    prefix_hit_cycles : callable or None
        With ``prefix_caching``: ``(prompt_len, held prefix tokens) -> (cycles, tokens reused)`` of
        a prefill whose prefix the node holds (the suffix's graph over the prefix's keys:
        :func:`~sn40l_sim.serving.prefix_cache.prefix_hit_cycles`); required with ``prefix_caching``.
    prefill_chunk : int or None
        Co-located: prompt tokens prefilled between two decode steps
        (:mod:`sn40l_sim.serving.chunked_prefill`; None: whole prompts).
    prefill_chunk_cycles : callable or None
        With ``prefill_chunk``: ``(earlier, tokens) -> cycles`` of a chunk of ``tokens`` prompt
        tokens after ``earlier`` of the same prompt were prefilled (its attention covers those
        too, so it grows with ``earlier``); required with ``prefill_chunk``. With
        ``prefill_policy_cycles`` it excludes the KV policy's prefill kernels.
    prefill_policy_cycles : callable or None
        With ``prefill_chunk``: ``prompt_len ->`` cycles of the KV policy's prefill kernels over a
        whole prompt (SnapKV's selection, the ring's construction), which a chunked prefill runs
        once, after its last chunk (None: ``prefill_chunk_cycles`` includes them in every chunk).
    decode_switch_cycles : int
        Co-located: configuration loads before the first decode step after a prefill (the decode
        graph's :attr:`~sn40l_sim.engine.phase.PhaseTiming.switch_load_cycles`).
    prefill_switch_cycles : callable
        Co-located: ``rows ->`` configuration loads before a prefill graph of ``rows`` prompt
        tokens (a whole prompt, a chunk of one, or a prefix hit's suffix) after decode steps (none
        by default).
    prefill_chunk_switch_cycles : callable or None
        Co-located, with ``prefill_chunk``: ``(earlier, tokens) ->`` configuration loads before a
        chunk's graph after ``earlier`` tokens of its prompt (> 0), as ``prefill_chunk_cycles``
        times it (None: ``prefill_part_switch_cycles`` of its tokens, the first chunk's graph's).
    prefill_part_switch_cycles : callable or None
        Co-located: the same for a chunk or a prefix hit's suffix where those graphs run without
        the KV policy's prefill kernels (which then select once over the whole prompt); None: as
        ``prefill_switch_cycles``.
    prefix_hit_switch_cycles : callable or None
        Co-located, with ``prefix_caching``: ``(reused, rows) ->`` configuration loads before a
        prefix hit's suffix graph of ``rows`` after ``reused`` cached tokens, read at the points
        ``prefix_hit_cycles`` times it (:func:`~sn40l_sim.serving.prefix_cache.suffix_cycles`;
        None: ``prefill_part_switch_cycles`` of its rows, the graph's at no cached tokens).
    prefill_pair_switch_cycles : callable or None
        Co-located: ``(before, run) ->`` configuration loads before prefill ``run`` (a
        :class:`PrefillRun`) right after prefill ``before``, another graph
        (:meth:`~sn40l_sim.serving.prefill_graphs.PrefillGraphs.pair_switch`; None: nothing).
    prefill_hold_tokens : int or None
        Disaggregated: cached tokens (at ``kv_bytes_per_token``, as a socket holds them) a prefill
        node has room for beside the prompt it prefills, shared by the caches waiting for their
        transfer and the prefixes it keeps (None: no limit).
    held_tokens : callable or None
        Disaggregated: ``prompt_len ->`` tokens of that room a prefilled cache waiting for its
        transfer takes: its kept rows and the policy's state sent with them (H2O's scores, ArkVale's
        digests) in tokens' worth of bytes (None: ``cache_tokens(prompt_len, 0)``, no state).
    """

    mode: Literal["disaggregated", "colocated"]
    prefill_nodes: int
    decode_nodes: int
    slots: int
    decode_step_cycles: int
    prefill_cycles: Callable[[int], int]
    transfer_cycles: Callable[[int], int]
    cache_tokens: Callable[[int, int], int]
    kv_bytes_per_token: int
    slot_cache_tokens: int
    speculation: Speculation = field(default_factory=Speculation)
    seed: int = 0
    prefix_caching: PrefixCaching | None = None
    prefix_hit_cycles: Callable[[int, int], tuple[int, int]] | None = None
    prefill_chunk: int | None = None
    prefill_chunk_cycles: Callable[[int, int], int] | None = None
    prefill_policy_cycles: Callable[[int], int] | None = None
    decode_switch_cycles: int = 0
    prefill_switch_cycles: Callable[[int], int] = no_cycles
    prefill_chunk_switch_cycles: Callable[[int, int], int] | None = None
    prefill_part_switch_cycles: Callable[[int], int] | None = None
    prefix_hit_switch_cycles: Callable[[int, int], int] | None = None
    prefill_pair_switch_cycles: Callable[[PrefillRun, PrefillRun], int] | None = None
    prefill_hold_tokens: int | None = None
    held_tokens: Callable[[int], int] | None = None

    def __post_init__(self) -> None:
        if self.prefill_chunk is not None and self.prefill_chunk_cycles is None:
            raise ValueError("prefill_chunk needs prefill_chunk_cycles: what a later chunk costs, its attention "
                             "over the earlier chunks' keys included")
        if self.prefix_caching is not None and self.prefix_hit_cycles is None:
            raise ValueError("prefix_caching needs prefix_hit_cycles: what a prefill costs when its prefix is "
                             "held, the suffix's attention over the prefix's keys included")
        # the prefixes a prefill node keeps share its hold room: kept beyond it, a node held back
        # with no transfer pending would wait for one that never comes (nothing wakes it)
        if self.prefix_caching is not None and self.prefill_hold_tokens is not None:
            capacity = self.prefix_caching.capacity_tokens
            if capacity is None or capacity > self.prefill_hold_tokens:
                raise ValueError(f"prefix_caching.capacity_tokens ({capacity}) must be at most prefill_hold_tokens "
                                 f"({self.prefill_hold_tokens}): the prefixes kept share the hold room")

    @property
    def kv_capacity_bytes(self) -> int:
        """KV bytes reserved for the slots of one decode node."""
        return self.slots * self.slot_cache_tokens * self.kv_bytes_per_token
