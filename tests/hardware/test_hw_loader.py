"""Loading hardware files: round trips, node -> socket references, overlays, overrides."""
from __future__ import annotations

import pytest
from hw_test_helpers import HW, copy_configs, set_value

from sn40l_sim.errors import InputError
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
        "base: sn40l_node16.yaml\nsocket_overrides:\n  hbm:\n    bytes_per_s_per_unit: 800 GB/s\n  p2p: {ports: 20}\n")
    node = load_hardware(folder / "fast.yaml")
    base = load_hardware(folder / "sn40l_node16.yaml")
    assert node.socket.hbm.bytes_per_s_per_unit == 800e9
    assert node.socket.p2p.ports == 20
    # untouched fields of the same sections are kept
    assert node.socket.hbm.capacity_bytes_per_unit == base.socket.hbm.capacity_bytes_per_unit
    assert node.socket.p2p.bytes_per_s_per_port == base.socket.p2p.bytes_per_s_per_port


def test_sn10_overlay_changes_only_what_differs():
    sn40l, sn10 = load_hardware(HW / "sn40l.yaml").socket, load_hardware(HW / "sn10.yaml").socket
    assert sn10.pcu == sn40l.pcu and sn10.pmu == sn40l.pmu and sn10.p2p == sn40l.p2p
    assert sn10.hbm is None and sn10.die_to_die is None
    assert (sn10.dies, sn10.tiles_per_die, sn10.tile.pcus) == (1, 4, 160)
    sn30 = load_hardware(HW / "sn30.yaml").socket
    assert (sn30.dies, sn30.tiles_per_die, sn30.tile) == (2, 4, sn10.tile)
    # the overlays write far fewer lines than the file they start from
    assert len((HW / "sn10.yaml").read_text().splitlines()) < len((HW / "sn40l.yaml").read_text().splitlines()) / 2


def test_with_overrides_returns_a_new_validated_node():
    node = load_hardware(HW / "sn40l_node16.yaml")
    new = with_overrides(node, {"socket.hbm.bytes_per_s_per_unit": "800 GB/s", "socket.calibrated.hbm_efficiency": 0.7})
    assert new.socket.hbm.bytes_per_s_per_unit == 800e9 and new.socket.calibrated.hbm_efficiency == 0.7
    assert node.socket.hbm.bytes_per_s_per_unit == 409.6e9  # the original is untouched
    # a hypothetical part: stated totals are not re-checked
    bigger = with_overrides(node, {"socket.hbm.capacity_bytes_per_unit": "24 GiB"})
    assert bigger.socket.hbm.capacity_bytes_per_unit == 24 * 2**30


@pytest.mark.parametrize("overrides, field, words", [
    ({"socket.hbm.bytez": 1}, "socket.hbm.bytez", "unknown key"),
    ({"socket.nothing.x": 1}, "socket.nothing.x", "not a section"),
    ({"socket.hbm.bytes_per_s_per_unit": "800 GB"}, "socket.hbm.bytes_per_s_per_unit", "bandwidth"),
    ({"sockets": 0}, "sockets", "positive"),
    ({"sockets": 32}, "topology.kind", "needs 31 P2P ports"),
    ({"socket.calibrated.hbm_efficiency": 0.1}, "socket.calibrated.hbm_efficiency", "bounds"),
    ({"socket.tile.grid_rows": 2}, "socket.tile.grid_rows", "checkerboard"),
])
def test_with_overrides_rejects_bad_values(overrides, field, words):
    node = load_hardware(HW / "sn40l_node16.yaml")
    with pytest.raises(InputError) as info:
        with_overrides(node, overrides)
    assert info.value.field == field and info.value.file == "<overrides>"
    assert words in info.value.message


def test_with_overrides_on_a_part_without_hbm_names_the_missing_section():
    sn10 = load_hardware(HW / "sn10.yaml")
    with pytest.raises(InputError, match="has no value"):
        with_overrides(sn10, {"socket.hbm.bytes_per_s_per_unit": "1 TB/s"})
    added = with_overrides(sn10, {"socket.hbm": {"units_per_die": 1, "capacity_bytes_per_unit": "16 GiB",
                                                 "bytes_per_s_per_unit": "400 GB/s", "latency_s": "100 ns"}})
    assert added.socket.hbm.units_per_die == 1
