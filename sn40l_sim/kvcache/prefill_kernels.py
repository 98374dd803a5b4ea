"""Cost descriptions of the extra prefill kernels of compressing KV policies, per socket shard.

Two fused kernels per layer (SnapStream paper, Table 4 rows "SnapKV compression" and
"ring-buffer construction"):

``snapkv`` (:func:`snapkv_kernel`)
    Scores of the evictable middle ``[sink, L - recent)`` against the last ``window`` queries,
    their softmax probabilities, summed over the window rows (and over the heads sharing a
    selection), a reduction of those per-position scores across the sockets sharing a KV head,
    average pooling along the sequence, top-K, gathers of the K selected rows of every cached
    tensor and their write into the top-K region of the fixed cache (the concatenation
    ``[sink | ring | top-K]``).

``ring_buffer`` (:func:`ring_buffer_kernel`)
    Two gathers per cached tensor (four in all: MLA caches a latent and a RoPE key, GQA keys and
    values) read the two ring-aligned blocks of ``recent`` positions around the prompt's end
    (paper Fig. 4), a per-slot select merges them into the ring, and the sink slice is copied.

Modelling choices (the paper does not publish its kernels):

* **Scores use the per-head keys prefill already holds.** Prefill runs attention in the
  non-absorbed form (docs/reference.md §2): the QKV kernel writes per-head queries and keys (192 wide
  for MLA) to HBM for the MHA kernel, and SnapKV reads the same tensors. The absorbed form
  would read the shared 576-wide latent instead (less traffic) at 3x the FLOPs per score; with
  an observation window of thousands of queries the kernel is compute-bound, so the per-head
  form is the cheaper one.
* **One pass, normalised with the MHA kernel's row statistics.** The softmax of a window row is
  over the whole evictable middle (``W = softmax(Q_obs K_evict^T)``, docs/reference.md §3), so its
  probabilities cannot be formed from a tile of keys alone. The FlashAttention MHA kernel already
  streams every key past every window row (they sit in its last query tile) keeping each row's
  running max and denominator; for those rows it also keeps the denominator over the evictable
  keys alone (a masked second sum of exponentials it computes anyway; not counted there, it is
  about 2% of MHA's SIMD work, which hides under its GEMMs). SnapKV reads that (max, sum) pair,
  FP32, ``window x heads``, and forms ``exp(s - max) / sum`` tile by tile, so scores stream
  through the chip once and never reach HBM. (Without it a window of thousands of rows needs a
  second pass over the keys, or 17 GB of scores per socket at a 4K window and 128K prompt.)
* **Sharding.** Query heads split over the ``tp`` sockets. Sockets sharing a KV head (all ``tp``
  for MLA) all-reduce their partial per-position scores (FP32) and then each gathers and writes
  ``1/row_shards`` of the compressed rows, so the compressed cache is built cooperatively.
  A split that does not follow the KV groups (Llama-3.1's 8 over 12 sockets) puts a group's
  query heads on two sockets, each holding the group's whole cache: they all-reduce its scores
  too (``score_shards``, the busiest socket's KV heads' worth) and each gathers every row of its
  replica. Counts are for the busiest socket (ceilings).
* Byte fields count HBM traffic only: Q_obs, row statistics and keys read, cached rows read
  and written. Cached rows take the model's stored bytes (:mod:`sn40l_sim.models.kv_format`):
  a quantised cache is copied with its scales (a per-channel key group that a selection splits
  would need requantising; not charged), and keys read from a quantised cache for scoring are
  widened first (``dequant_keys``).

Examples
--------
>>> from sn40l_sim.models.spec import ModelSpec
>>> tiny = ModelSpec.model_validate(dict(kind="model", name="tiny", layers=2, hidden=64,
...     dense_ffn=128, vocab=100, weight_dtype="bf16",
...     attention=dict(kind="gqa", heads=4, kv_heads=2, head_dim=16)))
>>> k = snapkv_kernel(tiny, prompt_len=100, tp=1, sink=4, recent=16, topk=8, window=8, pool_kernel=3)
>>> k.kind, [op.name for op in k.operators][:3]
('snapkv', ['scores', 'probs', 'sum_window_heads'])
>>> k.operators[0].flops == 2 * 8 * 80 * 16 * 4   # 2 m n k count: 8 queries, 80 evictable keys
True
>>> r = ring_buffer_kernel(tiny, prompt_len=100, tp=1, sink=4, recent=16)
>>> sum(op.kind == "gather" for op in r.operators if op.name.startswith("gather_ring"))
4
"""
from __future__ import annotations

