"""What every operator formula needs: the build context and the operator constructors.

The context turns (model, shape, plan, template, options) into the handful of per-socket counts
the formulas use, so each formula reads like the arithmetic it is:

``queries``
    query rows per sequence: the prompt in prefill; in decode the new token plus the drafts a
    speculative step verifies, ``1 + drafts``.
``earlier``
    prefill: tokens of the prompt already cached before these rows (``Shape.kv_len``: a later chunk
    of a chunked prefill, whose attention covers them too); 0 in decode.
``tokens``
    rows through the tensor-parallel layers, ``batch * queries``; activations in TP layout are
    replicated, so every socket sees all of them.
``seqs``
    sequences whose attention one socket runs: ``ceil(batch / attention_dp)``; their rows are
    ``seqs * queries``.
``fewest_seqs``
    sequences the least loaded socket runs, ``floor(batch / attention_dp)`` (0 when the batch is
    smaller than ``attention_dp``): that socket keeps the fewest of its rows in the switch to the
    data-parallel layout, so it sends the most.
``head_ways``
    how many ways attention heads are split for one sequence: ``tp / attention_dp``.
``proj_heads`` / ``attn_heads``
    query heads a socket holds in the TP layout (``ceil(heads / tp)``) and in the attention layout
    (``ceil(heads / head_ways)``); equal when ``attention_dp = 1``.

Activations are BF16 (2 bytes). FP8 weights are widened to BF16 before the systolic array (the
SN40L PCU has no FP8 datapath: docs/reference.md §1), so each GEMM with FP8 weights comes with an
elementwise ``<name>.dequant`` operator over the weight elements it streams. A cache stored narrower
than BF16 (:mod:`sn40l_sim.models.kv_format`) likewise gives each operator reading it a
``<name>.kv_dequant`` over the elements it reads, and each writing it a ``<name>.kv_quantise``;
formulas give cache traffic in elements (``kv_read_elements``, ``kv_write_elements``) and the
context turns them into stored bytes, scales included.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from sn40l_sim.errors import InputError
from sn40l_sim.ir import ACT_BYTES, DTYPE_BYTES, AttentionShape, Operator, ParallelPlan, Shape
from sn40l_sim.models.kv_format import kv_element_bits, kv_op_dtype, kv_quantised, stored_bytes
from sn40l_sim.models.tensors import ShardRule, Tensor, inventory

if TYPE_CHECKING:
    from fractions import Fraction

    # type-only: the template module imports the formulas, which import this module
    from sn40l_sim.models.spec import ModelSpec
    from sn40l_sim.models.template import KernelTemplates

#: bytes of one activation element (BF16), under the short name the formulas use
ACT = ACT_BYTES
#: bytes of one attention score (FP32, as the softmax takes them). Scores and probabilities are
#: named flows like any activation, so a template that drops the softmax breaks the dataflow
#: (:mod:`sn40l_sim.models.dataflow`); fused with the GEMMs around them they stay on chip and
#: cost no traffic
SCORE = 4

Flow = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Step:
    """An operator plus the named activations it reads and writes, with their bytes.

    The builder uses the names to decide which activations cross a kernel boundary (and so
    count as ``act_in_bytes`` / ``act_out_bytes``) and which stay on chip inside a fused kernel.
    ``rereads`` are further reads of activations in ``reads`` beyond their first full read
    (FlashAttention's K/V tiles, once per query tile): traffic of an input from another kernel
    (``act_in_bytes``, and ``act_reread_bytes`` so that they do not count as resident memory).
    """

    op: Operator
    reads: Flow = ()
    writes: Flow = ()
    notes: tuple[tuple[str, float], ...] = ()
    rereads: Flow = ()


@dataclass(frozen=True)
class Ctx:
    """Everything a formula may read. Derived counts are per socket."""

    model: ModelSpec
    shape: Shape
    plan: ParallelPlan
    template: KernelTemplates
    expert_loading: str = "touched"
    routing_skew: float = 0.0
    #: prefill attention computes its FlashAttention edge tiles padded to whole tiles
    #: (:func:`~sn40l_sim.models.flash.padded_tile_pairs`; the builder's second version of the kernel)
    flash_padded: bool = False

    @property
    def phase(self) -> str:
        """``prefill`` or ``decode``, as the shape says."""
        return self.shape.phase

    @property
    def tp(self) -> int:
        """Sockets the tensor-parallel layers split over."""
        return self.plan.tp

    @property
    def dp(self) -> int:
        """Attention data-parallel groups (``attention_dp``)."""
        return self.plan.attention_dp

    @property
    def queries(self) -> int:
        """Query rows per sequence: the prompt (prefill), ``1 + drafts`` (decode)."""
        if self.phase == "prefill":
            return self.shape.prompt_len
        return 1 + self.shape.drafts

    @property
    def earlier(self) -> int:
        """Prefill: tokens of the prompt cached before these rows (module docstring); 0 in decode."""
        return self.shape.kv_len if self.phase == "prefill" else 0

    @property
    def tokens(self) -> int:
        """Rows through the tensor-parallel layers (module docstring)."""
        return self.shape.batch * self.queries

    @property
    def out_rows(self) -> int:
        """Rows that reach the LM head: the last token of each sequence in prefill; every query
        row in decode (a verify step needs the logits of each draft position and of the one after)."""
        if self.phase == "prefill":
            return self.shape.batch
        return self.tokens

    @property
    def seqs(self) -> int:
        """Sequences whose attention one socket runs (module docstring)."""
        return -(-self.shape.batch // self.dp)

    @property
    def fewest_seqs(self) -> int:
        """Sequences the least loaded socket runs (module docstring)."""
        return self.shape.batch // self.dp

    @property
    def head_ways(self) -> int:
        """Ways one sequence's attention heads are split (module docstring)."""
        return self.tp // self.dp

    @property
    def proj_heads(self) -> int:
        """Query heads a socket holds in the tensor-parallel layout (module docstring)."""
        return -(-self.model.attention.heads // self.tp)

    @property
    def attn_heads(self) -> int:
        """Query heads a socket holds in the attention layout (module docstring)."""
        return -(-self.model.attention.heads // self.head_ways)

    @property
    def kv_bytes(self) -> int:
        """Bytes of one cached element, for the datatypes a whole number of bytes wide and without
        scales (a formula giving ``kv_read_elements`` / ``kv_write_elements`` instead is charged
        the scales and the conversions of a quantised cache)."""
        if self.model.kv_dtype not in DTYPE_BYTES:
            raise InputError(f"kv_dtype {self.model.kv_dtype} is not a whole number of bytes: the formula "
                             "must give its cache traffic in elements (kv_read_elements, kv_write_elements)")
        return DTYPE_BYTES[self.model.kv_dtype]

    def kv_stored(self, elements: int) -> int:
        """Bytes of ``elements`` cached elements as stored (scales included)."""
        return stored_bytes(elements, self.kv_bits)

    @cached_property
    def kv_bits(self) -> Fraction:
        """:func:`~sn40l_sim.models.kv_format.kv_element_bits` of the model, worked out once."""
        return kv_element_bits(self.model)

    def _kv_convert(self, name: str, elements: int) -> list[Step]:
        """The elementwise pass widening (``kv_dequant``) or narrowing (``kv_quantise``) cached
        elements, when the cache is quantised."""
        if not elements or not kv_quantised(self.model):
            return []
        return [Step(Operator(name=name, kind="elementwise", elements=elements, dtype=kv_op_dtype(self.model)))]

    @cached_property
    def tensors(self) -> dict[str, Tensor]:
        """The model's weight tensors by name (:func:`~sn40l_sim.models.tensors.inventory`)."""
        return {t.name: t for t in inventory(self.model)}

    def rule(self, tensor: str) -> ShardRule:
        """How the template splits ``tensor`` over the tensor-parallel sockets."""
        return self.template.sharding[tensor]

    def dims(self, tensor: str) -> tuple[int, int]:
        """``(rows, cols)`` of one copy of ``tensor`` on one socket: the GEMM's K and N."""
        return self.tensors[tensor].shard_dims(self.rule(tensor), self.tp)

    def weight_bytes(self, tensor: str) -> int:
        """Bytes of all copies of ``tensor`` one socket holds (FP8 scales included)."""
        return self.tensors[tensor].shard_bytes(self.model, self.rule(tensor), self.tp)

    def weight_elements(self, tensor: str) -> int:
        """Elements of all copies of ``tensor`` one socket holds."""
        return self.tensors[tensor].shard_elements(self.rule(tensor), self.tp)

    def fp8(self, tensor: str) -> bool:
        """Whether ``tensor`` is stored in FP8 (so its GEMM widens it first: module docstring)."""
        return self.tensors[tensor].is_fp8(self.model)

    def gemm(self, name: str, m: int, tensor: str | None = None, *, n: int = 0, k: int = 0,
             count: int = 1, share: tuple[int, int] = (1, 1), reads: Flow = (), writes: Flow = (),
             rereads: Flow = (), kv_read_elements: int = 0, kv_read: int = 0, kv_write: int = 0,
             attention: AttentionShape | None = None) -> list[Step]:
        """A GEMM ``[m, k] @ [k, n]`` (``count`` of them), weights from ``tensor``'s shard.

        ``n`` and ``k`` default to the shard's columns and rows. ``share = (num, den)`` takes that
        fraction of the tensor's bytes, for GEMMs that use part of a tensor (the K and V halves of
        DeepSeek's ``kv_b``, the experts a step actually loads). The FLOPs are exactly
        ``2 * m * n * k * count``. ``kv_read_elements`` cached elements are streamed as operand B
        (widened first when the cache is quantised); ``kv_read`` / ``kv_write`` add cache bytes as
        given. ``attention`` marks a decode attention's scores GEMM; ``rereads`` are the further reads
        of activations in ``reads`` (:class:`Step`).
        """
        weight = elements = 0
        if tensor is not None:
            rows, cols = self.dims(tensor)
            k, n = (k or rows), (n or cols)
            weight = self.weight_bytes(tensor) * share[0] // share[1]
            elements = self.weight_elements(tensor) * share[0] // share[1]
        steps = []
        if tensor is not None and self.fp8(tensor):
            steps.append(Step(Operator(name=f"{name}.dequant", kind="elementwise", elements=elements,
                                       dtype="fp8")))
        steps += self._kv_convert(f"{name}.kv_dequant", kv_read_elements)
        steps.append(Step(Operator(name=name, kind="gemm", flops=2 * m * n * k * count, m=m, n=n, k=k,
                                   count=count, weight_bytes=weight,
                                   kv_read_bytes=kv_read + self.kv_stored(kv_read_elements),
                                   kv_write_bytes=kv_write, attention=attention), reads, writes,
                          rereads=rereads))
        return steps

    def simd(self, name: str, kind: str, elements: int, *, transcendentals: int = 0,
             weight: str | None = None, weight_bytes: int = 0, reads: Flow = (), writes: Flow = (),
             kv_write_elements: int = 0, kv_read: int = 0, kv_write: int = 0,
             notes: tuple = ()) -> list[Step]:
        """A non-GEMM operator over ``elements`` elements (weights of ``weight`` if it has any),
        writing ``kv_write_elements`` cached elements (narrowed first when the cache is quantised);
        ``kv_read`` / ``kv_write`` add cache bytes as given."""
        weight_bytes = weight_bytes or (self.weight_bytes(weight) if weight else 0)
        return self._kv_convert(f"{name}.kv_quantise", kv_write_elements) + [
            Step(Operator(name=name, kind=kind, elements=elements, transcendentals=transcendentals,
                          weight_bytes=weight_bytes, kv_read_bytes=kv_read,
                          kv_write_bytes=kv_write + self.kv_stored(kv_write_elements)),
                 reads, writes, notes)]
