"""Loading hardware files: round trips, node -> socket references, overlays, overrides."""
from __future__ import annotations

import re
import warnings

import pytest
from hw_test_helpers import HW, copy_configs, set_value

from sn40l_sim.errors import InputError
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.hardware.spec import NodeSpec


@pytest.mark.parametrize("name", sorted(p.name for p in HW.glob("*.yaml")))
def test_every_shipped_file_loads_and_round_trips(name):
    node = load_hardware(HW / name)
    again = NodeSpec.model_validate(node.model_dump())
    assert again == node
    assert with_overrides(node, {}) == node


def test_socket_file_is_a_one_socket_node():
    node = load_hardware(HW / "sn40l.yaml")
    assert (node.sockets, node.topology.kind, node.host_link) == (1, "full_mesh", None)


def test_node_files_reference_the_socket_instead_of_copying_it():
    socket = load_hardware(HW / "sn40l.yaml").socket
    for name, sockets in (("sn40l_node16.yaml", 16), ("sn40l_node8.yaml", 8)):
        node = load_hardware(HW / name)
        assert node.socket == socket
        assert node.sockets == sockets
    from sn40l_sim.yamlio import load_document
    assert load_document(HW / "sn40l_node16.yaml").data["socket"] == "sn40l.yaml"


def test_changing_the_socket_file_changes_the_node(tmp_path):
    folder = copy_configs(tmp_path)
    text, _ = set_value((folder / "sn40l.yaml").read_text(), "clock_hz", "1.0 GHz")
    text, _ = set_value(text, "bf16_flops", "399.36 TFLOPS")  # 1040 x 384 x 1 GHz, keeps the stated check true
    (folder / "sn40l.yaml").write_text(text)
    assert load_hardware(folder / "sn40l_node16.yaml").socket.clock_hz == 1.0e9


def test_socket_overrides_in_a_node_file(tmp_path):
    folder = copy_configs(tmp_path)
    (folder / "fast.yaml").write_text(
        "base: sn40l_node16.yaml\nsocket_overrides:\n  memory:\n    hbm:\n      bytes_per_s_per_unit: 800 GB/s\n"
        "  p2p: {ports: 20}\n")
    node = load_hardware(folder / "fast.yaml")
    base = load_hardware(folder / "sn40l_node16.yaml")
    assert node.socket.memory["hbm"].bytes_per_s_per_unit == 800e9
    assert node.socket.p2p.ports == 20
    # untouched fields of the same sections, and the other tiers in their order, are kept
    assert node.socket.memory["hbm"].capacity_bytes_per_unit == base.socket.memory["hbm"].capacity_bytes_per_unit
    assert list(node.socket.memory) == ["hbm", "ddr"] and node.socket.memory["ddr"] == base.socket.memory["ddr"]
    assert node.socket.p2p.bytes_per_s_per_port == base.socket.p2p.bytes_per_s_per_port


def test_sn10_overlay_changes_only_what_differs():
    sn40l, sn10 = load_hardware(HW / "sn40l.yaml").socket, load_hardware(HW / "sn10.yaml").socket
    assert sn10.pcu == sn40l.pcu and sn10.pmu == sn40l.pmu and sn10.p2p == sn40l.p2p
    assert list(sn10.memory) == ["ddr"] and sn10.die_to_die is None   # "hbm: null" removes the base's tier
    assert sn10.memory["ddr"].efficiency == sn40l.memory["ddr"].efficiency    # inherited field by field
    assert (sn10.dies, sn10.tiles_per_die, sn10.tile.pcus) == (1, 4, 160)
    sn30 = load_hardware(HW / "sn30.yaml").socket
    assert (sn30.dies, sn30.tiles_per_die, sn30.tile) == (2, 4, sn10.tile)
    # the overlays write far fewer lines than the file they start from
    assert len((HW / "sn10.yaml").read_text().splitlines()) < len((HW / "sn40l.yaml").read_text().splitlines()) / 2


