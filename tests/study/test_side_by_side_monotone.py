"""A faster machine never lengthens a step whose kernels stay loaded side by side
(docs/validation.md, "Kernels mapped to stay loaded side by side"; sn40l_sim/mapper/side_by_side.py).

The step's kernels are mapped again, each within the units per tile the others leave. Chosen
greedily, the decoder's room was what the other kernels' first mappings (each alone, a lone call
paying its configuration) did not take, and a faster machine could let a kernel called once take
more units alone, or a whole tile:

- Llama-3.1-8B's batch-1 step on 16 sockets with a 1,040-token cache was 0.6968 ms at 450 GB/s per
  HBM module and 0.6971 ms at 512 (``lm_head`` took 33 PCUs a tile instead of 17, the embedding
  109 PMUs instead of 56, and the decoder got 205 PCUs and 138 PMUs instead of 237 and 189);
- ``llama8b_node8``'s SnapStream step was 23.537 ms at 4 GB/s of configuration load and 24.067 ms
  at 5 (``lm_head`` took all 260 PCUs of one tile, so the decoder was never remapped beside it).

In both, ``map``'s own total rose with the step: the search, not the score. The rooms are now also
tried with the kernels called once holding a share of their first mapping's units, and the
placement with the least total is kept.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from sn40l_sim.engine.run_graph import EngineOptions
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper.residency import resident_calls
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import assemble, step_timer
from sn40l_sim.study.evaluation import LoadedExperiments
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.mapping import build_phase, map_phase
from sn40l_sim.study.sweep.base import experiment_with_sets

ROOT = Path(__file__).resolve().parents[2]


def _steps_and_totals(path: Path, policy: str, batch: int | None, field: str, values: tuple[str, ...]):
    """The decode step (s) of ``policy``'s record and ``map``'s total (cycles) of its decode graph at
    ``batch`` sequences, at each value of the socket's ``field``."""
    built = build_phase(load_experiment(path), "decode", policy, batch)
    loaded = LoadedExperiments()
    steps, totals = [], []
    for value in values:
        overrides = {f"socket.{field}": value}
        # only the policy's point is simulated (its record is the one of a run of every point)
        (record,) = loaded.records(path, serve=False, hardware_overrides=overrides, reads_prefill=(), reads=(policy,))
        steps.append(record["decode_step_s"])
        placed = map_phase(replace(built, node=with_overrides(built.node, overrides)))
        totals.append(sum(pk.call_cycles for pk in placed.kernels))
    return steps, totals


def test_a_batch_1_step_on_16_sockets_does_not_slow_down_as_hbm_gets_faster(tmp_path):
    # experiments/per_user_speed.yaml's Llama-3.1-8B with 16 new tokens (scripts/faster_machine.py)
    spec = {"kind": "experiment", "name": "per_user_8b", "hardware": str(ROOT / "hw_configs" / "sn40l_node16.yaml"),
            "model": str(ROOT / "graphs" / "llama3_1_8b.yaml"), "parallel": {"prefill": {"tp": 16}, "decode": {"tp": 16}},
            "policies": [{"name": "full", "policy": "full"}],
            "shape": {"prompt_len": 1024, "batch": 1, "max_new_tokens": 16},
            "workload": {"kind": "fixed", "count": 1, "output_len": 16},
            "serving": {"mode": "disaggregated", "prefill_nodes": 1, "decode_nodes": 1, "batch": 1,
                        "max_new_tokens": 16}}
    path = tmp_path / "per_user_8b.yaml"
    path.write_text(yaml.safe_dump(spec))
    steps, totals = _steps_and_totals(path, "full", None, "memory.hbm.bytes_per_s_per_unit", ("450 GB/s", "512 GB/s"))
    assert steps == sorted(steps, reverse=True) and totals == sorted(totals, reverse=True), (steps, totals)
    # the decoder keeps its 237 PCUs a tile beside lm_head at 512 GB/s, as at 450
    built = build_phase(load_experiment(path), "decode")
    fast = map_phase(replace(built, node=with_overrides(built.node, {"socket.memory.hbm.bytes_per_s_per_unit":
                                                                      "512 GB/s"})))
    decoder = next(pk for pk in fast.kernels if pk.kernel.name.endswith("decoder"))
    assert max(decoder.pcus_per_tile) == 237


