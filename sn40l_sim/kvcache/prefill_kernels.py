"""Cost descriptions of the extra prefill kernels of compressing KV policies, per socket shard.

Two fused kernels per layer (SnapStream paper, Table 4 rows "SnapKV compression" and
"ring-buffer construction"):

``snapkv`` (:func:`snapkv_kernel`)
    Scores of the evictable middle ``[sink, L - recent)`` against the last ``window`` queries,
    softmax per query row, sum over the window rows (and over the heads sharing a selection), a
    reduction of those per-position scores across the sockets sharing a KV head, average pooling
    along the sequence, top-K, gathers of the K selected rows of every cached tensor and their
    write into the top-K region of the fixed cache (the concatenation ``[sink | ring | top-K]``).

``ring_buffer`` (:func:`ring_buffer_kernel`)
    Two gathers per cached tensor (four in all: MLA caches a latent and a RoPE key, GQA keys and
    values) read the two ring-aligned blocks of ``recent`` positions around the prompt's end
    (paper Fig. 4), a per-slot select merges them into the ring, and the sink slice is copied.

Modelling choices (the paper does not publish its kernels):

* **MLA scores use the absorbed form.** The observation queries are first multiplied by the
  ``W_UK`` slice of each head (``qk_nope -> kv_lora_rank``), then scored against the cached
  576-wide latent + RoPE key. Each socket so reads the shared latent once, ``E x 576`` elements,
  instead of ``heads/tp x E x 192`` materialised per-head keys (2.7x less traffic at TP16, for
  3x the FLOPs of a kernel that is memory-bound either way). One selection per sequence and
  layer: scores are summed over the window rows and all 128 heads.
* **Sharding.** Query heads split over the ``tp`` sockets. Sockets sharing a KV head (all ``tp``
  for MLA) all-reduce their partial per-position scores (FP32) and then each gathers and writes
  ``1/row_shards`` of the compressed rows, so the compressed cache is built cooperatively.
  Counts are for the busiest socket (ceilings).
* **Scores stay on chip** between the GEMM and the window sum (8 heads x 32 x 127K FP32 is
  ~130 MB at TP16, within a socket's 520 MiB of PMU); a two-pass softmax would double the GEMM.
* Byte fields count HBM traffic only: Q_obs read, ``W_UK`` read, cached rows read and written.

Examples
--------
>>> from sn40l_sim.models.spec import ModelSpec
>>> tiny = ModelSpec.model_validate(dict(kind="model", name="tiny", layers=2, hidden=64,
...     dense_ffn=128, vocab=100, weight_dtype="bf16",
...     attention=dict(kind="gqa", heads=4, kv_heads=2, head_dim=16)))
>>> k = snapkv_kernel(tiny, prompt_len=100, tp=1, sink=4, recent=16, topk=8, window=8, pool_kernel=3)
>>> k.kind, [op.name for op in k.operators][:3]
('snapkv', ['scores', 'scale_mask', 'softmax'])
>>> k.operators[0].flops == 2 * 8 * 80 * 16 * 4   # 2 m n k count: 8 queries, 80 evictable keys
True
>>> r = ring_buffer_kernel(tiny, prompt_len=100, tp=1, sink=4, recent=16)
>>> sum(op.kind == "gather" for op in r.operators if op.name.startswith("gather_ring"))
4
"""
from __future__ import annotations

import math

from sn40l_sim.kvcache.sizing import (DTYPE_BYTES, cached_tensors, kv_dtype_bytes, kv_sharding,
                                      query_head_dim, weight_dtype_bytes)
from sn40l_sim.models.kernels import Collective, FusedKernel, Operator
from sn40l_sim.models.spec import MLAAttentionSpec, ModelSpec

