"""How the on-chip SRAM is shared (``pmu.read_ahead_share``, ``pmu.score_share``) is read from the
hardware file, not fixed in the mapper: the SN40L file states the halves the mapper used to assume,
a change of either moves what it governs the right way, and a share outside (0, 1] is refused."""
from __future__ import annotations

from pathlib import Path

import pytest
import simpy

from sn40l_sim.commands.cli import main
from sn40l_sim.engine.resources import SocketResources
from sn40l_sim.errors import InputError
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.mapper.attention import partials_per_cache
from sn40l_sim.mapper.keys import socket_key
from sn40l_sim.mapper.read_ahead import read_ahead_bytes

ROOT = Path(__file__).resolve().parents[2]
NODE = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")


def test_the_sn40l_file_gives_half_the_sram_to_each():
    socket = NODE.socket
    assert (socket.pmu.read_ahead_share, socket.pmu.score_share) == (0.5, 0.5)
    assert read_ahead_bytes(socket) == figures.sram_bytes(socket) / 2 == 260 * 2**20
    # one 128K DeepSeek cache (3 query tokens x 128 heads) on 4 tiles: a fragment per tile, each
    # fragment's FP32 score rows (32K x 384 x 4 B = 48 MiB) within half a tile's 130 MiB
    assert partials_per_cache(socket, 1, 384, 131072, 4) == 4


def test_a_smaller_read_ahead_share_gives_a_smaller_read_ahead_buffer():
    quarter = with_overrides(NODE, {"socket.pmu.read_ahead_share": 0.25})
    assert read_ahead_bytes(quarter.socket) == read_ahead_bytes(NODE.socket) / 2
    assert SocketResources.build(simpy.Environment(), quarter).buffer_bytes == 130 * 2**20
    assert socket_key(quarter.socket) != socket_key(NODE.socket)     # the mapper's cache tells them apart


def test_a_smaller_score_share_cuts_a_long_cache_into_more_chunks():
    # an eighth of a tile's SRAM (16.25 MiB) holds 11,093 score rows' tokens: three chunks a fragment
    eighth = with_overrides(NODE, {"socket.pmu.score_share": 0.125})
    assert partials_per_cache(eighth.socket, 1, 384, 131072, 4) == 12
    assert socket_key(eighth.socket) != socket_key(NODE.socket)


@pytest.mark.parametrize("field", ["read_ahead_share", "score_share"])
@pytest.mark.parametrize("value", [0, 1.5, -0.5])
def test_a_share_outside_zero_to_one_is_refused(field, value):
    with pytest.raises(InputError, match=rf"pmu\.{field}.*expected a fraction greater than 0 and at most 1"):
        with_overrides(NODE, {f"socket.pmu.{field}": value})


def test_a_socket_file_without_a_share_is_refused_naming_it(tmp_path):
    text = (ROOT / "hw_configs" / "sn40l.yaml").read_text()
    kept = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("score_share:"))
    (tmp_path / "socket.yaml").write_text(kept + "\n")
    with pytest.raises(InputError, match=r"socket\.yaml.*pmu\.score_share"):
        load_hardware(tmp_path / "socket.yaml")


def _decode_step_ms(tmp_path, capsys, *sets):
    out = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    args = ["run", str(ROOT / "experiments" / "deepseek_tp16.yaml"), "--out", str(out), "--no-plot", "--quiet"]
    assert main(args + [a for s in sets for a in ("--set", s)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("decode step (ms)"))
    return [float(v) for v in line.split()[3:]]


def test_run_set_score_share_moves_the_decode_step(tmp_path, capsys):
    # DeepSeek-R1's 128K decode (full cache, then SnapStream's 32K): a two-hundredth of a tile's SRAM
    # cuts every cache into chunks whose partials must be merged, so both steps are slower
    shipped = _decode_step_ms(tmp_path, capsys)
    smaller = _decode_step_ms(tmp_path, capsys, "hardware.socket.pmu.score_share=0.005")
    assert all(s > b for s, b in zip(smaller, shipped, strict=True)), (shipped, smaller)