import math

from sn40l_sim.ir import ACT_BYTES, DTYPE_BYTES, Collective, FusedKernel, Operator
from sn40l_sim.kvcache.sizing import cached_tensors, kv_sharding, query_head_dim
from sn40l_sim.models.kv_format import kv_op_dtype, kv_quantised, kv_stored_bytes
from sn40l_sim.models.spec import ModelSpec

#: per-position SnapKV scores are accumulated and reduced in FP32
SCORE_BYTES = DTYPE_BYTES["fp32"]


def evictable_len(prompt_len: int, sink: int, recent: int) -> int:
    """Positions of the evictable middle ``[sink, prompt_len - recent)``.

    >>> evictable_len(26, 1, 4), evictable_len(3, 1, 4)
    (21, 0)
    """
    return max(prompt_len - sink - recent, 0)


def snapkv_kernel(model: ModelSpec, prompt_len: int, tp: int, *, sink: int, recent: int,
                  topk: int, window: int, pool_kernel: int,
                  copy_kept_window: bool = False) -> FusedKernel | None:
    """The SnapKV compression kernel of one layer, per socket shard under ``tp``.

    Parameters
    ----------
    model : ModelSpec
    prompt_len : int
        ``L``, the prompt length.
    tp : int
        Sockets the layer is tensor-parallel over.
    sink, recent : int
        Positions kept outside the selection: the evictable middle is ``[sink, L - recent)``.
    topk : int
        ``K``, the selection budget (``min(E, K)`` rows are gathered).
    window : int
        Observation window: the last ``min(window, L)`` queries score the middle.
    pool_kernel : int
        Average-pooling kernel along the sequence.
    copy_kept_window : bool
        Also copy the last ``recent`` rows into the compressed cache (plain SnapKV, which has no
        ring-buffer kernel to do it).

    Returns
    -------
    FusedKernel or None
        ``None`` when the middle is empty (nothing to select from).
    """
    evict = evictable_len(prompt_len, sink, recent)
    if evict == 0:
        return None
    obs = min(window, prompt_len)
    shard = kv_sharding(model, tp)
    qh, kvh, rs = shard.query_heads, shard.kv_heads_per_socket, shard.row_shards
    qk_dim = query_head_dim(model)
    # per-head queries of the window and their (max, evictable sum) rows from the MHA kernel
    q_obs_bytes = obs * qh * (qk_dim * ACT_BYTES + 2 * SCORE_BYTES)
    keys, ops = scoring_key_reads(model, qh, kvh, qk_dim, evict, q_obs_bytes, "dequant_keys")
    ops.append(_gemm("scores", obs, evict, qk_dim, qh, **keys))
    score_elems = qh * obs * evict
    ops += [
        # exp(s / sqrt(d) - max) / sum, masked where a window query precedes a middle key
        Operator("probs", "elementwise", elements=score_elems, transcendentals=score_elems,
                 dtype="fp32"),
        # sum over the window rows and over this socket's heads of each KV head
        Operator("sum_window_heads", "reduction", elements=score_elems, dtype="fp32"),
        Operator("avg_pool", "reduction", elements=kvh * evict * pool_kernel, dtype="fp32"),
        Operator("topk", "topk", elements=kvh * evict, dtype="fp32"),
    ]
    rows = math.ceil(min(evict, topk) / rs)
    ops += copy_ops("gather_topk", "topk_rows", model, rows, kvh, gather=True)
    if copy_kept_window:
        ops += copy_ops("gather_window", "window_rows", model, math.ceil(recent / rs), kvh, gather=True)
    collectives: tuple[Collective, ...] = ()
    if shard.score_shards > 1:   # every socket holding query heads of a KV head: also two of an uneven split
        collectives = (Collective("all_reduce", kvh * evict * SCORE_BYTES, shard.score_shards,
                                  name="snapkv_scores"),)
    return FusedKernel(name="snapkv", kind="snapkv", phase="prefill", operators=tuple(ops),
                       collectives=collectives, shards=tp)


