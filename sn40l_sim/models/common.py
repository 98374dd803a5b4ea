"""Operator formulas shared by every family: embedding, norms, residuals, output projection,
LM head, sampling and the MTP module's extra layers, plus the common collective sizes.

All counts are per socket (see :mod:`sn40l_sim.models.context`). Modelling choices:

* The embedding is vocab-parallel when sharded ``row`` (each socket holds ``vocab / tp`` rows,
  looks up the tokens that fall in its range, zeros the rest, and an all-reduce of ``[T, hidden]``
  sums the shards, as DeepSeek's ``ParallelEmbedding``); the rows it reads are the expected
  ``ceil(T / tp)`` of uniformly spread token ids.
* RMSNorm costs one element operation per element and one reciprocal square root per row.
* Prefill sends only the last token of each sequence through the final norm and LM head.
* Sampling: each socket picks its best candidates over its vocab slice, an all-gather brings the
  ``tp`` candidates of every row to every socket, and the winner is picked (8 bytes per candidate:
  value and index).
"""
from __future__ import annotations

from sn40l_sim.models.context import ACT, Ctx, Step

#: bytes per token id and per sampling candidate (value + index)
TOKEN_ID = 4
CANDIDATE = 8


def embed_gather(c: Ctx, out: str = "x") -> list[Step]:
    """Look up the embedding rows of the batch's tokens (the socket's vocab slice)."""
    t, h = c.tokens, c.model.hidden
    rows_held, _ = c.dims("embedding")
    rows_read = min(rows_held, -(-t // c.tp) if c.rule("embedding") == "row" else t)
    weight = c.weight_bytes("embedding") * rows_read // rows_held
    return c.simd("embed_gather", "gather", rows_read * h, weight_bytes=weight,
                  reads=(("tokens", t * TOKEN_ID),), writes=((out, t * h * ACT),))


def mtp_embed(c: Ctx) -> list[Step]:
    """The MTP module embeds the token the main model just sampled (shared embedding table)."""
    return embed_gather(c, out="e_mtp")


def _norm(c: Ctx, name: str, tensor: str, rows: int, src: str, dst: str, width: int | None = None) -> list[Step]:
    width = width or c.model.hidden
    return c.simd(name, "elementwise", rows * width, transcendentals=rows, weight=tensor,
                  reads=((src, rows * width * ACT),), writes=((dst, rows * width * ACT),))


def attn_norm(c: Ctx) -> list[Step]:
    """RMSNorm before attention."""
    return _norm(c, "attn_norm", "attn_norm", c.tokens, "x", "xn")


def ffn_norm(c: Ctx) -> list[Step]:
    """RMSNorm before the FFN / MoE."""
    return _norm(c, "ffn_norm", "ffn_norm", c.tokens, "x", "hn")


def attn_residual(c: Ctx) -> list[Step]:
    """x += attention output (after the output projection's all-reduce)."""
    size = c.tokens * c.model.hidden
    return c.simd("attn_residual", "elementwise", size,
                  reads=(("x", size * ACT), ("attn_proj", size * ACT)), writes=(("x", size * ACT),))


def ffn_residual(c: Ctx) -> list[Step]:
    """x += FFN output (after its all-reduce)."""
    size = c.tokens * c.model.hidden
    return c.simd("ffn_residual", "elementwise", size,
                  reads=(("x", size * ACT), ("ffn_out", size * ACT)), writes=(("x", size * ACT),))


def o_proj(c: Ctx) -> list[Step]:
    """Output projection, row-parallel over heads: ``[T, heads/tp * v] @ [heads/tp * v, hidden]``."""
    k, _ = c.dims("o_proj")
    return c.gemm("o_proj", c.tokens, "o_proj", reads=(("attn_o", c.tokens * k * ACT),),
                  writes=(("attn_proj", c.tokens * c.model.hidden * ACT),))


def final_norm(c: Ctx) -> list[Step]:
    """RMSNorm of the last hidden state of each sequence."""
    return _norm(c, "final_norm", "final_norm", c.out_rows, "x", "xf")


def mtp_final_norm(c: Ctx) -> list[Step]:
    """The MTP module's own norm before the shared LM head."""
    return _norm(c, "mtp_final_norm", "mtp_final_norm", c.out_rows, "x", "xf")


def lm_head(c: Ctx) -> list[Step]:
    """Logits over the socket's vocab slice (the embedding, transposed, when tied)."""
    tensor = "lm_head" if "lm_head" in c.tensors else "embedding"
    rows, cols = c.dims(tensor)
    k, n = (rows, cols) if tensor == "lm_head" else (cols, rows)
    return c.gemm("lm_head", c.out_rows, tensor, n=n, k=k,
                  reads=(("xf", c.out_rows * k * ACT),), writes=(("logits", c.out_rows * n * ACT),))


def sample(c: Ctx) -> list[Step]:
    """Top candidates of the local vocab slice, then the pick among the gathered candidates."""
    vocab_slice = c.dims("lm_head")[1] if "lm_head" in c.tensors else c.dims("embedding")[0]
    r = c.out_rows
    return c.simd("sample", "topk", r * vocab_slice + r * c.tp,
                  reads=(("logits", r * vocab_slice * ACT),), writes=(("tokens", r * TOKEN_ID),))


def mtp_norms(c: Ctx) -> list[Step]:
    """RMSNorms of the next token's embedding and of the main model's last hidden state."""
    t = c.tokens
    return (_norm(c, "mtp_enorm", "mtp_enorm", t, "e_mtp", "en")
            + _norm(c, "mtp_hnorm", "mtp_hnorm", t, "x", "hn_mtp"))


def mtp_proj(c: Ctx) -> list[Step]:
    """``[T, 2 hidden] @ [2 hidden, hidden]`` (eh_proj): the MTP block's input."""
    t, h = c.tokens, c.model.hidden
    return c.gemm("mtp_proj", t, "mtp_proj", reads=(("en", t * h * ACT), ("hn_mtp", t * h * ACT)),
                  writes=(("x", t * h * ACT),))


OPERATORS = {f.__name__: f for f in (embed_gather, mtp_embed, attn_norm, ffn_norm, attn_residual,
                                     ffn_residual, o_proj, final_norm, mtp_final_norm, lm_head, sample,
                                     mtp_norms, mtp_proj)}

#: formula (operator or collective size) -> (weight tensor it reads that only some models have, the
#: model part that holds it): a template naming it for a model without it is refused (``models/dataflow.py``)
FORMULA_WEIGHTS = {"mtp_norms": ("mtp_enorm", "an mtp section"), "mtp_proj": ("mtp_proj", "an mtp section"),
                    "mtp_final_norm": ("mtp_final_norm", "an mtp section")}


def hidden(c: Ctx) -> int:
    """``[T, hidden]`` BF16: the all-reduce after a row-parallel GEMM (or the all-gather after a
    column-parallel one)."""
    return c.tokens * c.model.hidden * ACT


def embed_reduce(c: Ctx) -> int:
    """All-reduce summing a vocab-parallel embedding's shards (none when replicated)."""
    return hidden(c) if c.rule("embedding") != "replicated" else 0


def candidates(c: Ctx) -> int:
    """All-gather of every socket's best candidate per row (none with an unsplit vocab)."""
    split = c.rule("lm_head" if "lm_head" in c.tensors else "embedding") != "replicated"
    return c.out_rows * c.tp * CANDIDATE if split and c.tp > 1 else 0


SIZES = {f.__name__: f for f in (hidden, embed_reduce, candidates)}