def test_with_overrides_returns_a_new_validated_node():
    node = load_hardware(HW / "sn40l_node16.yaml")
    new = with_overrides(node, {"socket.memory.hbm.bytes_per_s_per_unit": "800 GB/s",
                                "socket.memory.hbm.efficiency": 0.7})
    assert new.socket.memory["hbm"].bytes_per_s_per_unit == 800e9 and new.socket.memory["hbm"].efficiency == 0.7
    assert node.socket.memory["hbm"].bytes_per_s_per_unit == 409.6e9  # the original is untouched
    # a hypothetical part: stated totals are not re-checked
    bigger = with_overrides(node, {"socket.memory.hbm.capacity_bytes_per_unit": "24 GiB"})
    assert bigger.socket.memory["hbm"].capacity_bytes_per_unit == 24 * 2**30


def test_an_override_of_a_mac_rate_the_systolic_array_cannot_run_is_refused():
    # --set hardware.socket.pcu.macs_per_lane_stage_per_cycle.bf16=1.5 ran Llama-3.1-8B's prefill in
    # 0.289 s, as at 1.0, while describe and the rooflines used a peak 1.5 times BF16's
    node = load_hardware(HW / "sn40l_node8.yaml")
    with pytest.raises(InputError, match=r"macs_per_lane_stage_per_cycle\.bf16: .*1\.5 would run as 1\b"):
        with_overrides(node, {"socket.pcu.macs_per_lane_stage_per_cycle.bf16": 1.5})
    faster = with_overrides(node, {"socket.pcu.macs_per_lane_stage_per_cycle.bf16": 2,
                                   "socket.pcu.macs_per_lane_stage_per_cycle.fp32": 0.125})
    assert faster.socket.pcu.macs_per_lane_stage_per_cycle["bf16"] == 2


@pytest.mark.parametrize("overrides, expected", [
    ([("sockets", 8)], "expected a mapping of dotted field paths to values, such as {'sockets': 8}, got a list"),
    ({3: 8}, "override keys must be dotted field paths such as 'socket.clock_hz', got 3"),
    ({"socket..clock_hz": "1 GHz"}, "override keys must be dotted field paths"),
])
def test_overrides_of_the_wrong_shape_are_input_errors(overrides, expected):
    # a Python caller got AttributeError ('list' object has no attribute 'items', 'int' object has
    # no attribute 'split'), where the CLI's --set says what was wrong
    with pytest.raises(InputError, match=re.escape(expected)) as info:
        with_overrides(load_hardware(HW / "sn40l_node8.yaml"), overrides)
    assert str(info.value).startswith("<overrides>: ")


def test_numpy_numbers_override_as_the_numbers_they_are():
    # a notebook sweeping np.linspace(0.5, 0.9, 5) as float32 got "expected a number, got np.float32(0.5)"
    np = pytest.importorskip("numpy")
    node = load_hardware(HW / "sn40l_node8.yaml")
    new = with_overrides(node, {"socket.memory.hbm.efficiency": np.float32(0.5), "sockets": np.int64(4),
                                "socket.memory.hbm.bytes_per_s_per_unit": np.float32(8e11)})
    assert new.socket.memory["hbm"].efficiency == 0.5 and new.sockets == 4
    assert new.socket.memory["hbm"].bytes_per_s_per_unit == pytest.approx(8e11, rel=1e-7)
    with pytest.raises(InputError, match="efficiency"):
        with_overrides(node, {"socket.memory.hbm.efficiency": np.float32(1.5)})


def test_an_override_that_changes_the_node_names_it_after_the_change():
    # a sweep over hardware.sockets once wrote "SN40L-16" for a 4-socket node, so a plot with the
    # hardware as hue merged different nodes
    node16, node8 = load_hardware(HW / "sn40l_node16.yaml"), load_hardware(HW / "sn40l_node8.yaml")
    assert with_overrides(node16, {"sockets": 4}).name == "SN40L-16 (sockets 4)"
    assert with_overrides(node8, {"sockets": 16}).name == "SN40L-8 (sockets 16)"
    fast = with_overrides(node16, {"sockets": 8, "socket.memory.hbm.bytes_per_s_per_unit": "800 GB/s"})
    assert fast.name == "SN40L-16 (socket.memory.hbm.bytes_per_s_per_unit 800 GB/s, sockets 8)"
    # an override to the value the file has is the file's node; a name given is kept
    assert with_overrides(node16, {"sockets": 16, "socket.memory.hbm.bytes_per_s_per_unit": "409.6 GB/s"}) == node16
    assert with_overrides(node16, {"sockets": 4, "name": "quad"}).name == "quad"


