"""``map`` reports each kernel as the graph calls it, so its total follows ``run``'s decode step:
kernel looping makes both shorter, and the map's total is a floor of the step within a stated
factor (docs/validation.md, "Reading map's totals")."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from sn40l_sim.commands.cli import main
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.staging import lone_collective_cycles
from sn40l_sim.study.evaluation import LoadedExperiments
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.mapping import build_phase

ROOT = Path(__file__).resolve().parents[2]
#: run's decode step over map's total at most: map leaves out the kernel-call boundaries (a launch
#: and a barrier per call: about an eighth of Llama-3.1-8B's unlooped batch-1 step on 8 sockets,
#: 35 calls), the collectives after a loop's last iteration and contention on the links
BOUNDARIES_FACTOR = 1.25


def _experiment(tmp_path: Path, looping: bool) -> Path:
    """Llama-3.1-8B decode at batch 1 on 8 sockets, tensor-parallel, looping on or off."""
    spec = {
        "kind": "experiment", "name": f"looping_{looping}",
        "hardware": str(ROOT / "hw_configs" / "sn40l_node8.yaml"),
        "model": str(ROOT / "graphs" / "llama3_1_8b.yaml"),
        "parallel": {"prefill": {"tp": 8}, "decode": {"tp": 8}},
        "policies": [{"name": "full", "policy": "full"}],
        "shape": {"prompt_len": 1024, "batch": 1, "max_new_tokens": 1024},
        "workload": {"kind": "fixed", "count": 1, "output_len": 1024},
        "serving": {"batch": 1, "max_new_tokens": 1024},
        "execution": {"kernel_looping": looping},
    }
    path = tmp_path / f"looping_{looping}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _map_total_s(path: Path, capsys) -> float:
    assert main(["map", str(path), "--phase", "decode", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    return float(re.search(r"^total .* cycles = ([\d.]+) us", out, re.M).group(1)) * 1e-6


@pytest.fixture(scope="module")
def steps(tmp_path_factory) -> dict[bool, float]:
    """run's decode step with looping on and off."""
    folder = tmp_path_factory.mktemp("looping")
    loaded = LoadedExperiments()
    return {looping: loaded.records(_experiment(folder, looping), serve=False, reads_prefill=())[0]["decode_step_s"]
            for looping in (True, False)}


def test_looping_does_not_lengthen_the_map_total(tmp_path, capsys, steps):
    on, off = (_map_total_s(_experiment(tmp_path, looping), capsys) for looping in (True, False))
    assert steps[True] < steps[False]
    assert on <= off


@pytest.mark.parametrize("looping", [True, False])
def test_map_total_is_a_floor_of_the_step_within_the_boundaries(tmp_path, capsys, steps, looping):
    total = _map_total_s(_experiment(tmp_path, looping), capsys)
    assert total <= steps[looping] <= BOUNDARIES_FACTOR * total


def _spilled(tmp_path: Path, order: list[str]) -> Path:
    """Llama-3.1-8B decode at batch 256 on 8 sockets, looping off, the tiers filled in ``order``:
    every call followed by its all-reduces of 2 MiB."""
    spec = yaml.safe_load(_experiment(tmp_path, looping=False).read_text())
    spec.update(name=f"in_{order[0]}", shape={"prompt_len": 1024, "batch": 256, "max_new_tokens": 1024},
                workload={"kind": "fixed", "count": 256, "output_len": 1024},
                serving={"batch": 256, "max_new_tokens": 1024}, memory={"order": order})
    path = tmp_path / f"in_{order[0]}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_collectives_staged_through_ddr_take_longer_in_map(tmp_path):
    # the same all-reduces on the same links: a collective writes what it receives to the
    # activations' tier (and, unless overlapped, reads what it sends from it), and DDR (about
    # 80 GB/s a socket) takes longer than the links do, where HBM takes about a quarter of their
    # time on 8 sockets. The decoder's all-reduces run under its GEMMs, so what map prints as waits
    # depends on the stream too: the cycles it is handed for them are compared
    def cycles(order: list[str]) -> int:
        built = build_phase(load_experiment(_spilled(tmp_path, order)), "decode")
        alone = lone_collective_cycles(CollectiveModel.from_node(built.node), built.node, built.memory)
        return sum(alone(c) for k in built.graph.kernels() for c in k.collectives if c.kind == "all_reduce")

    assert cycles(["ddr", "hbm"]) > cycles(["hbm", "ddr"])

def test_map_counts_what_staging_through_ddr_holds_a_prefill_back(tmp_path, capsys):
    # Llama-3.1-8B's 8K prefill with every tier filled in DDR first: its overlapped all-reduces stage
    # through DDR beside the kernels' own streams, and the mapper charges a call what that staging
    # holds its stream back, as the engine shares the tier. map's total stays a floor of run's
    # prefill within the boundaries' factor (307.6 against 307.9 ms); before the mapper counted it
    # the total was 214.7 ms against run's 309.2 (docs/validation.md, "Reading map's totals")
    spec = yaml.safe_load(_experiment(tmp_path, looping=True).read_text())
    spec.update(name="prefill_in_ddr", shape={"prompt_len": 8192, "batch": 1, "max_new_tokens": 1024},
                memory={"order": ["ddr", "hbm"]})
    path = tmp_path / "prefill_in_ddr.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["map", str(path), "--phase", "prefill"]) == 0
    total = float(re.search(r"^total .* cycles = ([\d.]+) us", capsys.readouterr().out, re.M).group(1)) * 1e-6
    prefill = LoadedExperiments().records(path, serve=False)[0]["prefill_s"]
    assert total <= prefill <= BOUNDARIES_FACTOR * total