def test_a_snapstream_step_does_not_slow_down_as_configurations_load_faster():
    path = ROOT / "experiments" / "llama8b_node8.yaml"
    # the SnapStream point's step: 256 sequences, 8,192 slots of cache each
    steps, totals = _steps_and_totals(path, "snapstream", 256, "calibrated.config_load_bytes_per_s",
                                      ("4 GB/s", "5 GB/s"))
    assert steps == sorted(steps, reverse=True) and totals == sorted(totals, reverse=True), (steps, totals)


def test_a_prefill_whose_layer_kernels_outnumber_the_tiles_stays_loaded_on_faster_links(tmp_path):
    # Llama-3.2-1B's SnapStream prefill on 8 sockets: six layer kernels on four tiles. At 100 GB/s per
    # P2P port the output projection maps alone on 208 PCUs and no longer fits beside SnapKV and the
    # ring buffer; every one-tile kernel's footprint names the first tile, so the rooms of every tile
    # left SnapKV none and every call reloaded (18.04 ms against 11.78 at 50 GB/s). SnapKV is now also
    # offered the room one tile has left, the one-tile kernels packed first fit.
    spec = {"kind": "experiment", "name": "l1b_pack", "hardware": str(ROOT / "hw_configs" / "sn40l_node8.yaml"),
            "model": str(ROOT / "tests" / "models" / "public_models" / "llama3_2_1b.yaml"),
            "parallel": {"prefill": {"tp": 8}, "decode": {"tp": 8}},
            "policies": [{"name": "snap", "policy": "snapstream", "params": {"budget": 512}}],
            "shape": {"prompt_len": 4096, "max_new_tokens": 4},
            "workload": {"kind": "fixed", "count": 1, "output_len": 4}, "serving": {"batch": 1}}
    path = tmp_path / "l1b_pack.yaml"
    path.write_text(yaml.safe_dump(spec))
    built = build_phase(load_experiment(path), "prefill")
    totals = {}
    for rate in ("50 GB/s", "100 GB/s"):
        node = with_overrides(built.node, {"socket.p2p.bytes_per_s_per_port": rate})
        placed = map_phase(replace(built, node=node))
        assert all(resident_calls(node.socket, placed.kernels)), rate
        totals[rate] = sum(pk.call_cycles for pk in placed.kernels)
    # not yet never slower: the output projection keeps its 208 PCUs and the FFN, beside SnapKV on the
    # fourth tile, gets 201 of 260 (11.90 ms against 11.53; docs/validation.md, "A faster machine is not
    # always faster in the simulator")
    assert totals["100 GB/s"] < 1.05 * totals["50 GB/s"], totals


def test_deepseek_touched_experts_step_does_not_fall_from_10_to_11_sequences():
    # DeepSeek-R1's plain 4K decode streaming only the experts the batch touches: alone, paying its
    # configuration, the MoE kernel maps on one tile at 10 sequences (328 us) and on four at 11
    # (343 us); with the step's configurations kept loaded the four-tile one leaves the other kernels
    # room beside it and takes 188 us a call, the one-tile one 272. The step fell from 21.25 ms at 10
    # sequences to 16.49 at 11 before the longest kernel was also tried on every tile.
    node = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")
    model = load_model(ROOT / "graphs" / "deepseek_r1.yaml")
    timer = step_timer(node, model, make_policy("full", {}), ParallelPlan(16), ParallelPlan(16, 16),
                       {"expert_loading": "touched"}, engine=EngineOptions())
    steps = [timer.decode_step(batch, 4096).seconds for batch in (9, 10, 11)]
    assert steps == sorted(steps), steps
    assert steps[1] < 0.8 * 21.25e-3, steps   # the four-tile MoE kernel at 10 sequences too