@pytest.mark.parametrize("overrides, field, words", [
    ({"socket.memory.hbm.bytez": 1}, "socket.memory.hbm.bytez", "unknown key"),
    ({"socket.nothing.x": 1}, "socket.nothing.x", "not a section"),
    ({"socket.memory.hbm.bytes_per_s_per_unit": "800 GB"}, "socket.memory.hbm.bytes_per_s_per_unit", "bandwidth"),
    ({"sockets": 0}, "sockets", "positive"),
    ({"sockets": 32}, "sockets", "needs 31 P2P ports"),   # the field changed, not the topology it outgrows
    ({"socket.memory.hbm.efficiency": 0.1}, "socket.memory.hbm.efficiency", "bounds"),
    ({"socket.memory.ddr.reserved_bytes": "2 TiB"}, "socket.memory.ddr.reserved_bytes", "only"),
    ({"socket.tile.grid_rows": 2}, "socket.tile.grid_rows", "checkerboard"),
])
def test_with_overrides_rejects_bad_values(overrides, field, words):
    node = load_hardware(HW / "sn40l_node16.yaml")
    with pytest.raises(InputError) as info:
        with_overrides(node, overrides)
    assert info.value.field == field and info.value.file == "<overrides>"
    assert words in info.value.message


def test_calibrated_values_may_sit_on_their_bounds():
    # the bounds are a closed interval: hbm efficiency in [0.3, 1.0], sync latency in [0, 50 us]
    node = load_hardware(HW / "sn40l_node16.yaml")
    for overrides in ({"socket.memory.hbm.efficiency": 1.0}, {"socket.memory.hbm.efficiency": 0.3},
                      {"socket.calibrated.sync_latency_s": 0.0}, {"socket.calibrated.sync_latency_s": 50e-6}):
        with_overrides(node, overrides)
    with pytest.raises(InputError, match="outside the physical bounds"):
        with_overrides(node, {"socket.memory.hbm.efficiency": 0.29})


def test_with_overrides_on_a_part_without_hbm_names_the_missing_section():
    sn10 = load_hardware(HW / "sn10.yaml")
    with pytest.raises(InputError, match="'socket.memory.hbm' is not a section"):
        with_overrides(sn10, {"socket.memory.hbm.bytes_per_s_per_unit": "1 TB/s"})
    added = with_overrides(sn10, {"socket.memory.hbm": {"units_per_die": 1, "capacity_bytes_per_unit": "16 GiB",
                                                        "bytes_per_s_per_unit": "400 GB/s", "latency_s": "100 ns",
                                                        "efficiency": 0.8}})
    assert added.socket.memory["hbm"].units_per_die == 1
    assert list(added.socket.memory) == ["ddr", "hbm"]   # a tier added by an override comes last


# --- old-style socket files: top-level hbm:/ddr:, calibrated.<tier>_efficiency, reserved.<tier>_bytes