def test_the_loops_line_says_whether_the_loop_runs(tmp_path, capsys):
    # with looping off the line read "kernel loops (execution.kernel_looping off): L00.decoder ..
    # L31.decoder x32", naming as a loop what the engine runs as 32 calls, each with its own
    # call overhead (the rows' cycles and the step follow the calls)
    lines = {}
    for looping in (True, False):
        assert main(["map", str(_experiment(tmp_path, looping)), "--phase", "decode"]) == 0
        lines[looping] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("kernel loops")]
    assert lines[True] == ["kernel loops (execution.kernel_looping on): L00.decoder .. L31.decoder x32, each run "
                           "as one call with a pipelined loop"]
    assert lines[False] == ["kernel loops: none run (execution.kernel_looping off): L00.decoder .. L31.decoder "
                            "are 32 separate calls"]


def test_the_header_says_srams_column_is_capacity_and_its_bound_ports(tmp_path, capsys):
    # a row bound by sram (PMU port cycles, mapper/allocate.py) showed a low SRAM% (buffers over
    # capacity, mapper/summary.py) with nothing saying the two measure different things
    assert main(["map", str(_experiment(tmp_path, True)), "--phase", "decode"]) == 0
    out = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(out) if line.startswith("kernel ") and "SRAM%" in line)
    assert any("SRAM% is the buffers held over the SRAM of the tiles in use (capacity)" in line
               and "bound by sram waits on its PMUs' read and write ports" in line for line in out[:header])


def _fused_prefill(tmp_path: Path, looping: bool) -> Path:
    """Llama-3.1-8B's 4K prefill on 8 sockets with a template that fuses each layer into one kernel:
    consecutive calls of it, a loop, whose two all-reduces are overlapped and name no operator."""
    template = yaml.safe_load((ROOT / "graphs" / "kernels_llama.yaml").read_text())
    prefill = template["prefill"]
    layer = [prefill["kernels"].pop(k) for k in ("qkv", "attention", "o_proj", "ffn")]
    prefill["kernels"]["layer"] = {"operators": [op for k in layer for op in k["operators"]],
                                   "collectives": [c for k in layer for c in k.get("collectives", [])]}
    prefill["blocks"]["dense_layer"] = ["layer"]
    (tmp_path / "fused.yaml").write_text(yaml.safe_dump(template, sort_keys=False))
    model = (ROOT / "graphs" / "llama3_1_8b.yaml").read_text().replace("kernels: kernels_llama.yaml",
                                                                       "kernels: fused.yaml")
    (tmp_path / "fused_8b.yaml").write_text(model)
    spec = yaml.safe_load(_experiment(tmp_path, looping).read_text())
    spec.update(name=f"fused_{looping}", model=str(tmp_path / "fused_8b.yaml"),
                shape={"prompt_len": 4096, "batch": 1, "max_new_tokens": 1024})
    path = tmp_path / f"fused_{looping}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("looping", [True, False])
def test_a_looped_prefill_layer_waits_for_its_all_reduces_once(tmp_path, capsys, looping):
    # a looped iteration's overlapped all-reduces that name no operator run beside its own stream
    # from its first tile out, and the next iteration waits for their end (the engine's loop). The
    # mapper had the next iteration wait for all of their time after the tiles: map printed
    # 1115.1 us a layer and a total of 36.1 ms against run's 22.3 ms prefill, no floor of it
    path = _fused_prefill(tmp_path, looping)
    assert main(["map", str(path), "--phase", "prefill"]) == 0
    out = capsys.readouterr().out
    total = float(re.search(r"^total .* cycles = ([\d.]+) us", out, re.M).group(1)) * 1e-6
    assert ("L00.layer .. L31.layer x32, each run as one call" in out) == looping
    prefill = LoadedExperiments().records(path, serve=False)[0]["prefill_s"]
    assert total <= prefill <= BOUNDARIES_FACTOR * total


def test_the_header_says_comp_and_tier_columns_are_of_the_whole_socket(capsys):
    # Llama-3.1-8B's 32K prefill maps its output projection on one tile of four: "bound compute" beside
    # "comp% 8.4", with nothing saying the column is over the socket's four tiles' peak, nor that
    # "tiles" and "n_tiles" count different things
    assert main(["map", str(ROOT / "experiments" / "llama8b_node8.yaml"), "--phase", "prefill"]) == 0
    out = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(out) if line.startswith("kernel ") and "comp%" in line)
    note = [line for line in out[:header] if line.startswith("comp%")]
    assert note == ["comp% and HBM% are the call's FLOPs and bytes over the whole socket's peaks (BF16 on every "
                    "tile, each tier's bandwidth), so a row on fewer tiles reads low though bound; tiles are the "
                    "chip's tiles a call runs on, n_tiles the data tiles it streams"]
    # as the note says: a row's comp% is at most its tiles' share of the socket's (four tiles) peak
    rules = [i for i, line in enumerate(out) if line and set(line) == {"-"}]
    rows = [line.split() for line in out[rules[0] + 1:rules[1]]]
    rows = [row if row[1].startswith("x") else row[:1] + [""] + row[1:] for row in rows]   # the count column
    assert all(float(row[5]) <= 100 * int(row[2]) / 4 for row in rows)
    assert any(int(row[2]) == 1 for row in rows)