def test_deepseek_deployment_step_at_8_sequences_is_not_above_9():
    # The main deployment (MTP drafts, every expert streamed) at 8K caches: mapped again beside the
    # others, the three dense-FFN layers' kernel found room for 3 PCUs only and took two sections,
    # 2.0 ms a call against 0.2, and the step was 46.79 ms at 8 sequences against 40.77 at 9. A
    # kernel of two sections reloads a configuration every call whatever room it has, so the
    # side-by-side remapping keeps a kernel's first mapping rather than such a plan
    # (sn40l_sim/mapper/side_by_side.py, docs/validation.md "Kernels mapped to stay loaded side by side").
    asm = assemble(load_experiment(ROOT / "experiments" / "deepseek_tp16.yaml"))
    setup = asm.setup(asm.points[0])
    timer = asm.step_timer(setup)
    steps = {batch: timer.decode_step(batch, 8192, setup.speculation.drafts).seconds for batch in (8, 9)}
    assert steps[8] < 1.01 * steps[9], steps
    placed = timer.placed(Shape("decode", 8, 0, 8192, setup.speculation.drafts, timer.context_len))
    assert all(pk.sections == 1 for pk in placed.kernels if pk.kernel.name.endswith(".ffn")), \
        [(pk.kernel.name, pk.sections) for pk in placed.kernels if pk.sections != 1]


def _at_values(exp, field: str, values: tuple[str, str], seconds) -> list[float]:
    """``seconds(assembled, setup)`` of the experiment's first point with the hardware ``field`` at
    each of ``values``."""
    out = []
    for value in values:
        asm = assemble(exp, hardware_overrides={field: value})
        setup = asm.setup(asm.points[0])
        out.append(seconds(asm, setup))
    return out


def _deepseek_step(batch: int):
    """The main deployment's decode step at ``batch`` sequences with 2K caches, as ``seconds`` of
    :func:`_at_values` takes it."""
    return lambda asm, setup: asm.step_timer(setup).decode_step(batch, 2048, setup.speculation.drafts).seconds


def test_a_short_70b_prefill_does_not_slow_down_with_a_faster_clock():
    # Llama-3.1-70B's 128-token prefill on 8 sockets (docs/validation.md, "Short prefills on a faster
    # machine"): at 2.4 GHz a room beside the others made some layer kernels' calls longer than
    # their first mappings' with their configuration loaded; 18.06 ms at 2 GHz, 25.84 ms at 2.4
    exp, _ = experiment_with_sets(ROOT / "experiments" / "llama8b_node8.yaml",
                                  {"model": str(ROOT / "graphs" / "llama3_1_70b.yaml"), "shape.prompt_len": 128})
    prefills = _at_values(exp, "socket.clock_hz", ("2.0 GHz", "2.4 GHz"), lambda asm, setup: asm.step_timer(setup).prefill(128).seconds)
    assert prefills[1] <= prefills[0], prefills


def test_a_short_8b_prefill_on_16_sockets_does_not_slow_down_with_a_faster_clock():
    # Llama-3.1-8B's 256-token prefill on 16 sockets (docs/validation.md, "Short prefills on a faster
    # machine"): the rooms beside the others were read with every one-tile kernel on the first tile,
    # and at 2.4 GHz the first mappings left the kernels spread over every tile less room: 3.337 ms
    # at 2 GHz, 3.417 ms at 2.4
    exp, _ = experiment_with_sets(ROOT / "experiments" / "llama8b_node8.yaml", {
        "hardware": str(ROOT / "hw_configs" / "sn40l_node16.yaml"), "parallel.prefill.tp": 16,
        "parallel.decode.tp": 16, "shape.prompt_len": 256})
    prefills = _at_values(exp, "socket.clock_hz", ("2.0 GHz", "2.4 GHz"), lambda asm, setup: asm.step_timer(setup).prefill(256).seconds)
    assert prefills[1] <= prefills[0], prefills