def _old_style(text: str) -> str:
    """The shipped sn40l.yaml written the way hardware files were before memory tiers were data."""
    lines = text.splitlines()
    start = lines.index(next(t for t in lines if t.startswith("memory:")))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith((" ", "#")))
    block = [t for t in lines[start + 1:end] if t.strip() and not t.strip().startswith("#")]
    tiers: dict[str, list[str]] = {}
    for t in block:
        if not t.startswith("    "):
            tiers[t.strip().rstrip(":")] = []
        else:
            tiers[list(tiers)[-1]].append(t[4:].split("#")[0].rstrip())
    old, calibrated, reserved = [], [], []
    for tier, fields in tiers.items():
        old.append(f"{tier}:")
        for field in fields:
            key, value = field.split(":", 1)
            if key == "efficiency":
                calibrated.append(f"  {tier}_efficiency:{value}")
            elif key == "reserved_bytes":
                reserved.append(f"  {tier}_bytes:{value}")
            else:
                old.append(f"  {field}")
    out = lines[:start] + old + ["reserved:"] + reserved + lines[end:]
    i = out.index(next(t for t in out if t.startswith("calibrated:")))
    out[i + 1:i + 1] = calibrated
    i = out.index(next(t for t in out if t.strip().startswith("memory_bytes:")))
    out[i:i + 3] = ["  hbm_bytes: 64 GiB", "  ddr_bytes: 1.5 TiB"]
    return "\n".join(out) + "\n"