def kept_middle_kernel(model: ModelSpec, prompt_len: int, tp: int, *, sink: int, recent: int) -> FusedKernel | None:
    """SnapKV's selection when the evictable middle fits in the top-K slots: every position is
    kept, so nothing is scored and the middle is only copied into the slots (the gathers and the
    write of :func:`snapkv_kernel`, ``1/row_shards`` of the rows on each socket sharing a KV head).
    A prefill graph is compiled for its prompt length, so the scoring that could select nothing is
    not in it. ``None`` when the middle is empty.

    >>> from sn40l_sim.models.spec import ModelSpec
    >>> tiny = ModelSpec.model_validate(dict(kind="model", name="tiny", layers=2, hidden=64,
    ...     dense_ffn=128, vocab=100, weight_dtype="bf16",
    ...     attention=dict(kind="gqa", heads=4, kv_heads=2, head_dim=16)))
    >>> [op.name for op in kept_middle_kernel(tiny, 30, 1, sink=4, recent=16).operators]
    ['gather_middle_keys', 'gather_middle_values', 'write_topk_rows']
    """
    evict = evictable_len(prompt_len, sink, recent)
    if evict == 0:
        return None
    shard = kv_sharding(model, tp)
    ops = copy_ops("gather_middle", "topk_rows", model, math.ceil(evict / shard.row_shards), shard.kv_heads_per_socket,
                   gather=True)
    return FusedKernel(name="snapkv", kind="snapkv", phase="prefill", operators=tuple(ops), shards=tp)


def kept_window_kernel(model: ModelSpec, tp: int, window: int) -> FusedKernel:
    """Plain SnapKV with no top-K slots: the compressed cache is the last ``window`` rows, copied
    (the gathers and the write of :func:`snapkv_kernel`'s ``copy_kept_window``, ``1/row_shards`` of
    the rows on each socket sharing a KV head); nothing is scored, since nothing is selected.

    >>> from sn40l_sim.models.spec import ModelSpec
    >>> tiny = ModelSpec.model_validate(dict(kind="model", name="tiny", layers=2, hidden=64,
    ...     dense_ffn=128, vocab=100, weight_dtype="bf16",
    ...     attention=dict(kind="gqa", heads=4, kv_heads=2, head_dim=16)))
    >>> [op.name for op in kept_window_kernel(tiny, 1, 8).operators]
    ['gather_window_keys', 'gather_window_values', 'write_window_rows']
    """
    shard = kv_sharding(model, tp)
    ops = copy_ops("gather_window", "window_rows", model, math.ceil(window / shard.row_shards), shard.kv_heads_per_socket,
                   gather=True)
    return FusedKernel(name="snapkv", kind="snapkv", phase="prefill", operators=tuple(ops), shards=tp)


