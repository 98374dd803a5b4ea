"""A faster HBM never makes a step slower (docs/validation.md, "A faster machine is not always
faster in the simulator"): the mapper chooses each kernel's plan by an estimate, and two things the
engine charges were once missing from it.

- **Prefill**: Llama-3.1-8B's output projection and FFN on 8 sockets each end with an 8 MiB
  all-reduce that starts once their first data tile has left the pipeline. When the mapper chose
  their tilings without it, a faster memory stream picked fewer, larger tiles, which delayed the
  all-reduce: the 1K prefill took 24.50, 25.04 and 25.08 ms at 200, 409.6 and 800 GB/s per HBM
  module.
- **Looped decode**: the decoder at batch 64 with 33K-token caches streams 1.1 GB per layer, four
  times what half the SRAM can read ahead. When the mapper scored the loop as if the whole stream
  could load while the iteration waits for the previous one's all-reduce, faster HBM picked a coarse
  tiling whose fill then followed the gate: the step took 17.61, 17.27 and 18.39 ms at 700, 750 and
  800 GB/s.
- **Idle units**: after balancing a looped decoder's stages to its memory stream, the allocator
  gives the idle PCUs to the slowest stages only while their PMUs still serve them in the cycles
  they had. Llama-3.1-8B's decoder on 16 sockets at batch 1 needs many PCUs (its compute follows the
  wait for the previous iteration's all-reduces); with the few PMUs balanced to a quicker stream, a
  split K's partial sums no longer fitted, the PCUs were refused, and the step took 1.146 and
  1.285 ms at 409.6 and 512 GB/s per module (1.048 and 1.222 ms with the configuration loaded at 7
  and 10 GB/s). The allocator now adds the idle PMUs such a stage needs.
- **Kernels kept loaded**: a step's kernels were mapped again within the room the others' first
  mapping left, so a faster configuration load that made Llama-3.1-8B's prefill FFN take all four
  tiles left no room for the others (9.93 ms at 10 GB/s, 11.78 ms at 20 GB/s). The mapper now also
  tries each layer kernel on a tile of its own, which no first mapping can take away.
"""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.engine.run_graph import EngineOptions
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper.residency import resident_calls
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]


def _timers(rates: tuple[str, ...], sockets: int = 8, field: str = "memory.hbm.bytes_per_s_per_unit",
            attention_dp: int = 8):
    """Llama-3.1-8B's step timer on the node of ``sockets`` at each value of the socket's ``field``
    (the HBM rate per module by default), decoding with attention data-parallel over
    ``attention_dp`` sockets."""
    base = load_hardware(ROOT / "hw_configs" / f"sn40l_node{sockets}.yaml")
    model = load_model(ROOT / "graphs" / "llama3_1_8b.yaml")
    for rate in rates:
        node = with_overrides(base, {f"socket.{field}": rate})
        yield step_timer(node, model, make_policy("full", {}), ParallelPlan(sockets),
                         ParallelPlan(sockets, attention_dp), {}, engine=EngineOptions())


def test_prefill_does_not_slow_down_as_hbm_gets_faster():
    cycles = [timer.prefill(1024).cycles for timer in _timers(("200 GB/s", "409.6 GB/s", "800 GB/s"))]
    assert cycles == sorted(cycles, reverse=True), cycles


def test_a_looped_decode_step_does_not_slow_down_as_hbm_gets_faster():
    cycles = [timer.decode_step(64, 33280).cycles for timer in _timers(("700 GB/s", "750 GB/s", "800 GB/s"))]
    assert cycles == sorted(cycles, reverse=True), cycles


def test_a_batch_1_looped_decode_does_not_slow_down_as_hbm_or_the_configuration_load_get_faster():
    # experiments/per_user_speed.yaml's Llama-3.1-8B: TP16, 1K prompt, a 2K cache
    hbm = [timer.decode_step(1, 2048).cycles
           for timer in _timers(("409.6 GB/s", "512 GB/s", "614.4 GB/s"), 16, attention_dp=1)]
    assert hbm == sorted(hbm, reverse=True), hbm
    config = [timer.decode_step(1, 2048).cycles
              for timer in _timers(("7 GB/s", "10 GB/s", "20 GB/s"), 16, "calibrated.config_load_bytes_per_s", 1)]
    assert config == sorted(config, reverse=True), config


def test_a_prefill_of_layer_kernels_on_a_tile_each_does_not_slow_down_as_configurations_load_faster():
    # Llama-3.1-8B's 1K prefill on 16 sockets: once configurations load at 20 GB/s its FFN maps onto
    # all four tiles alone, and mapped again in the room the others left nothing stayed loaded
    # (9.93 ms at 10 GB/s, 11.78 ms at 20); with each layer kernel on a tile of its own it is 9.43 ms
    config = [timer.prefill(1024).cycles
              for timer in _timers(("5 GB/s", "10 GB/s", "20 GB/s"), 16, "calibrated.config_load_bytes_per_s", 1)]
    assert config == sorted(config, reverse=True), config


def test_llama_70b_prefill_keeps_its_four_layer_kernels_loaded_on_a_tile_each():
    base = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")
    model = load_model(ROOT / "graphs" / "llama3_1_70b.yaml")
    timer = step_timer(base, model, make_policy("full", {}), ParallelPlan(16), ParallelPlan(16), {},
                       engine=EngineOptions())
    kernels = timer.placed(Shape("prefill", 1, 1024)).kernels
    layer = [(pk, loaded) for pk, loaded in zip(kernels, resident_calls(base.socket, kernels), strict=True)
             if pk.kernel.layer is not None]
    assert {pk.kernel.name.split(".")[1] for pk, _ in layer} == {"qkv", "attention", "o_proj", "ffn"}
    assert all(sum(1 for p in pk.pcus_per_tile if p) == 1 and loaded for pk, loaded in layer)
