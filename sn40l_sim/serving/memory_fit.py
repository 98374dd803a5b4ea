"""Whether a point's memory fits: one prompt's compiled prefill graph on a prefill node, a compiled
decode batch on a decode node, each socket's weights, KV and activations placed in the memory tiers by the caller's placer
(:func:`sn40l_sim.mapper.memory.place_memory` in the experiment's tier order), the uses not in
``may_spill`` held to the first tier (by default weights and KV in HBM, as in the paper's
deployment). :mod:`sn40l_sim.serving.point` asks it for the largest batch that fits; ``map``
places memory the same way (:func:`~sn40l_sim.serving.socket_memory.place_socket`).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.kvcache.base import context_room, slot_new_tokens
from sn40l_sim.kvcache.footprint import KVFootprint, kv_bytes_by_use
from sn40l_sim.kvcache.sizing import (
    kv_bytes_per_socket,
    prefill_key_activation_bytes_per_token,
    prefill_kv_bytes_per_socket,
    prefill_splits_rows,
)
from sn40l_sim.mapper.memory import TiersOverflow
from sn40l_sim.mapper.placement import MemoryPlacement
from sn40l_sim.serving.batching import BatchSearch, choose_batch, compiled_size, find_max_batch
from sn40l_sim.serving.fit_hints import attention_dp_hint, decode_prompt_hint, prefill_prompt_hint
from sn40l_sim.serving.socket_memory import MemoryPlacer, check_weights_fit, in_first_tier, place_socket, spilled_uses
from sn40l_sim.serving.step_costs import StepCosts

if TYPE_CHECKING:
    from sn40l_sim.serving.point import PointSetup


@contextmanager
def located(setup_field: str) -> Iterator[None]:
    """Give an :class:`InputError` raised inside, that names no field, the :class:`PointSetup`
    field it is about (the study layer maps it to the experiment's field and line)."""
    try:
        yield
    except InputError as exc:
        if exc.field is None and exc.file is None:
            exc.field = setup_field
        raise


@dataclass(frozen=True)
class FittedMemory:
    """What a point's memory checks chose: the batch search, the batch run and its placement, and
    a prefill node's placement of one prompt (None co-located)."""

    search: BatchSearch
    batch: int
    placement: Any
    prefill_memory: Any
    #: with ``batch: max`` and KV allowed to spill, when the chosen batch's KV left the first tier:
    #: the largest compiled batch whose KV stays there (None otherwise, or when none does)
    kv_first_tier_batch: int | None = None


def fit_memory(s: PointSetup, memory: MemoryFit) -> FittedMemory:
    """The memory checks ``run`` makes before it times anything, in its order: the weights alone,
    the compiled decode batches (the largest that fits, or the one asked for), one prompt on a
    prefill node. They build the graphs (their activations) but simulate nothing, so ``check``
    makes them too, with the same messages.

    Raises
    ------
    InfeasibleError
        Naming the :class:`PointSetup` field it is about (``model``, ``prefill_plan``,
        ``prompt_len`` or ``batch``).
    """
    # the prompt and the batch are not to blame when the model (or its overrides) does not fit
    check_weights_fit(s, memory.place, memory.prefill_place)
    with located("prompt_len"):
        try:
            search: BatchSearch = find_max_batch(memory.decode_fits, s.batch_sizes)
        except InfeasibleError as exc:
            # a batch given as a number is the compiled batch (batch_sizes bound only ``max``): it
            # runs when it fits though none of batch_sizes does, reported as a largest of 0
            if s.batch != "max" and _fits(memory, int(s.batch)):
                search = BatchSearch(0, None, exc)
            elif _fits(memory, 1):
                # a smaller batch fits this prompt: the batch asked for, or the compiled sizes, are
                # to blame, not the prompt (whose hint would say a 1-token prompt does not fit)
                raise _smaller_batches_fit(s, memory, exc) from None
            else:
                # a refusal says what would fit (docs/robustness.md): here the longest prompt, at
                # the batch that would be compiled (a batch given as a number, not batch_sizes')
                batch = min(s.batch_sizes) if s.batch == "max" else int(s.batch)
                exc = exc if s.batch == "max" else _refusal(memory, batch) or exc
                raise InfeasibleError(f"{exc}{decode_prompt_hint(s, memory, batch)}"
                                      f"{attention_dp_hint(s, memory)}") from None
    with located("batch"):
        batch, placement = choose_batch(s.batch, search, memory.decode_fits)
    prefill_memory = check_prompt_fits(s, memory)
    return FittedMemory(search, batch, placement, prefill_memory, _kv_first_tier_batch(s, memory, batch, placement))


def _smaller_batches_fit(s: PointSetup, memory: MemoryFit, exc: InfeasibleError) -> InfeasibleError:
    """The refusal where no compiled batch size (and no explicit batch) fits but batch 1 does: it
    names ``batch`` or ``batch_sizes`` and the largest decode batch that fits (fitting is monotone
    in the batch, so a bisection below the smallest that does not finds it)."""
    if s.batch != "max":
        failed = int(s.batch)
        exc = _refusal(memory, failed) or exc
    else:
        failed = min(s.batch_sizes)
    fits, fails = 1, failed
    while fails - fits > 1:
        mid = (fits + fails) // 2
        fits, fails = (mid, fails) if _fits(memory, mid) else (fits, mid)
    if s.batch != "max":
        return InfeasibleError(f"a batch of {failed} does not fit (decode batches of 1 to {fits} do; none of "
                               f"serving.batch_sizes does): {exc}", field="batch")
    return InfeasibleError(f"{exc}; decode batches of 1 to {fits} fit: serving.batch_sizes needs a size among them",
                           field="batch_sizes")


def _refusal(memory: MemoryFit, batch: int) -> InfeasibleError | None:
    """Why a decode batch of ``batch`` does not fit the decode node (None when it fits)."""
    try:
        memory.decode_fits(batch)
    except InfeasibleError as why:
        return why
    return None


def _fits(memory: MemoryFit, batch: int) -> bool:
    """Whether a decode batch of ``batch`` fits the decode node."""
    return _refusal(memory, batch) is None


def check_prompt_fits(s: PointSetup, memory: MemoryFit) -> Any:
    """One prompt's placement on a prefill node (None co-located, where the decode batch's check
    holds the prompt), refused with what would fit.

    Raises
    ------
    InfeasibleError
        Naming the :class:`PointSetup` field ``prompt_len``.
    """
    if s.mode != "disaggregated":
        return None
    with located("prompt_len"):
        try:
            return memory.prefill_fits()
        except InfeasibleError as exc:
            raise InfeasibleError(f"{exc}{prefill_prompt_hint(s, memory)}") from None


def _kv_first_tier_batch(s: PointSetup, memory: MemoryFit, batch: int, placement: MemoryPlacement) -> int | None:
    """The largest compiled batch below ``batch`` whose KV stays in the first tier, where ``batch:
    max`` chose one whose KV spilled (``may_spill`` lists it): the largest batch that fits is then
    read from the slower tier at every step, which a planner should hear of (None otherwise)."""
    if s.batch != "max" or "kv" not in s.may_spill or not placement.outside(placement.first_tier).get("kv"):
        return None
    strict = tuple(use for use in s.may_spill if use != "kv")
    smaller = [b for b in s.batch_sizes if b < batch]
    if not smaller:
        return None
    try:
        return find_max_batch(lambda b: in_first_tier(memory.decode_fits(b), strict, f"decode batch {b}"),
                              smaller).max_batch
    except InfeasibleError:
        return None


class MemoryFit:
    """Memory checks of one point: one prompt on a prefill node, a decode batch on a decode node
    (memoised per batch), each placed in the tiers and refused when a use that must stay in the
    first tier would leave it."""

    def __init__(self, s: PointSetup, include_mtp: bool | int, footprint: KVFootprint, place: MemoryPlacer,
                 costs: StepCosts, prefill_place: MemoryPlacer | None = None,
                 prefill_costs: StepCosts | None = None, prefill_len: int | None = None) -> None:
        self.s, self.include_mtp, self.footprint = s, include_mtp, footprint
        # the prefill graph that runs is compiled for this length (>= the prompt): its activations
        # and the cache rows it writes are what a prefill socket must hold, not the prompt's
        self.prefill_len = s.prompt_len if prefill_len is None else prefill_len
        self.static_len = footprint.slots
        self.place, self.costs = place, costs
        # the prefill node's placer and graphs when its hardware differs from the decode node's
        self.prefill_place, self.prefill_costs = prefill_place or place, prefill_costs or costs
        self._cache: dict[int, Any] = {}

    def _kv(self, phase: str, plan: Any, batch: int, cache_len: int) -> int:
        # where a sequence's cache lives and how it rounds: kvcache.sizing, the rule map uses too
        return kv_bytes_per_socket(self.s.model, plan, batch, cache_len, include_mtp=self.include_mtp,
                                   phase=phase)

    def _prefill_activations(self) -> int:
        with located("graph_options"):
            return self.prefill_costs.prefill_activation_bytes(self.prefill_len)

    def _colocated_prefill_activations(self) -> int:
        """Activations a co-located node's prefill holds at once: the whole prompt's graph, or
        with chunked prefill (``prefill_chunk``, serving/chunked_prefill.py) the graph of one
        chunk (compiled for the longest chunk, ``min(prefill_chunk, prompt)``: each chunk runs
        its own length's graph) plus the earlier chunks' keys and values where attention reads
        them from activations rather than the cache (MLA). A prompt's chunk may start as late as
        its last token (the budget spans prompts), so up to ``prompt_len - 1`` earlier tokens'. What
        persists across chunks, the cache written so far, is KV, sized by the caller as the whole
        prompt's."""
        s = self.s
        if s.prefill_chunk is None:
            return self._prefill_activations()
        with located("prefill_lens"):
            chunk_len = compiled_size(min(s.prefill_chunk, s.prompt_len), s.prefill_lens, "prefill chunk")
        with located("graph_options"):
            own = self.prefill_costs.prefill_activation_bytes(chunk_len)
        return own + (s.prompt_len - 1) * prefill_key_activation_bytes_per_token(s.model, s.prefill_plan)

    def prefill_kv(self) -> int:
        """A co-located node's KV of the prompt it prefills, beside its slots (it compresses into one)."""
        return self._kv("prefill", self.s.prefill_plan, 1, self.prefill_len)

    def prefill_node_kv(self, prefill_len: int) -> int:
        """A prefill node's KV for one prompt: its cache, the compressed one and the policy's state
        waiting for the transfer, which sends both (:func:`~sn40l_sim.serving.kv_transfer.sent_bytes`;
        a co-located node compresses into the prompt's slot: :meth:`prefill_kv`)."""
        s = self.s
        # sized for the rows a slot holds after the prompt, as the footprint is (serving.point)
        rows = slot_new_tokens(s.max_new_tokens, s.speculation.drafts, context_room(s.model, s.prompt_len))
        state = s.policy.prefill_state_bytes(s.model, prefill_len, rows)
        return prefill_kv_bytes_per_socket(s.model, s.prefill_plan, 1, prefill_len, s.policy.cache_len(prefill_len, 0),
                                           include_mtp=self.include_mtp, state_bytes=state)

    def prefill_fits(self) -> Any:
        what = "one prompt on a prefill node"
        if self.prefill_len != self.s.prompt_len:
            what += f" (its {self.s.prompt_len} tokens run the prefill graph compiled for {self.prefill_len})"
        return self._in_first_tier(self._placed(self.s.prefill_plan, self.prefill_node_kv(self.prefill_len),
                                                self._prefill_activations(),
                                                what=what, place=self.prefill_place), what)

    def prefill_fits_with(self, prefill_len: int, may_spill: tuple[str, ...]) -> bool:
        """Whether one prompt's prefill graph compiled for ``prefill_len`` fits a prefill socket
        when ``may_spill`` may leave the first tier (for a refusal's hint)."""
        kv = self.prefill_node_kv(prefill_len)
        with located("graph_options"):
            act = self.prefill_costs.prefill_activation_bytes(prefill_len)
        try:
            placement = place_socket(self.prefill_place, may_spill, self.s.prefill_plan, kv, act)
        except TiersOverflow:
            # over every tier with nothing kept out of the first (a socket with no tier to spill to):
            # it does not fit, which the hint says, not a second refusal in place of the first
            return False
        return not spilled_uses(placement, may_spill)

    def decode_fits(self, batch: int) -> Any:
        if batch not in self._cache:
            self._cache[batch] = self.decode_fits_footprint(batch, self.footprint)
        return self._cache[batch]

    def decode_fits_footprint(self, batch: int, footprint: KVFootprint) -> Any:
        """:meth:`decode_fits` of a sequence that keeps ``footprint`` (the point's, or a shorter
        prompt's for a refusal's hint), not memoised."""
        kv, act, store = self._decode_node_uses(batch, footprint)
        what = f"decode batch {batch}"
        return self._in_first_tier(self._placed(self.s.decode_plan, kv, act, store, what=what), what)

    def whole_prompt_placement(self, batch: int, rows: int) -> Any:
        """Where a co-located node that chunks (``prefill_chunk``) at ``batch`` would put the tensors
        of a whole prompt's graph of ``rows`` tokens: the node keeps room for one chunk's
        activations, so those of the whole prompt spill beyond it, as on a node without chunks
        (docs/architecture.md, chunked prefill). For timing the whole prefill only (``prefill_s``,
        the baseline of the chunks' overhead): not held to ``may_spill``; None when no tier has room
        (the caller times it where the node keeps a chunk's)."""
        kv, act, store = self._decode_node_uses(batch, self.footprint)
        with located("graph_options"):
            act = max(act, self.prefill_costs.prefill_activation_bytes(rows))
        try:
            return place_socket(self.place, (*self.s.may_spill, "activations"), self.s.decode_plan, kv, act, store)
        except TiersOverflow:
            return None

    def prefill_placement(self, batch: int, rows: int, earlier: int = 0, *, placement: Any) -> Any:
        """Where a prefill graph of ``rows`` tokens after ``earlier`` streams its tensors from:
        ``placement``, its node's, except on a co-located node that chunks (``prefill_chunk``),
        which keeps room for one chunk's activations: a whole prompt's graph longer than a chunk
        streams its own beyond that room (:meth:`whole_prompt_placement`)."""
        s = self.s
        if s.prefill_chunk is None or s.mode != "colocated" or earlier:
            return placement
        with located("prefill_lens"):
            chunk_rows = compiled_size(min(s.prefill_chunk, s.prompt_len), s.prefill_lens, "prefill chunk")
        return placement if rows <= chunk_rows else self.whole_prompt_placement(batch, rows) or placement

    def _decode_node_uses(self, batch: int, footprint: KVFootprint) -> tuple[int, int, dict[str, int]]:
        """``(kv, activations, store)`` bytes a decode socket holds at ``batch``."""
        s = self.s
        # the cache attention reads and the policy's state, and a store in a tier of its own
        uses = kv_bytes_by_use(s.model, s.decode_plan, batch, footprint, include_mtp=self.include_mtp)
        kv = uses["kv"]
        store = {footprint.store_tier: uses["kv_offload"]} if uses["kv_offload"] else {}
        with located("graph_options"):
            act = self.costs.decode_activation_bytes(batch, footprint.slots, self.s.speculation.drafts)
        if s.mode == "colocated":
            # the node also prefills: the prompt's full cache before compression beside the
            # slots, and the larger of the two phases' activations (a chunk's, with chunked
            # prefill)
            kv += max(0, self.prefill_kv() - self._prefill_in_own_slot(batch))
            act = max(act, self._colocated_prefill_activations())
        return kv, act, store

    def _prefill_in_own_slot(self, batch: int) -> int:
        """Bytes of a co-located prompt's prefill cache that the busiest socket can write into the
        slot the prompt will decode in (compressed there in place), so that they take no room
        beside the slots.

        A prompt is prefilled only into a free slot, and its cache is written across every socket
        of the prefill plan. That slot's rows are on every socket only when one attention group
        spans the node (``attention_dp`` 1); with several groups the slot is in one of them, and a
        socket of another group holds the prompt's rows beside its own slots, all of them in use
        (busiest), unless the batch is that one slot. Nothing is in place either where the prefill
        holds a split of the rows a slot replicates (MLA's latent, written split by tokens).
        """
        s = self.s
        if prefill_splits_rows(s.model, s.prefill_plan) or (s.decode_plan.attention_dp > 1 and batch > 1):
            return 0
        return self._kv("decode", s.decode_plan, 1, self.static_len)

    def _placed(self, plan: Any, kv: int, act: int, store: dict[str, int] | None = None, *, what: str,
                place: MemoryPlacer | None = None) -> Any:
        try:
            return place_socket(place or self.place, self.s.may_spill, plan, kv, act, store)
        except InfeasibleError as exc:
            # over every tier, or a store over its own tier: say which batch or prompt, as a use over
            # the first tier says it (in_first_tier); max_batch_limit read "memory does not fit on a
            # socket" beside the max batch, of the next batch's bytes, and a prefill node's overflow
            # did not say it was one
            raise exc.located_at(file=exc.file, field=exc.field, line=exc.line,
                                 message=f"{what}: {exc.message}") from None

    def _in_first_tier(self, placement: Any, what: str) -> Any:
        return in_first_tier(placement, self.s.may_spill, what)