def ring_buffer_kernel(model: ModelSpec, prompt_len: int, tp: int, *, sink: int,
                       recent: int) -> FusedKernel | None:
    """The ring-buffer construction kernel of one layer, per socket shard under ``tp``.

    Each of the two gathers per cached tensor reads ``recent`` rows (padding rows beyond the
    prompt included: the prompt buffer is allocated at the static length); the select writes the
    ``recent`` ring rows; the sink slice reads and writes ``sink`` rows. Rows split over the
    ``row_shards`` sockets sharing a KV head.

    Returns
    -------
    FusedKernel or None
        ``None`` for prompts shorter than ``sink + recent``: the cache is then the prompt followed
        by padding, written in place by the QKV kernel.
    """
    if prompt_len < sink + recent:
        return None
    shard = kv_sharding(model, tp)
    kvh, rs = shard.kv_heads_per_socket, shard.row_shards
    ring_rows = math.ceil(recent / rs)
    ops: list[Operator] = []
    for tensor in cached_tensors(model):
        elems = ring_rows * tensor.width * kvh
        for block in ("lo", "hi"):
            ops.append(Operator(f"gather_ring_{block}_{tensor.name}", "gather", elements=elems,
                                kv_read_bytes=kv_stored_bytes(model, elems)))
    local_width = sum(t.width for t in cached_tensors(model)) * kvh
    ops.append(Operator("select_ring", "elementwise", elements=ring_rows * local_width,
                        kv_write_bytes=kv_stored_bytes(model, ring_rows * local_width)))
    if sink > 0:
        ops += copy_ops("sink_slice", "sink_rows", model, math.ceil(sink / rs), kvh, gather=False)
    return FusedKernel(name="ring_buffer", kind="ring_buffer", phase="prefill",
                       operators=tuple(ops), shards=tp)


def scoring_key_reads(model: ModelSpec, query_heads: int, kv_heads: int, qk_dim: int, key_rows: int,
                      q_bytes: int, dequant_name: str,
                      distinct_rows: int | None = None) -> tuple[dict[str, int], list[Operator]]:
    """The bytes a prefill kernel that scores the queries of its socket's ``query_heads`` against
    ``key_rows`` prompt keys per head (of ``qk_dim`` elements; ``kv_heads`` key heads on the socket)
    reads for its first GEMM (its queries' ``q_bytes`` and the keys), and the dequantisation of a
    quantised cache's keys it runs first (named ``dequant_name``). When the keys are streamed more
    than once (tile by tile, as FlashAttention does), ``distinct_rows`` are the keys in memory and
    the other reads of activation keys are re-reads (``act_reread_bytes``: traffic, not resident)."""
    if model.attention.prefill_key_source == "activations":
        # every query head has its own key, materialised by the QKV kernel (MLA)
        reread = query_heads * (key_rows - (key_rows if distinct_rows is None else distinct_rows)) * qk_dim * ACT_BYTES
        return dict(act_in_bytes=q_bytes + query_heads * key_rows * qk_dim * ACT_BYTES, act_reread_bytes=reread), []
    # the keys are the cached ones, one per KV head (GQA)
    key_elems = kv_heads * key_rows * qk_dim
    ops = [Operator(dequant_name, "elementwise", elements=key_elems, dtype=kv_op_dtype(model))] \
        if kv_quantised(model) else []
    return dict(act_in_bytes=q_bytes, kv_read_bytes=kv_stored_bytes(model, key_elems)), ops


def _gemm(name: str, m: int, n: int, k: int, count: int, **bytes_: int) -> Operator:
    return Operator(name, "gemm", flops=2 * m * n * k * count, m=m, n=n, k=k, count=count,
                    **bytes_)


def copy_ops(read_name: str, write_name: str, model: ModelSpec, rows: int, kvh: int, *,
             gather: bool) -> list[Operator]:
    """Read ``rows`` rows of every cached tensor and write them into the fixed cache.

    ``gather=True``: one indexed read per tensor then one write of all of them (top-K rows).
    ``gather=False``: one contiguous read-and-write of all tensors (the sink slice).
    """
    tensors = cached_tensors(model)
    width = sum(t.width for t in tensors) * kvh
    stored = kv_stored_bytes(model, rows * width)
    if not gather:
        return [Operator(read_name, "gather", elements=rows * width, kv_read_bytes=stored, kv_write_bytes=stored)]
    ops = [Operator(f"{read_name}_{t.name}", "gather", elements=rows * t.width * kvh,
                    kv_read_bytes=kv_stored_bytes(model, rows * t.width * kvh)) for t in tensors]
    ops.append(Operator(f"write_{write_name}", "elementwise", elements=rows * width, kv_write_bytes=stored))
    return ops