def test_old_style_socket_file_loads_with_one_deprecation_line(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text(_old_style((HW / "sn40l.yaml").read_text()))
    assert "memory:" not in path.read_text() and "hbm_efficiency:" in path.read_text()
    with pytest.warns(FutureWarning) as caught:
        old = load_hardware(path)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert str(path) in message and "memory: {hbm: {" in message and "calibrated.hbm_efficiency" in message
    assert old.socket == load_hardware(HW / "sn40l.yaml").socket


def test_old_style_errors_point_at_the_line_written(tmp_path, capsys):
    text, line = set_value(_old_style((HW / "sn40l.yaml").read_text()), "hbm_efficiency", "0.1")
    path = tmp_path / "old.yaml"
    path.write_text(text)
    from sn40l_sim.commands import cli
    with pytest.warns(FutureWarning):
        assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"old.yaml:{line}: memory.hbm.efficiency: 0.1 is outside the physical bounds" in err


def test_old_style_overlay_over_a_new_base(tmp_path):
    folder = copy_configs(tmp_path)
    (folder / "old_overlay.yaml").write_text(
        "base: sn40l.yaml\nhbm: {bytes_per_s_per_unit: 800 GB/s}\ncalibrated: {hbm_efficiency: 0.75}\n"
        "reserved: {ddr_bytes: 4 GiB}\n")
    with pytest.warns(FutureWarning, match="old_overlay.yaml"):
        node = load_hardware(folder / "old_overlay.yaml")
    hbm, ddr = node.socket.memory["hbm"], node.socket.memory["ddr"]
    assert (hbm.bytes_per_s_per_unit, hbm.efficiency, hbm.capacity_bytes_per_unit) == (800e9, 0.75, 16 * 2**30)
    assert ddr.reserved_bytes == 4 * 2**30 and list(node.socket.memory) == ["hbm", "ddr"]


def test_old_style_override_paths_still_work():
    node = load_hardware(HW / "sn40l_node16.yaml")
    with pytest.warns(FutureWarning, match="socket.hbm.bytes_per_s_per_unit -> socket.memory.hbm.bytes_per_s_per_unit"):
        new = with_overrides(node, {"socket.hbm.bytes_per_s_per_unit": "800 GB/s",
                                    "socket.calibrated.hbm_efficiency": 0.75})
    assert new.socket.memory["hbm"].bytes_per_s_per_unit == 800e9 and new.socket.memory["hbm"].efficiency == 0.75


def test_a_new_tier_is_one_yaml_entry(tmp_path):
    """A CXL tier added to a copy of sn40l.yaml: no Python change, every figure and check sees it."""
    from sn40l_sim.hardware import figures
    from sn40l_sim.hardware.spec import calibrated_parameters
    from sn40l_sim.hardware.topology import build_topology

    folder = copy_configs(tmp_path)
    (folder / "cxl.yaml").write_text(
        "base: sn40l.yaml\nname: SN40L+CXL\nmemory:\n  cxl:\n    units_per_die: 1\n    capacity_bytes_per_unit: 512 GiB\n"
        "    bytes_per_s_per_unit: 32 GB/s\n    latency_s: 600 ns\n    efficiency: 0.7\n    reserved_bytes: 1 GiB\n")
    socket = load_hardware(folder / "cxl.yaml").socket
    assert figures.memory_tiers(socket) == ("hbm", "ddr", "cxl")
    assert figures.memory_bytes(socket, "cxl") == 2 * 512 * 2**30
    assert figures.usable_memory_bytes(socket, "cxl") == 1023 * 2**30
    assert calibrated_parameters(socket)["memory.cxl.efficiency"].value == 0.7
    graph = build_topology(load_hardware(folder / "cxl.yaml"))
    assert sum(1 for _, d in graph.nodes(data=True) if d.get("kind") == "cxl") == 2
    with pytest.raises(InputError, match="outside the physical bounds"):
        with_overrides(load_hardware(folder / "cxl.yaml"), {"socket.memory.cxl.efficiency": 0.2})


def _ddr_listed_first(text: str) -> str:
    """The socket file with its ddr entry moved above its hbm entry."""
    hbm, ddr, tln = text.index("  hbm:\n"), text.index("  ddr:\n"), text.index("\ntln:")
    return text[:hbm] + text[ddr:tln + 1] + text[hbm:ddr] + text[tln + 1:]


def test_a_file_listing_a_slower_tier_first_is_warned_of_at_the_faster_tier(tmp_path):
    # tiers are placed in the order listed: with ddr above hbm, DeepSeek-R1's decode step ran from
    # DDR (17.5 s instead of 86 ms) without a word
    path = tmp_path / "ddr_first.yaml"
    path.write_text(_ddr_listed_first((HW / "sn40l.yaml").read_text()))
    with pytest.warns(UserWarning) as caught:
        node = load_hardware(path)
    assert list(node.socket.memory) == ["ddr", "hbm"]
    (message,) = [str(w.message) for w in caught]
    # located in the hbm entry (a block mapping's position is that of its first field)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t == "  hbm:")
    assert message.split(": memory.hbm")[0] in (f"{path}:{line}", f"{path}:{line + 1}"), message
    assert "memory.hbm: listed after ddr, a slower tier (1.638 TB/s against 100 GB/s a socket)" in message
    assert "memory.order" in message


def test_a_tier_as_fast_as_the_one_before_it_is_not_warned_of(tmp_path):
    # only a tier listed after a slower one is out of order: one with DDR's units and rate (2 dies x
    # 3 x 16.6667 GB/s, about 100 GB/s a socket) listed after DDR is not
    path = tmp_path / "as_fast.yaml"
    path.write_text(f"base: {HW / 'sn40l.yaml'}\nname: X\nstated: null\nmemory:\n  cxl: {{units_per_die: 3, "
                    "capacity_bytes_per_unit: 64 GiB, bytes_per_s_per_unit: 16.6667 GB/s, latency_s: 300 ns, "
                    "efficiency: 0.9, reserved_bytes: 0}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        node = load_hardware(path)
    assert list(node.socket.memory) == ["hbm", "ddr", "cxl"]
    assert figures.memory_bytes_per_s(node.socket, "cxl") == figures.memory_bytes_per_s(node.socket, "ddr")


def test_a_faster_tier_an_overlay_adds_is_told_it_goes_after_the_bases(tmp_path):
    # the overlay wrote its tier first and was told to "list the tiers fastest first", which it had
    path = tmp_path / "fast_first.yaml"
    path.write_text(f"base: {HW / 'sn40l.yaml'}\nname: X\nstated: null\nmemory:\n  fast: {{units_per_die: 1, "
                    "capacity_bytes_per_unit: 8 GiB, bytes_per_s_per_unit: 4 TB/s, latency_s: 50 ns, efficiency: 0.9, "
                    "reserved_bytes: 0}\n")
    with pytest.warns(UserWarning, match="a tier an overlay adds goes after its base's wherever it is written: write "
                                         "a whole socket file"):
        assert list(load_hardware(path).socket.memory) == ["hbm", "ddr", "fast"]


def test_shipped_files_and_overrides_that_slow_a_tier_do_not_warn(recwarn):
    for path in HW.glob("*.yaml"):
        load_hardware(path)
    # a sweep that takes HBM below DDR keeps the file's placement on purpose
    with_overrides(load_hardware(HW / "sn40l_node16.yaml"), {"socket.memory.hbm.bytes_per_s_per_unit": "10 GB/s"})
    assert not [w for w in recwarn if "listed after" in str(w.message)]


def test_an_experiment_placing_the_tiers_itself_is_not_told_to(tmp_path, recwarn):
    # the warning names memory.order as the way out; an experiment that takes it is not warned
    from sn40l_sim.study.assemble import assemble
    from sn40l_sim.study.experiment import load_experiment

    (tmp_path / "sn40l.yaml").write_text(_ddr_listed_first((HW / "sn40l.yaml").read_text()))
    for name in ("sn40l_node16.yaml", "sn40l_node8.yaml"):   # the 8-socket node starts from the 16-socket one
        (tmp_path / name).write_text((HW / name).read_text())
    repo = HW.parent
    text = (f"kind: experiment\nname: e\nhardware: sn40l_node8.yaml\nmodel: {repo / 'graphs/llama3_1_8b.yaml'}\n"
            "parallel: {prefill: {tp: 8}, decode: {tp: 8}}\npolicies: [{name: full, policy: full}]\n"
            "shape: {prompt_len: 1024}\n")
    (tmp_path / "plain.yaml").write_text(text)
    (tmp_path / "ordered.yaml").write_text(text + "memory: {order: [hbm, ddr]}\n")
    assemble(load_experiment(tmp_path / "ordered.yaml"))
    assert not [w for w in recwarn if "listed after" in str(w.message)]
    with pytest.warns(UserWarning, match="memory.hbm: listed after ddr"):
        assemble(load_experiment(tmp_path / "plain.yaml"))


def test_an_override_of_the_socket_may_name_a_socket_file_as_a_node_file_does(capsys):
    # a node file's socket: takes a path; --set hardware.socket=hw_configs/sn30.yaml was refused as
    # "socket: expected a mapping of keys"
    from sn40l_sim.commands.cli import main

    node = load_hardware(HW / "sn40l_node8.yaml")
    sn30 = with_overrides(node, {"socket": str(HW / "sn30.yaml")})
    assert sn30.socket == load_hardware(HW / "sn30.yaml").socket and sn30.sockets == 8
    assert sn30.name == f"SN40L-8 (socket {HW / 'sn30.yaml'})"
    assert with_overrides(node, {"socket": str(HW / "sn40l.yaml")}).name == "SN40L-8"   # the same socket
    exp = str(HW.parent / "experiments" / "llama8b_node8.yaml")
    assert main(["map", exp, "--phase", "decode", "--set", "hardware.socket=nope/sn99.yaml"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --set hardware.socket: 'nope/sn99.yaml': file not found\n", err


def test_a_node_name_is_short_in_its_file_but_may_grow_by_overrides(tmp_path):
    # the names limit (100 characters) refused the name overrides give a node, which names what they
    # changed: calibrate's second round of overrides stopped with "expected a name of at most 100"
    node = load_hardware(HW / "sn40l_node16.yaml")
    long_path = "socket.calibrated.config_load_bytes_per_s"
    grown = with_overrides(node, {long_path: "12.5 GB/s", "socket.calibrated.sync_latency_s": "1.5 us",
                                  "socket.calibrated.transfer_setup_s": "2.5 us"})
    assert len(grown.name) > 100
    assert with_overrides(grown, {"sockets": 8}).sockets == 8
    folder = copy_configs(tmp_path)
    text, line = set_value((folder / "sn40l_node16.yaml").read_text(), "name", "N" * 101)
    (folder / "sn40l_node16.yaml").write_text(text)
    with pytest.raises(InputError, match=rf"sn40l_node16.yaml:{line}: name: expected a name of at most 100"):
        load_hardware(folder / "sn40l_node16.yaml")
