"""Every results field, declared once: name, unit, description, plot axis text, printed-table row,
CSV position, and whether the goldens keep it (the types are in :mod:`sn40l_sim.report.registry`).

:func:`sn40l_sim.report.records.build_record` produces the values; ``results.csv`` (:mod:`~sn40l_sim.report.results`),
the table ``run`` prints (:mod:`~sn40l_sim.report.table`), plot axis labels (:mod:`~sn40l_sim.report.plot_csv`), the
goldens (:mod:`~sn40l_sim.study.golden`) and ``docs/results.md`` (:mod:`~sn40l_sim.report.results_doc`) read this
declaration. Adding a field is an entry here and a line in ``build_record``, then ``python
scripts/make_results_doc.py`` (tests fail while either is missing or the page is stale).

Units are those of the record: seconds, bytes, cycles of the socket clock, tokens; ``1`` a fraction or a number.

Examples
--------
>>> RESULTS.design[:4], RESULTS["ttft_s"].unit, RESULTS.axis_label("latency.tpot_s.p99")
(('name', 'model', 'hardware', 'kv_policy'), 's', ('TPOT p99 (s)', 1.0))
"""
from __future__ import annotations

from sn40l_sim.report.digests import DIGEST_FIELDS, PREFILL_HARDWARE_DIGEST
from sn40l_sim.report.input_fields import INPUT_FIELDS
from sn40l_sim.report.multi_model_fields import MULTI_MODEL_FIELD
from sn40l_sim.report.prefill_fields import PREFILL_FIELDS
from sn40l_sim.report.registry import Field, Fields
from sn40l_sim.report.table_rows import Row, TierRows


def _summary(what: str, values: str, count: str, p99_row: Row | None = None, p50_row: Row | None = None,
             p90_row: Row | None = None) -> tuple[Field, ...]:
    """The parts of a latency summary (:func:`sn40l_sim.report.metrics.summary`), in seconds."""
    stats = (("max", "Largest", None), ("mean", "Mean", None), ("p50", "Median", p50_row),
             ("p90", "90th percentile", p90_row))
    return (Field("count", "1", f"Number of {count}.", axis=f"{what} count"),
            *(Field(stat, "s", f"{text} of the {values}.", axis=f"{what} {stat}", table=row)
              for stat, text, row in stats),
            Field("p99", "s", f"99th percentile of the {values}.", axis=f"{what} p99", table=p99_row))