def test_deepseek_deployment_step_at_32_sequences_does_not_slow_down_with_a_faster_clock():
    # The main deployment (MTP drafts, every expert streamed) at 32 sequences with 2K caches
    # (docs/validation.md, "Short prefills on a faster machine"): at 2 GHz the placement keeping the
    # MLA in 67 PCUs beside the four-tile MoE FFN also put the dense layers' FFN in the 6 PCUs left,
    # and the lean one gave both rooms back, so the MLA took a whole tile and evicted the FFN at every
    # layer: 47.89 ms at 1.6 GHz, 55.96 ms at 2. Each room is now also given back on its own.
    steps = _at_values(load_experiment(ROOT / "experiments" / "deepseek_tp16.yaml"), "socket.clock_hz",
                       ("1.6 GHz", "2.0 GHz"), _deepseek_step(32))
    assert steps[1] <= steps[0], steps


def test_deepseek_deployment_step_at_16_sequences_does_not_slow_down_with_faster_hbm():
    # The main deployment at 16 sequences with 2K caches (docs/validation.md, "Short prefills on a
    # faster machine"): at 819.2 GB/s per HBM module the MoE FFN's first mapping takes 182 PCUs of
    # every tile and the MTP module's FFN 179, so the MLA found no room beside them and it and the
    # MoE FFN reloaded at every layer: 35.45 ms at 614.4 GB/s, 46.10 at 819.2. The kernels called
    # more than once that their first mappings spread over the tiles, the longest but one, are now
    # also tried on one tile: the MTP's FFN on one leaves the MLA 78 PCUs beside the MoE FFN.
    steps = _at_values(load_experiment(ROOT / "experiments" / "deepseek_tp16.yaml"),
                       "socket.memory.hbm.bytes_per_s_per_unit", ("614.4 GB/s", "819.2 GB/s"), _deepseek_step(16))
    assert steps[1] < steps[0], steps


def test_deepseek_deployment_step_at_16_sequences_does_not_slow_down_with_faster_configuration_loads():
    # The same deployment (docs/validation.md, "Short prefills on a faster machine"): at 10 GB/s of
    # configuration load lm_head's first mapping, a lone call, spreads over the four tiles (65 PCUs
    # a tile; one tile of 128 PCUs at 7 GB/s), and the MoE layers' MLA, mapped beside the four-tile
    # MoE FFN and it, got 100 PCUs instead of 165: 36.90 ms at 7 GB/s, 38.11 at 10. The kernels
    # called once that spread are now gathered on one tile too, with the repeated ones.
    steps = _at_values(load_experiment(ROOT / "experiments" / "deepseek_tp16.yaml"),
                       "socket.calibrated.config_load_bytes_per_s", ("7 GB/s", "10 GB/s"), _deepseek_step(16))
    assert steps[1] <= steps[0], steps


def test_deepseek_deployment_step_at_32_sequences_does_not_slow_down_with_faster_hbm():
    # The main deployment at 32 sequences with 2K caches (docs/validation.md, "Still open after it"):
    # a lone call maps the MoE FFN on one tile or all four, and on all four it took 98 PCUs a tile at
    # 409.6 GB/s per HBM module and 189 at 512, so the MLA beside it got 71 PCUs instead of 162:
    # 39.71 ms at 409.6 GB/s, 41.83 at 512. The longest repeated kernel is now also tried confined to
    # fewer tiles, the others on the tiles it leaves (sn40l_sim/mapper/confined.py).
    steps = _at_values(load_experiment(ROOT / "experiments" / "deepseek_tp16.yaml"),
                       "socket.memory.hbm.bytes_per_s_per_unit", ("409.6 GB/s", "512 GB/s"), _deepseek_step(32))
    assert steps[1] <= steps[0], steps
