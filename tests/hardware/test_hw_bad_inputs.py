"""Bad hardware files: each gives exit status 2 and one line naming the file, the field and the line.

Every bad file is made in ``tmp_path`` from the shipped ones by one edit, so each case tests one
mistake.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hw_test_helpers import HW, copy_configs, delete_key, set_value

from sn40l_sim.commands import cli
from sn40l_sim.errors import InputError
from sn40l_sim.hardware.grid import MAX_TILES_PER_SOCKET, socket_tiles_error
from sn40l_sim.hardware.loader import load_hardware

SOCKET = (HW / "sn40l.yaml").read_text()


def _edit(key, value, occurrence=0):
    return lambda: set_value(SOCKET, key, value, occurrence)


def _with_line(text):
    return lambda: (text, None)


def _drop_block(key):
    """Set a top-level section to null, dropping its indented lines."""
    lines = SOCKET.splitlines()
    i = next(i for i, t in enumerate(lines) if t.startswith(key + ":"))
    j = i + 1
    while j < len(lines) and lines[j].startswith(" "):
        j += 1
    return "\n".join(lines[:i] + [f"{key}: null"] + lines[j:]) + "\n"


def _add_line(after_key, line):
    """Insert ``line`` just below the first ``after_key:`` line; the line number is the inserted one."""
    def make():
        lines = SOCKET.splitlines()
        i = next(i for i, t in enumerate(lines) if t.lstrip().startswith(after_key + ":"))
        return "\n".join(lines[: i + 1] + [line] + lines[i + 1:]) + "\n", i + 2
    return make


# name -> (make (text, expected line or None), expected field or None, words in the message)
SOCKET_CASES = {
    "yaml_syntax": (lambda: (set_value(SOCKET, "dies", "[2")[0], None), None, "YAML syntax error"),
    "unknown_key": (_add_line("lanes", "  lanez: 32"), "pcu.lanez", "unknown key"),
    "negative_count": (_edit("dies", "-2"), "dies", "positive"),
    "zero_size": (_edit("capacity_bytes", "0 KiB"), "pmu.capacity_bytes", "positive"),
    "wrong_unit": (_edit("bytes_per_s_per_unit", "409.6 GB"), "memory.hbm.bytes_per_s_per_unit", "bandwidth"),
    "wrong_unit_kind": (_edit("clock_hz", "1.6 GB"), "clock_hz", "frequency"),
    # a latency written without its unit is seconds: 120 (ns meant) was simulated as 120 s
    "unitless_latency": (_edit("latency_s", "120"), "memory.hbm.latency_s",
                         "expected a hardware latency from 0 s to 1 ms, got 120 s"),
    # a module's capacity written without its unit is bytes: 16 (GiB meant) was accepted by check,
    # named reserved_bytes as the mistake, or left run to say the model does not fit
    "unitless_memory_capacity": (_edit("capacity_bytes_per_unit", "16"), "memory.hbm.capacity_bytes_per_unit",
                                 "expected a memory unit's capacity from 1 MiB to 1 PiB, got 16 B"),
    "wrong_type": (_edit("lanes", "many"), "pcu.lanes", "integer"),
    "fractional_count": (_edit("tiles_per_die", "2.5"), "tiles_per_die", "integer"),
    "boolean_count": (_edit("dies", "yes"), "dies", "integer"),
    # a socket of 2**31 dies, which the counts' range allowed, ran out of memory in run; one of
    # 2,048 tiles did not finish in two minutes
    "too_many_dies": (_edit("dies", "2147483647"), "dies",
                      "a socket of 2147483647 dies x 2 tiles has 4,294,967,294 tiles; expected at most 256"),
    "too_many_tiles_per_die": (_edit("tiles_per_die", "129"), "tiles_per_die",
                               "a socket of 2 dies x 129 tiles has 258 tiles; expected at most 256"),
    # a PCU past the width and depth the model is checked on (sn40l_sim/hardware/spec.py, PCU_LANES and
    # PCU_STAGES): 2**31 - 1 lanes ran, and Llama-3.1-8B's 4K prefill took 877,288 s
    "too_many_lanes": (_edit("lanes", "2147483647"), "pcu.lanes",
                       "expected a positive PCU lane count from 1 to 4096 (128 x SN40L's 32), got 2147483647"),
    "too_many_stages": (_edit("stages", "4096"), "pcu.stages", "expected a positive PCU stage count from 1 to 1024, got 4096"),
    "missing_field": (lambda: (delete_key(SOCKET, "clock_hz"), None), "clock_hz", "required field is missing"),
    "missing_bf16_rate": (lambda: (delete_key(SOCKET, "bf16"), None), "pcu.macs_per_lane_stage_per_cycle", "bf16"),
    # the systolic array holds a whole number of K values per stage, or a row a whole number of
    # cycles: 1.5 BF16 MACs ran as 1 (the same prefill as 1.0) while describe quoted 1.5 times the peak
    "fractional_mac_rate": (_edit("int8", "1.5"), "pcu.macs_per_lane_stage_per_cycle.int8", "1.5 would run as 1"),
    "mac_rate_not_a_unit_fraction": (_edit("fp32", "0.3"), "pcu.macs_per_lane_stage_per_cycle.fp32",
                                     "0.3 would run as 0.25"),
    "duplicate_key": (_add_line("dies", "dies: 2"), "dies", "duplicate key"),
    "fraction_out_of_range": (_edit("efficiency", "1.5"), "memory.hbm.efficiency", "fraction"),
    "calibrated_out_of_bounds": (_edit("efficiency", "0.1"), "memory.hbm.efficiency", "bounds"),
    # the same key under the second tier is located at its own line
    "second_tier_out_of_bounds": (_edit("efficiency", "0.1", occurrence=1), "memory.ddr.efficiency", "bounds"),
    "block_calibrated_out_of_bounds": (_edit("p2p_efficiency", "0.1"), "calibrated.p2p_efficiency", "bounds"),
    "tier_without_efficiency": (lambda: (delete_key(SOCKET, "efficiency"), None), "memory.hbm.efficiency",
                                "required field is missing"),
    # a count of units has no default: a file without it was given one DMA engine silently
    "p2p_without_dma_engines": (lambda: (delete_key(SOCKET, "dma_engines"), None), "p2p.dma_engines",
                                "required field is missing"),
    "tier_named_like_a_resource": (_add_line("memory", "  tln: null"), "memory", "taken by another resource"),
    "tier_name_not_a_name": (_add_line("memory", "  Fast RAM: null"), "memory", "lower case"),
    "no_tier_left": (lambda: (_drop_block("memory"), None), "memory", "at least one memory tier"),
    "stated_tier_missing": (_add_line("memory_bytes", "    cxl: 1 TiB"), "stated.memory_bytes.cxl", "no cxl tier"),
    "inconsistent_pcu_total": (_edit("pcus", "1000", occurrence=1), "stated.pcus", "2 dies x 2 tiles x 260 PCUs = 1040"),
    "inconsistent_pmu_count": (_edit("pmus", "250"), "stated.pmus", "2 dies x 2 tiles x 250 PMUs = 1000"),
    "inconsistent_sram_total": (_edit("capacity_bytes", "256 KiB"), "stated.sram_bytes",
                                "stated 520.0 MiB (545,259,520 B) but 1040 PMUs x 256.0 KiB = 260.0 MiB"),
    "inconsistent_hbm_total": (_edit("capacity_bytes_per_unit", "8 GiB"), "stated.memory_bytes.hbm",
                               "2 dies x 2 HBM units x 8.0 GiB = 32.0 GiB"),
    "stated_flops_off": (_edit("bf16_flops", "700 TFLOPS"), "stated.bf16_flops",
                         "stated 700 TFLOPS but 1040 PCUs x 32 lanes x 6 stages x 1 MAC x 2 FLOP x 1.6 GHz = 638.976 TFLOPS"),
    # the grid is two fields: the refusal says what either one needs (it named neither)
    "grid_too_small": (_edit("grid_rows", "10"), "tile.grid_rows",
                       "(expected grid_rows at least 20 with 26 columns, or grid_cols at least 52 with 10 rows)"),
    # PMUs sit on a checkerboard's odd cells, one fewer than its even ones when both sides are odd:
    # the 263rd PMU of a 21 x 25 grid was accepted and left out of the layout the mapper places on
    "grid_pmus_beyond_odd_cells": (lambda: (SOCKET.replace("grid_rows: 20", "grid_rows: 21").replace(
        "grid_cols: 26", "grid_cols: 25").replace("pmus: 260", "pmus: 263", 1), None), "tile.grid_rows",
        "262 for PMUs; it cannot hold 260 PCUs and 263 PMUs"),
    # a grid far larger than its units built a mesh of millions of switches: MemoryError, or all the RAM
    "grid_rows_to_spare": (_edit("grid_rows", "2000000"), "tile.grid_rows",
                           "a 20 x 26 one holds them (expected grid_rows at most 20"),
    "grid_cols_to_spare": (_edit("grid_cols", "27"), "tile.grid_cols",
                           "a 20 x 26 one holds them (expected grid_cols at most 26"),
    # rows and columns both to spare: the refusal named an 18 x 30 grid, itself refused for a column
    "grid_both_to_spare": (lambda: (SOCKET.replace("grid_rows: 20", "grid_rows: 30").replace(
        "grid_cols: 26", "grid_cols: 30"), None), "tile.grid_rows",
        "a 18 x 29 one holds them (expected grid_rows at most 18 and grid_cols at most 29, so that no row or column"),
    # the mapper runs GEMMs systolic and the rest as SIMD whatever this says: a one-mode PCU was
    # accepted and mapped as if it had both
    "pcu_one_mode": (_edit("modes", "[simd]"), "pcu.modes", "expected both modes"),
    # a value crosses every stage, a cycle each: a latency under the stage count was accepted (the
    # unit-level PCUs raised a ValueError on it) and gave the mapper a fill shorter than the pipeline
    "pcu_latency_under_stages": (_edit("pipeline_latency_cycles", "5"), "pcu.pipeline_latency_cycles",
                                 "expected at least 6 cycles, got 5"),
    # a PMU port reads a row across its banks: a scratchpad of less than one row, or of a part of
    # one, cannot be built (a 1 B PMU was taken, and ran until a kernel did not fit)
    "pmu_below_one_row": (_edit("capacity_bytes", "64 B"), "pmu.capacity_bytes",
                          "a PMU of 32 banks x 4 B holds whole rows of 128 B; expected a multiple of 128 B, got 64 B"),
    "pmu_not_whole_rows": (lambda: (set_value(SOCKET, "banks", "3")[0], None), "pmu.capacity_bytes",
                           "whole rows of 12 B; expected a multiple of 12 B, got 524288 B"),
    # AGCUs sit on the top and bottom edges of the tile's mesh, one a switch: 2 x 27 at most
    "agcus_beyond_the_edges": (_edit("agcus", "55"), "tile.agcus",
                               "55 AGCUs do not fit on the top and bottom edges of a 27-switch-wide mesh (at most 54)"),
    "two_dies_no_link": (lambda: (_drop_block("die_to_die"), None), "die_to_die", "die_to_die link"),
    "reserve_exceeds_hbm": (_edit("reserved_bytes", "100 GiB"), "memory.hbm.reserved_bytes", "only"),
    # a reserve equal to the capacity, in units a reader can compare, leaves nothing to use
    "reserve_equals_hbm": (_edit("reserved_bytes", "64 GiB"), "memory.hbm.reserved_bytes",
                           "reserves 64.0 GiB but the socket has only 64.0 GiB of HBM: nothing would be left"),
    "missing_kind": (lambda: (delete_key(SOCKET, "kind"), None), "kind", "kind: socket | node"),
    "wrong_kind": (_edit("kind", "sockets"), "kind", "expected one of"),
    "empty_file": (_with_line("# nothing here\n"), None, "empty"),
}


def _check(path: Path, capsys) -> tuple[int, str]:
    status = cli.main(["check", str(path)])
    err = capsys.readouterr().err
    return status, err


def _assert_one_clean_line(status, err, file_name, field, words, line=None):
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    assert file_name in err
    if field is not None:
        assert f": {field}: " in err, err
    if line is not None:  # the bad line itself, or (totals) the line given as the other side of the disagreement
        assert f"{file_name}:{line}" in err, err
    assert words in err, err


@pytest.mark.parametrize("case", sorted(SOCKET_CASES))
def test_bad_socket_file(case, tmp_path, capsys):
    make, field, words = SOCKET_CASES[case]
    text, line = make()
    path = tmp_path / f"bad_{case}.yaml"
    path.write_text(text)
    status, err = _check(path, capsys)
    _assert_one_clean_line(status, err, path.name, field, words, line)


def test_syntax_error_names_its_line(tmp_path, capsys):
    text, line = set_value(SOCKET, "dies", "[2")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    _, err = _check(path, capsys)
    assert f"bad.yaml:{line}" in err or f"bad.yaml:{line + 1}" in err  # the parser notices at or after it


def _node_case(tmp_path, text: str) -> Path:
    folder = copy_configs(tmp_path)
    path = folder / "bad_node.yaml"
    path.write_text(text)
    return path


NODE16 = (HW / "sn40l_node16.yaml").read_text()

NODE_CASES = {
    "missing_socket_file": (set_value(NODE16, "socket", "nowhere.yaml")[0], "socket", "not found"),
    "socket_not_a_path": (set_value(NODE16, "socket", "{dies: 2}")[0], "socket", "relative path"),
    "too_few_ports": (set_value(NODE16, "sockets", "32")[0], "topology.kind", "needs 31 P2P ports per socket"),
    "too_many_links_per_pair": (set_value(NODE16, "links_per_pair", "2")[0], "topology.kind", "needs 30 P2P ports"),
    "hypercube_not_power_of_two": (set_value(set_value(NODE16, "kind", "hypercube", 1)[0], "sockets", "12")[0],
                                   "topology.kind", "power-of-two"),
    "unknown_topology": (set_value(NODE16, "kind", "star", 1)[0], "topology.kind", "full_mesh"),
    "zero_sockets": (set_value(NODE16, "sockets", "0")[0], "sockets", "positive"),
    "bad_override": (NODE16 + "socket_overrides:\n  memory: {hbm: {bytes_per_s_per_unit: fast}}\n",
                     "socket_overrides.memory.hbm.bytes_per_s_per_unit", "bandwidth"),
    # an old-style override is converted, and its error names the new path at the line written
    "bad_old_style_override": (NODE16 + "socket_overrides:\n  hbm: {bytes_per_s_per_unit: fast}\n",
                               "socket_overrides.memory.hbm.bytes_per_s_per_unit", "bandwidth"),
    "socket_file_is_a_node": (set_value(NODE16, "socket", "sn40l_node8.yaml")[0], "base",
                              "this is a node file through its base:"),
}


@pytest.mark.filterwarnings("ignore:.*old-style keys:FutureWarning")  # the old-style case warns by design
@pytest.mark.parametrize("case", sorted(NODE_CASES))
def test_bad_node_file(case, tmp_path, capsys):
    text, field, words = NODE_CASES[case]
    path = _node_case(tmp_path, text)
    status, err = _check(path, capsys)
    # a node file named as the socket: the error names the file whose kind is wrong (node8, an overlay of
    # node16 without a kind of its own: node16 is named as the file saying it) and the node file that
    # referenced it
    expected_file = "sn40l_node8.yaml" if case == "socket_file_is_a_node" else path.name
    _assert_one_clean_line(status, err, expected_file, field, words)
    assert path.name in err


# an overlay of the 16-socket node: the topology error is located at the field the overlay wrote,
# not at the base's topology.kind line, which the user did not change
OVERLAY_TOPOLOGY_CASES = {
    # the error names the way out: more ports, or the topologies whose need fits the ports there are
    "more_sockets": ("sockets: 32\n", "sockets", "needs 31 P2P ports per socket, but socket.p2p.ports is 16; "
                     "raise it, or choose a topology that fits in 16 (ring: 2, torus2d: 4, hypercube: 5)"),
    "torus_too_few_ports": ("topology: {kind: torus2d}\nsockets: 12\nsocket_overrides: {p2p: {ports: 3}}\n",
                            "topology.kind", "needs 4 P2P ports per socket, but socket.p2p.ports is 3; raise it, "
                            "or choose a topology that fits in 3 (ring: 2)"),
    "fewer_ports": ("socket_overrides: {p2p: {ports: 8}}\n", "socket_overrides.p2p.ports", "needs 15 P2P ports"),
    "more_links_per_pair": ("topology: {links_per_pair: 2}\n", "topology.links_per_pair", "needs 30 P2P ports"),
    "its_own_topology": ("topology: {kind: hypercube}\nsockets: 12\n", "topology.kind", "power-of-two"),
}


@pytest.mark.parametrize("case", sorted(OVERLAY_TOPOLOGY_CASES))
def test_a_node_overlays_topology_error_names_the_overlays_field(case, tmp_path, capsys):
    text, field, words = OVERLAY_TOPOLOGY_CASES[case]
    folder = copy_configs(tmp_path)
    path = folder / "bigger.yaml"
    path.write_text(f"base: sn40l_node16.yaml\nname: bigger\n{text}")
    status, err = _check(path, capsys)
    _assert_one_clean_line(status, err, "bigger.yaml", field, words, line=3)


def test_error_inside_the_referenced_socket_file_names_that_file(tmp_path, capsys):
    folder = copy_configs(tmp_path)
    text, line = set_value(SOCKET, "lanes", "-32")
    (folder / "sn40l.yaml").write_text(text)
    status, err = _check(folder / "sn40l_node16.yaml", capsys)
    # the field path is the one inside the file that holds the bad value
    _assert_one_clean_line(status, err, "sn40l.yaml", "pcu.lanes", "positive", line)


def test_base_cycle(tmp_path, capsys):
    (tmp_path / "a.yaml").write_text("base: b.yaml\nkind: socket\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nname: x\n")
    status, err = _check(tmp_path / "a.yaml", capsys)
    _assert_one_clean_line(status, err, "a.yaml", "base", "cycle")


def test_missing_base_file(tmp_path, capsys):
    (tmp_path / "over.yaml").write_text("base: nowhere.yaml\nname: x\n")
    status, err = _check(tmp_path / "over.yaml", capsys)
    _assert_one_clean_line(status, err, "over.yaml", "base", "'nowhere.yaml' not found", line=1)


def test_overlay_error_points_at_the_overlay_line(tmp_path, capsys):
    folder = copy_configs(tmp_path)
    (folder / "sn10_bad.yaml").write_text("base: sn10.yaml\nname: bad\nstated:\n  pcus: 600\n")
    status, err = _check(folder / "sn10_bad.yaml", capsys)
    _assert_one_clean_line(status, err, "sn10_bad.yaml", "stated.pcus", "1 die x 4 tiles x 160 PCUs", line=4)
    assert "sn10.yaml:" in err  # where tile.pcus is set, in the base file


def test_stated_total_error_names_every_field_it_follows_from(tmp_path, capsys):
    # more PCU stages: the peak disagrees with the stated one, and the message names pcu.stages (not
    # only the clock) and how to mark the socket hypothetical
    path = tmp_path / "deeper.yaml"
    text, line = set_value(SOCKET, "stages", "8")
    path.write_text(text)
    status, err = _check(path, capsys)
    _assert_one_clean_line(status, err, "deeper.yaml", "stated.bf16_flops", "x 8 stages x", line=line)
    clock_line = set_value(SOCKET, "clock_hz", "1.6 GHz")[1]
    assert f"pcu.stages at deeper.yaml:{line}" in err and f"clock_hz at deeper.yaml:{clock_line}" in err
    assert "set stated.bf16_flops: null" in err


def test_hypothetical_socket_drops_the_stated_totals(tmp_path, capsys):
    # an overlay with twice the PCUs per tile (on a grid that holds them) and HBM4-like modules:
    # `stated: null` removes the base's published totals, which no longer describe this part
    overlay = ("base: {base}\nname: SN40L-2x\ntile: {{grid_rows: 40, pcus: 520}}\n"
               "memory: {{hbm: {{bytes_per_s_per_unit: 2 TB/s}}}}\n").format(base=HW / "sn40l.yaml")
    (tmp_path / "with_totals.yaml").write_text(overlay)
    status, err = _check(tmp_path / "with_totals.yaml", capsys)
    _assert_one_clean_line(status, err, "sn40l.yaml", "stated.pcus", "x 520 PCUs = 2080")
    assert "tile.pcus at with_totals.yaml:3" in err
    (tmp_path / "hypothetical.yaml").write_text(overlay + "stated: null\n")
    assert cli.main(["describe", str(tmp_path / "hypothetical.yaml")]) == 0
    out = capsys.readouterr().out
    assert "2080" in out and "1.278 PFLOPS" in out and "8 TB/s" in out


def test_check_reports_every_file_and_fails_if_any_is_bad(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(set_value(SOCKET, "dies", "-1")[0])
    status = cli.main(["check", str(HW / "sn40l.yaml"), str(bad), str(HW / "sn10.yaml")])
    out, err = capsys.readouterr()
    assert status == 2
    assert out.count("ok: ") == 2 and err.count("error: ") == 1


@pytest.mark.parametrize("edit", [("dies", "[2"), ("dies", "-2")])
def test_real_process_exit_status(edit, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(set_value(SOCKET, *edit)[0])
    done = subprocess.run([sys.executable, "-m", "sn40l_sim", "check", str(path)], capture_output=True, text=True,
                          cwd=HW.parent)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr and "bad.yaml" in done.stderr


@pytest.mark.parametrize("other, kind", [("graphs/llama3_1_8b.yaml", "a model"),
                                         ("experiments/llama8b_node8.yaml", "an experiment")])
def test_a_base_of_another_kind_is_named_at_the_overlay_not_its_base(other, kind, tmp_path):
    # sn40l_node8.yaml has no kind: of its own; with base: naming a model file it was refused at the
    # model file's kind: line, a file the user had not touched
    folder = copy_configs(tmp_path)
    node = folder / "sn40l_node8.yaml"
    text = node.read_text()
    assert "\nbase: sn40l_node16.yaml\n" in text and "\nkind:" not in text
    node.write_text(text.replace("\nbase: sn40l_node16.yaml\n", f"\nbase: {HW.parent / other}\n"))
    with pytest.raises(InputError) as caught:
        load_hardware(node)
    assert str(caught.value) == (f"{node}: base: this is {kind} file through its base: ({HW.parent / other} says "
                                 f"kind: {kind.split()[1]}); expected one of ['socket', 'node']")


def test_a_grid_too_narrow_says_what_either_side_needs(tmp_path, capsys):
    # a change of grid_cols is refused at grid_rows (the pair is one grid), so the line names both
    path = tmp_path / "narrow.yaml"
    path.write_text(set_value(SOCKET, "grid_cols", "13")[0])
    status, err = _check(path, capsys)
    _assert_one_clean_line(status, err, "narrow.yaml", "tile.grid_rows",
                           "(expected grid_rows at least 40 with 13 columns, or grid_cols at least 26 with 20 rows)")


def test_a_socket_may_have_exactly_the_most_tiles():
    # "at most MAX_TILES_PER_SOCKET": 2 dies x 128 tiles is the limit itself, one tile more is not
    assert socket_tiles_error(2, MAX_TILES_PER_SOCKET // 2) is None
    assert socket_tiles_error(2, MAX_TILES_PER_SOCKET // 2 + 1)[0] == "tiles_per_die"
    assert socket_tiles_error(MAX_TILES_PER_SOCKET // 2 + 1, 2)[0] == "dies"


def test_agcus_may_fill_both_edges_of_the_mesh(tmp_path, capsys):
    # 2 x 27 AGCUs on a 26-column grid's 27-switch-wide mesh: the edges full, not past them
    path = tmp_path / "edges.yaml"
    path.write_text(set_value(SOCKET, "agcus", "54")[0])
    assert _check(path, capsys)[0] == 0