RESULTS = Fields([
    # what was simulated
    Field("experiment", "", "The experiment's name.", axis="experiment"),
    Field("name", "", "The point's name: the policy entry's name (in a sweep, with the sweep point's name).",
          csv=1, design=True, axis="point"),
    Field("model", "", "The model's name.", csv=2, design=True, axis="model"),
    Field("hardware", "", "The node's name.", csv=3, design=True, axis="hardware"),
    *DIGEST_FIELDS,
    Field("prefill_hardware", "", "The prefill nodes' name when they are other hardware than the decode nodes "
          "(the experiment's prefill_hardware; hardware is then the decode nodes').", axis="prefill hardware",
          group="prefill_hardware", table=Row(15, "prefill hardware")),
    PREFILL_HARDWARE_DIGEST,
    Field("kv_policy", "", "The KV-cache policy (full, snapstream, ...).", csv=4, design=True, axis="KV policy",
          table=Row(10, "KV policy")),
    Field("kv_policy_params", "tokens", "The policy's parameters as the experiment gives them: token counts "
          "(budget, sink, recent, ...), but for ArkVale's pages (a count of pages), recall_fraction (a fraction) "
          "and tier (a memory tier's name).", keys=("param",), axis="KV policy {param}",
          key_units=(("pages", "pages"), ("recall_fraction", "1"), ("tier", ""))),
    Field("prefill_len", "tokens", "Prompt length of the point's requests (shape.prompt_len); with a trace "
          "workload, whose requests bring their own, the longest prompt the point can serve: its prefill graph's "
          "length, not the trace's longest (a longer prompt is capped to it with workload.cap_lengths, refused "
          "without).", csv=5, design=True,
          axis="prompt length", table=Row(20, "prompt (tokens)")),
    Field("prefill_len_compiled", "tokens", "The compiled prefill length the prompt runs at.",
          axis="compiled prefill length"),
    Field("kv_len", "tokens", "Decode KV-cache length per sequence: the static cache the decode step is simulated "
          "at (for full, the rows of the prompt, of the max_new_tokens - 1 tokens fed back and, under speculative decoding, "
          "of the last step's drafts: 131,072 + 2,047 + 2, at most the model's maximum context; the policy's budget for a compressing policy).", csv=6, design=True,
          golden=True, axis="KV cache per sequence", table=Row(30, "KV cache per sequence (tokens)")),
    Field("max_new_tokens", "tokens", "Most tokens a request generates.", axis="max new tokens"),
    Field("batch", "sequences", "Decode batch the point is simulated at (sequences per decode node).", csv=7,
          design=True, golden=True, axis="decode batch (sequences per node)", table=Row(50, "batch")),
    Field("max_batch", "sequences", "Largest compiled decode batch whose weights, KV and activations fit in a "
          "decode node's memory (0 when none of serving.batch_sizes does and an explicit serving.batch runs).", csv=8, design=True, golden=True,
          axis="largest decode batch that fits (sequences)", table=Row(40, "max batch")),
    Field("max_batch_limit", "", "Why the next compiled batch does not fit (if all fit: the last of serving.batch_sizes "
          "set max_batch, not memory).", axis="batch limit"),
    Field("mode", "", "Serving mode: disaggregated (prefill and decode nodes) or colocated.", axis="serving mode"),
    Field("workload", "", "The served workload as the experiment gives it: its kind, then each setting that differs "
          "from its default (a trace's path and rate_scale, a Poisson rate, ...; a list of requests as its length); "
          "with a rate search, the workload at the rate the record's figures were served at (max_rate_per_s, or the "
          "search's low end); empty for a steps-only evaluation.", axis="workload"),
    Field("prefill_nodes", "nodes", "Prefill nodes (0 when co-located).", axis="prefill nodes"),
    Field("decode_nodes", "nodes", "Decode nodes.", axis="decode nodes"),
    *INPUT_FIELDS,
    Field("sockets", "sockets", "Sockets per decode node (after any override of hardware.sockets).", axis="sockets"),
    Field("parallel", "1", "How each phase splits over a node's sockets: tp, the sockets sharing each weight; "
          "attention_dp, the groups splitting the batch for attention.", keys=("phase", "split"), axis="{phase} {split}"),
    # latency of the served requests
    Field("ttft_s", "s", "Time to first token, mean over the served requests (arrival to the end of its "
          "prefill, queueing included); empty without a workload.", csv=9, design=True, golden=True, axis="TTFT",
          table=Row(100, "TTFT mean (s)", ".3f")),
    Field("tpot_s", "s", "Time per output token, mean over the served requests with more than one token "
          "((last token - first token) / (tokens - 1)).", csv=10, design=True, golden=True, axis="TPOT",
          table=Row(120, "TPOT mean (ms)", ".2f", 1e3)),
    Field("latency", "", "Latency distributions over the served requests. A percentile interpolates linearly "
          "between the two nearest ranks (numpy's default: p90 of n sorted values is at rank 0.9 (n - 1) from 0), "
          "as the SLO percentiles do; a p99 of fewer than 101 values lies between the two largest.", parts=(
        Field("ttft_s", "", "Time to first token of every served request.",
              parts=_summary("TTFT", "times to first token", "requests", Row(110, "TTFT p99 (s)", ".3f"),
                             Row(104, "TTFT p50 (s)", ".3f", shown_with="slo"),
                             Row(107, "TTFT p90 (s)", ".3f", shown_with="slo"))),
        Field("tpot_s", "", "Time per output token of every served request with more than one token.",
              parts=_summary("TPOT", "times per output token", "requests with more than one token",
                             Row(130, "TPOT p99 (ms)", ".2f", 1e3), Row(124, "TPOT p50 (ms)", ".2f", 1e3, "slo"),
                             Row(127, "TPOT p90 (ms)", ".2f", 1e3, "slo"))),
        Field("itl_s", "", "Every gap between consecutive tokens of a request (inter-token latency). Under "
              "speculative decoding a step's accepted drafts come out with its token, gaps of 0 s, so the "
              "median can be 0: TPOT is the per-token figure there.",
              parts=_summary("ITL", "inter-token gaps", "inter-token gaps")),
        Field("e2e_s", "", "End-to-end latency of every served request: arrival to its last token.",
              parts=_summary("end-to-end latency", "end-to-end latencies", "requests")),
        Field("queue_s", "", "Queueing delay of every served request: arrival to the start of its prefill (the "
              "wait for a prefill node; co-located, for a free slot and the node's turn, any configuration loads "
              "of a graph switch included). A prefilled sequence's wait for a decode slot shows in TPOT.",
              parts=_summary("queueing delay", "queueing delays", "requests")),
    )),
    *PREFILL_FIELDS,
    # decode
    Field("decode_step_s", "s", "One step of the static decode graph at the point's batch and kv_len.", csv=11,
          design=True, axis="decode step", table=Row(140, "decode step (ms)", ".2f", 1e3)),
    Field("decode_step_cycles", "cycles", "One decode step, in socket clock cycles.", golden=True, axis="decode step"),
    Field("decode_kernel_cycles", "cycles", "Cycles of one decode step by kernel kind, summed over the graph; each "
          "cycle of the socket counts once (a loop iteration's collectives overlapping the next iteration count "
          "in the next), so the kinds add up to the step less any gaps between kernels.",
          keys=("kernel",), golden=True, axis="decode time in {kernel} kernels"),
    Field("decode_step_breakdown_s", "s", "Where one decode step goes, by cause (weights_streaming, kv_reads, "
          "activations, attention_compute, other_compute, collectives, launch, synchronisation, configuration, "
          "pipeline_fill, idle); the parts add up to decode_step_s.", keys=("cause",), axis="decode step: {cause}"),
    Field("decode_switch_load_s", "s", "Configuration loads a decode step adds when the node ran another graph "
          "just before (a co-located node's prefill or prefill chunk, another model): the loads of its kernels that "
          "stay loaded from one step to the next. Charged by co-located serving, not part of decode_step_s.",
          axis="decode configuration reload after another graph (s)"),
    Field("decode_roofline_s", "s", "The decode step's memory roofline: the bytes its kernels move to and from "
          "each memory tier of a socket (weights, KV, activations) over that tier's peak bandwidth.",
          axis="decode roofline (s)"),
    Field("decode_roofline_fraction", "1", "decode_roofline_s / decode_step_s: how close the step comes to the "
          "peak memory bandwidth (kernel looping reaches over 0.9 for dense models at batch 1, SambaNova arXiv "
          "2410.23668).", axis="fraction of the memory roofline"),
    Field("decode_tokens_per_s", "tokens/s", "Raw decode throughput of a decode node: batch / decode_step_s "
          "(one token per sequence per step, every slot full; the drafts a speculative step accepts are "
          "counted in decode_tokens_per_s_reported).", csv=12, design=True, golden=True,
          axis="decode tokens/s (raw)", table=Row(150, "decode tokens/s (raw)", ".1f")),
    Field("speculative_drafts", "tokens", "Draft tokens each decode step verifies (serving.speculative.drafts; "
          "the MTP module drafts them, one run per draft); 0 is plain decode.",
          axis="speculative drafts per step", table=Row(155, "speculative drafts per step", ".0f")),
    Field("draft_acceptance", "1", "Probability that a draft is accepted when the drafts before it were "
          "(serving.speculative.acceptance; 0 without speculation).", axis="draft acceptance rate"),
    Field("tokens_per_forward", "tokens", "Expected tokens per sequence and decode step: (1 - a^(k+1)) / (1 - a) "
          "for k speculative drafts accepted with probability a each (2.44 at k = 2, a = 0.8); 1 without "
          "speculation.", axis="tokens per decode step (speculative decoding)",
          table=Row(160, "tokens per step (speculative)", ".2f")),
    Field("decode_tokens_per_s_reported", "tokens/s", "decode_tokens_per_s x tokens_per_forward: the decode "
          "throughput with the expected accepted drafts, as papers report throughput with multi-token "
          "prediction.", csv=13, design=True, golden=True,
          axis="decode tokens/s (reported, x tokens per step)",
          table=Row(170, "decode tokens/s (reported)", ".1f")),
    # KV cache
    Field("kv_bytes_per_token", "B", "KV-cache bytes of one token, all layers.",
          axis="KV bytes per token (all layers)"),
    Field("kv_transfer_bytes", "B", "KV cache sent from a prefill node to a decode node per request of prefill_len "
          "tokens, with the KV policy's state that prefill builds for decode (H2O's accumulated scores, "
          "ArkVale's page digests) (0 when co-located; a trace's shorter prompts send less).", golden=True,
          axis="KV transfer per request", table=Row(80, "KV transfer per request (GB)", ".2f", 1e-9)),
    Field("kv_transfer_s", "s", "Time of that transfer.", axis="KV transfer per request",
          table=Row(90, "KV transfer per request (ms)", ".1f", 1e3)),
    # KV policies side by side (opt-in: report: {extra_fields: [kv_policies]})
    Field("policy_entry", "", "The name of the point's policy entry (the point's name without its prompt length "
          "or sweep point), to label points in plots.", axis="policy entry", group="kv_policies"),
    Field("kv_bytes_per_context_token", "B/token", "KV bytes one sequence keeps in the first memory tier (its cache "
          "slots, scales included, and the policy's state such as accumulated scores or page digests; every "
          "layer it caches, the MTP layer's when decode runs it) per token of its context (prompt plus "
          "max_new_tokens).", axis="KV bytes per context token in the first memory tier", group="kv_policies"),
    Field("kv_offload_bytes_per_context_token", "B/token", "The same for a store the policy keeps in another tier "
          "(the whole cache of DDR offload with recall); 0 without one.",
          axis="KV store bytes per context token", group="kv_policies"),
    Field("kv_retained_token_fraction", "1", "Tokens a sequence's cache still holds at the end of a context of "
          "prompt plus max_new_tokens, over those tokens (1 for full and for a policy that keeps every token in "
          "a store).", axis="tokens retained (fraction)", group="kv_policies"),
    Field("kv_attended_token_fraction", "1", "Tokens one decode step attends over (the static slot) at the end "
          "of that context, over the context (at most 1).", axis="tokens attended per step (fraction)",
          group="kv_policies"),
    Field("kv_bit_fraction", "1", "Bits stored per cached element (scales and mixed precision included) over "
          "BF16's 16.", axis="bits per cached element (fraction of BF16)", group="kv_policies"),
    Field("kv_layer_fraction", "1", "Layers' worth of cache over layers (below 1 when adjacent layers share a "
          "cache, CLA; the MTP layer decode runs counted in both, as in kv_bytes_per_token).", axis="cached layers (fraction)", group="kv_policies"),
    Field("decode_tier_bytes", "B", "Bytes one decode step moves to and from each memory tier of the simulated "
          "socket, summed over its placed kernels (a DDR store's recalled pages are the DDR entry).",
          keys=("tier",), axis="decode step traffic, {TIER}", group="kv_policies"),
    # memory
    Field("memory", "B", "Bytes per socket of a decode node by memory tier and use (weights, kv, activations, "
          "kv_offload: the store a KV policy keeps in another tier, ArkVale's, and what the runtime reserves), "
          "with the tier's free bytes and physical capacity.", keys=("tier", "use"),
          csv=14, design=True, axis="{TIER} per socket: {use}", table=TierRows(220)),
    # shown too: a long prompt's activations and cache are on the prefill node, which the rows above
    # (the decode node's) did not show, "DDR/socket used 0.00" beside a 1M-token prompt's 30 GB there;
    # its reserved bytes too, so that its rows add up to its capacity (a prefill_hardware may reserve
    # other than the decode node)
    Field("memory_prefill_node", "B", "The same for a prefill node holding one prompt: its kv is the prompt's cache "
          "and, for a compressing policy (SnapStream), the compressed cache gathered from it for the transfer, "
          "with the policy's state that transfer sends (H2O's accumulated scores, ArkVale's page digests); "
          "empty when prefill is co-located.",
          keys=("tier", "use"), axis="{TIER} per socket, prefill node: {use}",
          table=TierRows(221, label="prefill node {TIER}/socket {use} (GiB)")),
    # the served run
    Field("throughput", "", "Rates of the served run (first arrival to last token, idle time between requests "
          "included); empty without a workload.", parts=(
              Field("makespan_s", "s", "First arrival to the last token (with several models on one node, the "
                    "node's: any model's first arrival to its last token).", axis="served run makespan"),
              Field("requests", "requests", "Requests served.", axis="requests served",
                    table=Row(180, "requests served")),
              Field("output_tokens", "tokens", "Output tokens generated: each request's first (prefill's) "
                    "included and, under speculative decoding, the drafts accepted, not those rejected.",
                    axis="output tokens served"),
              Field("requests_per_s", "requests/s", "Requests per second of the run.", axis="served requests/s",
                    table=Row(200, "served requests/s", ".4f")),
              Field("output_tokens_per_s", "tokens/s", "Output tokens per second of the run.",
                    axis="served output tokens/s", table=Row(190, "served output tokens/s", ".1f")),
              Field("decode_steps", "steps", "Decode steps run, all decode nodes.", axis="decode steps"),
              Field("decode_tokens_per_s_observed", "tokens/s", "Decode tokens per second of decode-step "
                    "time of one decode node, with the slots actually filled: the tokens the steps gave, drafts "
                    "accepted under speculative decoding included (all nodes' tokens over all nodes' step "
                    "time); empty when no decode step ran (every output one token).", axis="decode tokens/s observed per decode node"),
              Field("mean_active_slots", "sequences", "Mean filled decode slots per step; empty when no decode step ran.",
                    axis="mean active decode slots"),
          )),
    # service-level objectives (produced when the experiment states them: its slo: section)
    Field("slo", "", "The experiment's SLOs against the served run (sn40l_sim/report/slo.py); a part of an SLO "
          "the experiment does not state is empty.", group="slo", parts=(
              Field("ttft_max_s", "s", "The TTFT bound the SLO states.", axis="TTFT SLO bound"),
              Field("ttft_percentile", "1", "The percentile of TTFT the SLO bounds (90: p90).",
                    axis="TTFT SLO percentile"),
              Field("ttft_at_percentile_s", "s", "The served TTFT at that percentile (interpolated as latency's "
                    "percentiles are).", axis="TTFT at the SLO percentile"),
              Field("ttft_attainment", "1", "Fraction of requests whose TTFT is within the bound.",
                    axis="TTFT SLO attainment (fraction of requests)"),
              Field("tpot_max_s", "s", "The TPOT bound the SLO states.", axis="TPOT SLO bound"),
              Field("tpot_percentile", "1", "The percentile of TPOT the SLO bounds.", axis="TPOT SLO percentile"),
              Field("tpot_at_percentile_s", "s", "The served TPOT at that percentile (requests with more than one "
                    "token).", axis="TPOT at the SLO percentile"),
              Field("tpot_attainment", "1", "Fraction of requests whose TPOT is within the bound (a request of one "
                    "token meets it).", axis="TPOT SLO attainment (fraction of requests)"),
              Field("attainment", "1", "Fraction of requests that met every SLO (TTFT and TPOT each within its "
                    "bound).", axis="SLO attainment (fraction of requests)",
                    table=Row(203, "SLO attainment (% of requests)", ".1f", 100)),
              Field("holds", "", "Whether every SLO holds: each stated percentile within its bound.",
                    axis="SLOs hold", table=Row(204, "SLOs hold")),
          )),
    Field("goodput_requests_per_s", "requests/s", "Requests that met every SLO per second of the served run "
          "(first arrival to last token).", axis="goodput", group="slo",
          table=Row(201, "goodput requests/s (met every SLO)", ".4f")),
    Field("goodput_tokens_per_s", "tokens/s", "Output tokens of the requests that met every SLO per second of the "
          "served run.", axis="goodput tokens/s", group="slo", table=Row(202, "goodput output tokens/s", ".1f")),
    # the highest rate under the SLOs (produced by an experiment's rate_search: section; the record's
    # served figures are those of the probe at that rate)
    Field("rate_search", "", "The search's settings (low_per_s, high_per_s, probes, tolerance), each as the "
          "rate_search section gives it or its default.", group="rate_search"),
    Field("max_rate_per_s", "requests/s", "The highest arrival rate probed at which every SLO held (empty when "
          "even the search's low end fails). The record's served figures (throughput, latencies, slo, goodput, "
          "kv_occupancy) are the run at this rate (at the low end when it is empty), not at the workload's "
          "rate_per_s.", axis="highest rate under the SLOs", group="rate_search",
          table=Row(206, "highest rate under the SLOs (requests/s)", ".3f")),
    Field("max_rate_bracketed", "", "Whether the search's high end failed, so that the answer lies below it "
          "(false: even the high end held; search higher).", axis="rate bracketed", group="rate_search"),
    Field("rate_probes", "", "Every probe of the search, by rate.", group="rate_search", is_list=True, parts=(
        Field("rate_per_s", "requests/s", "The probe's arrival rate.", axis="arrival rate"),
        Field("holds", "", "Whether every SLO held at it, at a rate the decode slots and the prefilling nodes "
              "sustain (at most steady_state_rate_per_s and prefill_rate_per_s: a finite run above them starts "
              "with free slots and idle nodes and may meet the SLOs before its queue has grown)."),
        Field("attainment", "1", "Fraction of its requests that met every SLO.",
              axis="SLO attainment (fraction of requests)"),
        Field("goodput_requests_per_s", "requests/s", "Its goodput.", axis="goodput"),
        Field("ttft_at_percentile_s", "s", "Its TTFT at the SLO's percentile (empty without a TTFT SLO).",
              axis="TTFT at the SLO percentile"),
        Field("tpot_at_percentile_s", "s", "Its TPOT at the SLO's percentile (empty without a TPOT SLO).",
              axis="TPOT at the SLO percentile"),
        Field("steady_state_rate_per_s", "requests/s", "Requests per second the decode slots sustain: every "
              "decode node's slots over the mean time the probe's requests held one (empty when none took "
              "a slot).", axis="sustained rate of the decode slots"),
        Field("prefill_rate_per_s", "requests/s", "Requests per second the nodes that prefill sustain: their "
              "number over the mean time a request's prefill kept one busy (co-located, with its share of "
              "decode steps run with every slot filled; empty when nothing was prefilled).",
              axis="sustained rate of the prefilling nodes"),
    )),
    # a trace's lengths capped to the compiled graphs (produced for a trace workload)
    Field("trace_capped", "", "What capping the trace's lengths to the compiled graphs cut (workload.cap_lengths); "
          "all 0 when nothing was.", group="trace", parts=(
              Field("requests", "requests", "Requests with a prompt or an output capped.",
                    axis="requests capped to the graphs", table=Row(205, "requests capped to the graphs")),
              Field("prompts", "requests", "Prompts capped to the point's prompt length.", axis="prompts capped"),
              Field("outputs", "requests", "Outputs capped to max_new_tokens.", axis="outputs capped"),
              Field("prompt_tokens", "tokens", "Prompt tokens cut.", axis="prompt tokens cut"),
              Field("output_tokens", "tokens", "Output tokens cut.", axis="output tokens cut"),
          )),
    MULTI_MODEL_FIELD,
    # prefix caching (produced with serving.prefix_cache: true)
    Field("prefix_cache", "", "What reusing shared prompt prefixes saved (sn40l_sim/serving/prefix_cache.py); "
          "empty without a workload.", group="prefix_cache", parts=(
              Field("decode_kv_shared", "", "Whether decode nodes store a shared prefix once (false for a "
                    "compressing policy such as SnapStream: a compressed cache cannot be extended as a prefix, "
                    "so only the prefill reuses it)."),
              Field("requests_with_prefix", "requests", "Requests whose prompt starts with a shared prefix.",
                    axis="requests with a shared prefix"),
              Field("hits", "requests", "Of those, the ones whose prefill node held the prefix and that "
                    "reused at least one of its tokens.", axis="prefix cache hits"),
              Field("held_not_reused", "requests", "Of those, the ones whose prefill node held the prefix "
                    "but that reused none of it and prefilled the whole prompt (the rest of the prompt "
                    "needs the prompt's own compiled graph, or is no cheaper in the one it fills).",
                    axis="prefix held but not reused"),
              Field("hit_rate", "1", "hits over requests_with_prefix.", axis="prefix cache hit rate",
                    table=Row(207, "prefix cache hit rate (%)", ".1f", 100)),
              Field("prefill_tokens_saved", "tokens", "Prompt tokens not prefilled again.",
                    axis="prefill tokens saved"),
              Field("prefill_s_saved_mean", "s", "Prefill time the hits skipped, per served request: the TTFT "
                    "gained directly (the queueing it spares others comes on top: compare a run without "
                    "prefix_cache).", axis="prefill time saved per request",
                    table=Row(208, "prefill saved per request (ms)", ".2f", 1e3)),
              Field("kv_bytes_saved_peak", "B", "Most KV bytes a decode node did not hold after a step because "
                    "sequences shared a prefix.", axis="peak KV saved per decode node",
                    table=Row(209, "peak KV saved by sharing (GiB)", ".2f", 1 / 2**30)),
              Field("kv_bytes_saved_mean", "B", "Time-weighted mean of the KV bytes saved over the decode steps.",
                    axis="mean KV saved"),
              Field("prefill_prefix_bytes_peak", "B", "Most KV bytes of cached prefixes a prefill node held "
                    "(uncompressed, whatever the policy).", axis="peak prefix KV held by a prefill node"),
          )),
    # chunked prefill (produced with serving.prefill_chunk)
    Field("chunked_prefill", "", "Prefill split into chunks between decode steps on co-located nodes "
          "(sn40l_sim/serving/chunked_prefill.py); empty without a workload.", group="chunked_prefill", parts=(
              Field("chunk_tokens", "tokens", "Prompt tokens prefilled between two decode steps.",
                    axis="prefill chunk", table=Row(211, "prefill chunk (tokens)")),
              Field("prefill_overhead_fraction", "1", "Prefill cycles the chunks took over those of the same "
                    "prompts prefilled whole on the same node, less 1 (what chunking costs; below 0 where a prompt prefilled whole "
                    "runs a longer compiled graph, padded, than its chunks do, or where its activations would leave the "
                    "first memory tier that a chunk's stay in).", axis="chunking prefill overhead",
                    table=Row(212, "chunking prefill overhead (%)", ".1f", 100)),
          )),
    Field("utilisation", "", "Busy fractions of nodes and hardware resources.", parts=(
        Field("nodes", "1", "Busy fraction of each node (and KV link) by role over the served run, one value per "
              "node; empty without a workload. Roles: prefill (each prefill node), link (each prefill node's KV "
              "link), decode (each decode node's steps); a co-located node's time is split into decode, "
              "colocated_prefill (its prefills) and graph_switch (configurations loaded again between the two "
              "graphs), which add up to the node's busy fraction.", keys=("role",), is_list=True),
        Field("prefill_step", "1", "Busy cycles of each hardware resource in one prefill, as a fraction of its "
              "cycles.", keys=("resource",), axis="prefill busy fraction: {resource}"),
        Field("decode_step", "1", "Busy cycles of each hardware resource in one decode step, as a fraction of its "
              "cycles. Busy means in use, not at full rate: p2p is busy while any collective is on the socket's "
              "links (small messages keep it busy with set-ups and latencies while moving few bytes), a memory "
              "tier while any stream is on it (sn40l_sim/engine/phase.py).", keys=("resource",),
              axis="decode step busy fraction: {resource}"),
    )),
    Field("kv_occupancy", "", "KV cache held by the decode nodes over the served run; empty without a workload.",
          parts=(
              Field("capacity_bytes_per_node", "B", "KV bytes reserved for a decode node's slots: batch x kv_len x "
                    "kv_bytes_per_token; for a policy that keeps every sequence's whole cache in a store in "
                    "another tier (ArkVale), the store's, memory.<tier>.kv_offload of the node, against which "
                    "the bytes held are counted.",
                    axis="KV reserved per decode node"),
              Field("peak_bytes", "B", "Most KV bytes a decode node held after a step (the sequences "
                    "stepping and those whose slot is reserved while their cache arrives).",
                    axis="peak KV per decode node"),
              Field("peak_fraction", "1", "peak_bytes over capacity_bytes_per_node.",
                    axis="peak KV occupancy (fraction of reserved)",
                    table=Row(210, "peak KV occupancy (%)", ".1f", 100)),
              Field("mean_fraction", "1", "Mean occupancy over capacity_bytes_per_node, each step weighted "
                    "by its duration: the mean over the time decode steps ran, not over the makespan (a "
                    "node idle between requests adds nothing; several nodes' steps are pooled).",
                    axis="mean KV occupancy (fraction of reserved)"),
              Field("series", "", "Occupancy after every k-th step (k chosen for at most 100 per node) and "
                    "after the node's peak step and its last: at most 102 per node.", is_list=True, parts=(
                        Field("node", "1", "Decode node index."),
                        Field("t_s", "s", "End of the step."),
                        Field("kv_bytes", "B", "KV bytes the node held."),
                        Field("slots_in_use", "sequences", "Decode slots holding a sequence."),
                    )),
          )),
    # the simulator's own speed
    Field("speed", "", "How fast the simulator ran the point (wall-clock time, so it differs between two runs of "
          "the same inputs): added by the runner to every point it simulates, printed by run and kept in its "
          "status.json, and left out of results.json and results.csv, which stay byte-for-byte reproducible.",
          group="speed", parts=(
              Field("simulated_s", "s", "Simulated seconds of the served run (its makespan); empty without a "
                    "workload.", axis="simulated time"),
              Field("wall_s", "s", "Wall-clock seconds the simulator took for the point: building, mapping and "
                    "timing its steps, and serving its workload.", axis="simulator wall time"),
              Field("ratio", "1", "simulated_s over wall_s: how many times faster than real time the point was "
                    "simulated; empty without a workload. Idle time between arrivals is simulated time that costs "
                    "no work, so a trace with long gaps shows a high ratio.", axis="simulated s per wall s",
                    table=Row(400, "speed (simulated s / wall s)", ".0f")),
          )),
    # the run's own checks
    Field("invariants", "", "The physical invariants checked on this point, all of which held (a violated one stops "
          "the run with exit status 3, naming it): bytes_conserved, requests_served_once, memory_within_capacity, "
          "units_within_peak, utilisation_in_unit_interval, finite_results (sn40l_sim/study/invariants.py says what each "
          "checks).",
          is_list=True),
    # sweeps
    Field("sweep_point", "", "The sweep point's name.", sweep_only=True, axis="sweep point"),
    Field("sweep", "per axis", "Value of each sweep axis at this run (hardware axes in the node's units: bytes, bytes/s, "
          "Hz, counts; an experiment field written with a unit, such as 10 ms, in the field's unit: seconds).", keys=("axis",), path_key=True, sweep_only=True, axis="{axis}"),
])