#: per-position SnapKV scores are accumulated and reduced in FP32
SCORE_BYTES = DTYPE_BYTES["fp32"]
#: activations between kernels (the queries the QKV kernel wrote) are BF16
ACT_BYTES = DTYPE_BYTES["bf16"]


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
    qh, kvh, rs = shard.query_heads, shard.kv_heads, shard.row_shards
    kvb = kv_dtype_bytes(model)
    q_obs_bytes = obs * qh * query_head_dim(model) * ACT_BYTES
    att = model.attention
    ops: list[Operator] = []
    if isinstance(att, MLAAttentionSpec):
        width = att.kv_lora_rank + att.qk_rope_head_dim
        ops.append(_gemm("absorb_q", obs, att.kv_lora_rank, att.qk_nope_head_dim, qh,
                         weight_bytes=qh * att.qk_nope_head_dim * att.kv_lora_rank
                         * weight_dtype_bytes(model), act_in_bytes=q_obs_bytes))
        ops.append(_gemm("scores", obs, evict, width, qh, kv_read_bytes=evict * width * kvb))
    else:
        ops.append(_gemm("scores", obs, evict, att.head_dim, qh, act_in_bytes=q_obs_bytes,
                         kv_read_bytes=kvh * evict * att.head_dim * kvb))
    score_elems = qh * obs * evict
    ops += [
        # 1/sqrt(d) and the causal mask (queries of the window may precede some middle keys)
        Operator("scale_mask", "elementwise", elements=score_elems, dtype="fp32"),
        Operator("softmax", "softmax", elements=score_elems, transcendentals=score_elems,
                 dtype="fp32"),
        # sum over the window rows and over this socket's heads of each KV head
        Operator("sum_window_heads", "reduction", elements=score_elems, dtype="fp32"),
        Operator("avg_pool", "reduction", elements=kvh * evict * pool_kernel, dtype="fp32"),
        Operator("topk", "topk", elements=kvh * evict, dtype="fp32"),
    ]
    rows = math.ceil(min(evict, topk) / rs)
    ops += _copy_ops("gather_topk", "topk_rows", model, rows, kvh, kvb, gather=True)
    if copy_kept_window:
        ops += _copy_ops("gather_window", "window_rows", model, math.ceil(recent / rs), kvh,
                         kvb, gather=True)
    collectives: tuple[Collective, ...] = ()
    if rs > 1:
        collectives = (Collective("all_reduce", kvh * evict * SCORE_BYTES, rs,
                                  name="snapkv_scores"),)
    return FusedKernel(name="snapkv", kind="snapkv", phase="prefill", operators=tuple(ops),
                       collectives=collectives, shards=tp)


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
    kvh, rs = shard.kv_heads, shard.row_shards
    kvb = kv_dtype_bytes(model)
    ring_rows = math.ceil(recent / rs)
    ops: list[Operator] = []
    for tensor in cached_tensors(model):
        elems = ring_rows * tensor.width * kvh
        for block in ("lo", "hi"):
            ops.append(Operator(f"gather_ring_{block}_{tensor.name}", "gather", elements=elems,
                                kv_read_bytes=elems * kvb))
    local_width = sum(t.width for t in cached_tensors(model)) * kvh
    ops.append(Operator("select_ring", "elementwise", elements=ring_rows * local_width,
                        kv_write_bytes=ring_rows * local_width * kvb))
    if sink > 0:
        ops += _copy_ops("sink_slice", "sink_rows", model, math.ceil(sink / rs), kvh, kvb,
                         gather=False)
    return FusedKernel(name="ring_buffer", kind="ring_buffer", phase="prefill",
                       operators=tuple(ops), shards=tp)


def _gemm(name: str, m: int, n: int, k: int, count: int, **bytes_: int) -> Operator:
    return Operator(name, "gemm", flops=2 * m * n * k * count, m=m, n=n, k=k, count=count,
                    **bytes_)


def _copy_ops(read_name: str, write_name: str, model: ModelSpec, rows: int, kvh: int,
              kvb: int, *, gather: bool) -> list[Operator]:
    """Read ``rows`` rows of every cached tensor and write them into the fixed cache.

    ``gather=True``: one indexed read per tensor then one write of all of them (top-K rows).
    ``gather=False``: one contiguous read-and-write of all tensors (the sink slice).
    """
    tensors = cached_tensors(model)
    width = sum(t.width for t in tensors) * kvh
    if not gather:
        return [Operator(read_name, "gather", elements=rows * width,
                         kv_read_bytes=rows * width * kvb, kv_write_bytes=rows * width * kvb)]
    ops = [Operator(f"{read_name}_{t.name}", "gather", elements=rows * t.width * kvh,
                    kv_read_bytes=rows * t.width * kvh * kvb) for t in tensors]
    ops.append(Operator(f"write_{write_name}", "elementwise", elements=rows * width,
                        kv_write_bytes=rows * width * kvb))
    return ops
