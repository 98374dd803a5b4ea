"""Results fields naming inputs that change a point's figures without a row of ``run``'s table
showing them: the KV link, the seed of the requests drawn and the experiment's settings of the
simulation itself. ``compare`` names a change of any of them in a pair's heading
(:data:`~sn40l_sim.report.compare.DESCRIBED`); without them it called two runs of DeepSeek-R1 with
``graph_options.expert_loading`` touched and all "the same model, hardware and policy" above
decode steps that differ.

Examples
--------
>>> [field.name for field in INPUT_FIELDS]
['kv_transfer', 'seed', 'options']
"""
from __future__ import annotations

from sn40l_sim.report.registry import Field

#: declared here, spliced into :data:`~sn40l_sim.report.fields.RESULTS` after ``decode_nodes``
INPUT_FIELDS = (
    Field("kv_transfer", "", "The link carrying the KV cache from a prefill node to a decode node "
          "(serving.kv_transfer: host_link or p2p); empty when co-located.", axis="KV transfer link"),
    Field("seed", "1", "serving.seed: the seed of the Poisson arrivals and lengths, the shared prefixes and the "
          "accepted drafts drawn (two runs of other seeds serve other requests).", axis="seed"),
    Field("options", "", "The experiment's graph_options, execution and memory settings that differ from their "
          "defaults, as section.key=value (expert_loading, kernel_looping, the memory tiers' order, ...); "
          "empty when every one is its default.", axis="simulation options"),
)
