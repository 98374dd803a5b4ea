"""A kernel called at every layer, mapped alone on one tile, is also tried spread over every tile
beside the other layer kernels (sn40l_sim/mapper/side_by_side.py, ``_spread_repeated``).

A lone call chooses its tiles paying its whole configuration; once the step keeps every
configuration loaded it pays none. Mixtral-8x7B's decode on tiles of twice the PCUs and PMUs
(docs/validation.md, "Found by fuzzing valid experiments"): its MoE kernel alone chose one tile of
520 PCUs, and the side-by-side rooms then left it one tile, so the step was longer than on the
shipped tile (34.4 against 31.7 ms by ``map``'s total).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.mapper.residency import resident_calls
from sn40l_sim.study.mapping import build_phase, map_phase

ROOT = Path(__file__).resolve().parents[2]
DOUBLED = {"socket.tile.pcus": 520, "socket.tile.pmus": 520, "socket.tile.grid_cols": 52}


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    path = tmp_path_factory.mktemp("mixtral") / "mixtral.yaml"
    path.write_text(f"""kind: experiment
name: mixtral_doubled_tiles
hardware: {ROOT / 'hw_configs' / 'sn40l_node16.yaml'}
model: {ROOT / 'tests' / 'models' / 'public_models' / 'mixtral_8x7b.yaml'}
parallel:
  prefill: {{tp: 16}}
  decode: {{tp: 16, attention_dp: 16}}
policies:
  - {{name: streaming, policy: streamingllm, params: {{budget: 385}}}}
shape: {{prompt_len: 1024, batch: 4096, max_new_tokens: 4}}
workload: {{kind: fixed, count: 1, output_len: 4}}
serving: {{batch: 4096}}
""")
    placed = {}
    for label, tile in (("shipped", {}), ("doubled", DOUBLED)):
        built = build_phase(path, "decode", hardware_overrides={"socket.clock_hz": 3.2e9, **tile})
        placed[label] = (built.node.socket, map_phase(built))
    return placed


def test_twice_the_units_per_tile_is_not_a_longer_step(mixtral):
    totals = {label: sum(pk.call_cycles for pk in placed.kernels) for label, (_, placed) in mixtral.items()}
    assert totals["doubled"] <= totals["shipped"]


def test_the_moe_kernel_runs_on_every_tile_beside_the_attention_and_both_stay_loaded(mixtral):
    socket, placed = mixtral["doubled"]
    loaded = resident_calls(socket, placed.kernels)
    layers = [(i, pk) for i, pk in enumerate(placed.kernels) if pk.kernel.name.startswith("L")]
    moe = [pk for _, pk in layers if pk.kernel.name.endswith("moe_ffn")]
    assert all(min(pk.pcus_per_tile) > 0 for pk in moe)   # every tile, not one
    # lm_head, called once, takes a tile's PCUs and reloads each step, evicting the first layer's
    # kernels there; every later layer's stay loaded
    assert all(loaded[i] for i, pk in layers if not pk.kernel.name.startswith("L00."))
    for t in range(len(moe[0].pcus_per_tile)):
        assert sum(max(pk.pcus_per_tile[t] for pk in placed.kernels if pk.kernel.name.endswith(part))
                   for part in ("attn_router", "moe_ffn")) <= socket.tile.pcus


# A model found by fuzzing random model files: an MLA decoder whose layer kernel, spread over every
# tile with its configuration free (``_spread_repeated``), found no room when the others were mapped
# again beside it and kept that plan; it was then scored with the context of a call that pays its
# configuration, which took a load it never held off the call: -245,156 cycles a call in map's table.
SMALL_MLA = """kind: model
name: small-mla
layers: 16
dense_layers: 2
hidden: 3072
dense_ffn: 12288
vocab: 32000
attention: {kind: mla, heads: 8, q_lora_rank: null, kv_lora_rank: 256, qk_nope_head_dim: 64,
            qk_rope_head_dim: 64, v_head_dim: 64}
moe: {routed_experts: 64, shared_experts: 1, experts_per_token: 3, expert_ffn: 512, groups: 2, topk_groups: 1}
weight_dtype: fp8
kv_dtype: fp8
kv_quant: {group: 64, zero_point: false}
kernels: %s
"""


def test_a_spread_kernel_kept_beside_the_others_is_scored_with_its_configuration_free(tmp_path):
    model = tmp_path / "small_mla.yaml"
    model.write_text(SMALL_MLA % (ROOT / "tests" / "models" / "public_models" / "kernels_deepseek_no_q_lora.yaml"))
    experiment = tmp_path / "small_mla_decode.yaml"
    experiment.write_text(f"""kind: experiment
name: small_mla_decode
hardware: {ROOT / 'hw_configs' / 'sn40l_node8.yaml'}
model: {model}
parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8}}}}
policies:
  - {{name: full, policy: full}}
shape: {{prompt_len: 4096, batch: 2, max_new_tokens: 32}}
workload: {{kind: fixed, count: batch, output_len: 32}}
serving: {{batch: 2}}
""")
    built = build_phase(experiment, "decode")
    placed = map_phase(built)
    spread = [pk for pk in placed.kernels if pk.kernel.name.endswith(".mla") and min(pk.pcus_per_tile) > 0]
    assert spread   # the case: the layer's attention kernel spread over every tile
    for pk in placed.kernels:
        # a call takes at least its data tiles' time (a looped one's pipelined iteration), whatever
        # configuration it is charged
        tiles = pk.cycles - pk.overhead_cycles
        assert pk.call_cycles >= (min(tiles, pk.iteration_cycles) if pk.iteration_cycles else tiles) > 0, \
            pk.kernel.name


def test_a_short_prefill_does_not_slow_down_as_configurations_load_faster():
    # Llama-3.1-8B's 128-token prefill on 8 sockets (docs/validation.md, "Short prefills on a faster
    # machine"): at 7 GB/s the QKV, attention and output projection's first mappings take 146 + 36 +
    # 96 PCUs of one tile, which stacked on one tile left the FFN no room on every tile; loaded on
    # three tiles they leave it 114 PCUs on each, as 73 + 36 + 48 left it 103 at 5.08 GB/s
    # (open at the fit's fixed point after partial reloads, 3.77196 ms at 5.08 GB/s and 3.79361 at 7,
    # until plans were chosen for their all-reduces' last-tile shares as their calls are charged,
    # sn40l_sim/mapper/shares.py: 3.65871 ms at 7 GB/s, map's total 3,708,381 cycles against 3,889,577)
    from sn40l_sim.study.assemble import assemble
    from sn40l_sim.study.sweep.base import experiment_with_sets

    exp, _ = experiment_with_sets(ROOT / "experiments" / "llama8b_node8.yaml", {"shape.prompt_len": 128})
    prefills, totals = [], []
    for rate in ("5.07819 GB/s", "7 GB/s"):
        overrides = {"socket.calibrated.config_load_bytes_per_s": rate}
        asm = assemble(exp, hardware_overrides=overrides)
        prefills.append(asm.step_timer(asm.setup(asm.points[0])).prefill(128).seconds)
        built = build_phase(exp, "prefill", hardware_overrides=overrides)
        totals.append(sum(pk.call_cycles for pk in map_phase(built).kernels))
    assert prefills[1] <= prefills[0] and totals[1] <= totals[0], (prefills, totals)
    ffn = next(pk for pk in map_phase(built).kernels if pk.kernel.name.endswith("ffn"))
    assert min(ffn.pcus_per_tile) > 0   # on every tile
