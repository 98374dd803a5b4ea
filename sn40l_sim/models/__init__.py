"""Models: ``graphs/<model>.yaml`` -> a validated spec -> the fused-kernel graph of a prefill pass or
a decode step (docs/architecture.md). The graph's types are in :mod:`sn40l_sim.ir`.

- :mod:`.spec` and :mod:`.loader` -- the model schema and its cross-field checks;
  :mod:`.params`, :mod:`.tensors` and :mod:`.kv_format` -- parameter counts, weight shards and the
  stored bytes of the KV cache.
- :mod:`.template` -- the declarative kernel templates (``graphs/kernels_*.yaml``);
  :mod:`.builder` -- template + formulas -> graph, checked whole by :mod:`.dataflow`,
  :mod:`.reductions` and :mod:`.weight_use`.
- :mod:`.formulas` -- the operator and collective-size formulas a template names: shared ones in
  :mod:`.common`, :mod:`.ffn`, :mod:`.moe` (with :mod:`.routing`), the attention families as
  plug-ins in :mod:`.families` (FlashAttention tiles: :mod:`.flash`), all reading the per-socket
  counts of :mod:`.context`.
"""
