"""``describe`` and ``check`` from the command line."""
from __future__ import annotations

import re

import pytest
from hw_test_helpers import HW

from sn40l_sim.commands import cli


def _describe(name, capsys):
    assert cli.main(["describe", str(HW / name)]) == 0
    return capsys.readouterr().out


def _row(text, label):
    line = next(line for line in text.splitlines() if line.startswith(label))
    return re.split(r"\s{2,}", line.strip())[1:]


def test_describe_socket_must_show(capsys):
    out = _describe("sn40l.yaml", capsys)
    assert _row(out, "PCUs") == ["1040", "1040"] and _row(out, "PMUs") == ["1040", "1040"]
    assert _row(out, "peak BF16")[0] == "638.98 TFLOPS"
    assert _row(out, "on-chip SRAM")[0] == "520.0 MiB"
    assert _row(out, "HBM capacity")[0] == "64.0 GiB"
    assert _row(out, "HBM bandwidth")[0] == "1.6384 TB/s"
    assert _row(out, "reserved HBM / DDR")[0] == "8.0 GiB / 16.0 GiB"


def test_describe_node16_must_show(capsys):
    out = _describe("sn40l_node16.yaml", capsys)
    assert _row(out, "sockets") == ["1", "16"]
    assert _row(out, "peak BF16")[1] == "10.224 PFLOPS"
    assert _row(out, "HBM capacity")[1] == "1.0 TiB"
    assert _row(out, "P2P bisection") == ["3.2 TB/s"]
    assert "full_mesh, 1 link(s)/pair, 120 pairs" in out


@pytest.mark.parametrize("sockets, kind, bisection", [(64, "ring", "100 GB/s"), (64, "hypercube", "1.6 TB/s"),
                                                      (35, "torus2d", "at most (heuristic cut)")])
def test_describe_a_swept_node_size(tmp_path, capsys, sockets, kind, bisection):
    path = tmp_path / "big.yaml"
    path.write_text(f"base: {HW / 'sn40l_node16.yaml'}\nname: big\nsockets: {sockets}\ntopology: {{kind: {kind}}}\n")
    assert cli.main(["describe", str(path)]) == 0
    assert bisection in _row(capsys.readouterr().out, "P2P bisection")[0]


def test_describe_sn10_has_no_hbm(capsys):
    out = _describe("sn10.yaml", capsys)
    assert _row(out, "PCUs")[0] == "640" and "HBM" not in out
    assert _row(out, "DDR capacity")[0] == "1.5 TiB" and _row(out, "reserved DDR")[0] == "16.0 GiB"
    assert float(_row(out, "peak BF16")[0].split()[0]) > 320


def test_describe_experiment_lists_its_files(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text(f"kind: experiment\nname: e\nhardware: {HW / 'sn40l_node16.yaml'}\nmodel: nowhere.yaml\n"
                    "policies: [{name: full, policy: full}]\nshape: {prompt_len: 8}\n")
    assert cli.main(["describe", str(path)]) == 0
    out = capsys.readouterr().out
    assert "sn40l_node16.yaml" in out and "(MISSING)" in out


def test_describe_unknown_kind_is_a_clean_error(tmp_path, capsys):
    path = tmp_path / "x.yaml"
    path.write_text("kind: spaceship\n")
    assert cli.main(["describe", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "x.yaml:1: kind:" in err


def test_describe_of_a_request_trace_reads_it_as_a_trace(capsys):
    # a trace is not YAML: describe said "expected a YAML mapping at the top level, got str", then
    # refused it; it is now read as a trace workload reads it (tests/serving/test_describe_trace.py)
    trace = HW.parent / "experiments" / "traces" / "azure_llm_2023_conv_10min.csv"
    assert cli.main(["describe", str(trace)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith(f"trace {trace}: 2867 requests over 600 s")


@pytest.mark.parametrize("command", ["describe", "check"])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--help"])
    assert info.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_check_all_shipped_hardware(capsys):
    files = sorted(str(p) for p in HW.glob("*.yaml"))
    assert cli.main(["check", *files]) == 0
    assert capsys.readouterr().out.count("ok: ") == len(files)


def test_a_node_file_named_as_socket_is_named_in_the_error(tmp_path, capsys):
    # sn40l_node8.yaml takes its kind from its base sn40l_node16.yaml: the file named is node8, whose
    # base says the kind, and the note said "this file is named as 'socket:'" of a file the node never named
    path = tmp_path / "n.yaml"
    path.write_text(f"kind: node\nname: n\nsocket: {HW / 'sn40l_node8.yaml'}\nsockets: 8\n"
                    "topology: {kind: full_mesh}\n")
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and (f"{HW / 'sn40l_node8.yaml'}: base: this is a node file through its base: "
                                     f"({HW / 'sn40l_node16.yaml'} says kind: node); expected one of ['socket']") in err
    assert f"({HW / 'sn40l_node8.yaml'} is named as 'socket:' in n.yaml, which needs a socket file)" in err


@pytest.mark.parametrize("name, text, kind", [
    ("results.json", '[{"name": "full", "decode_step_s": 0.08}]', "results of run or sweep (1 point"),
    ("results.csv", "name,experiment,kv_policy,batch\nfull,e,full,4\n", "results table of run or sweep (1 row"),
])
def test_describe_of_results_says_what_they_are(tmp_path, capsys, name, text, kind):
    # describe called a results.csv "a request trace" and a results.json "not a YAML mapping"
    (tmp_path / name).write_text(text)
    assert cli.main(["describe", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{name}: {kind}" in err and "not a file describe reads" in err
    assert "request trace" not in err


def test_describe_shows_the_calibrated_values_run_applies(tmp_path, capsys):
    # describe gave raw peaks only: the calibrated P2P efficiency, configuration load and HBM efficiency
    # could only be read in the YAML. The figures below are hw_configs/sn40l.yaml's calibrated values.
    out = _describe("sn40l.yaml", capsys)
    assert _row(out, "calibrated config load") == ["4.6737 GB/s"]
    assert _row(out, "calibrated sync latency") == ["2.968 us"]
    assert _row(out, "calibrated P2P efficiency") == ["0.5381"]
    assert _row(out, "calibrated transfer set-up") == ["115 ns"]
    assert _row(out, "calibrated systolic efficiency") == ["0.9792"]
    assert _row(out, "calibrated HBM efficiency") == ["0.9365"] and _row(out, "calibrated DDR efficiency") == ["0.8"]
    path = tmp_path / "slow_p2p.yaml"
    path.write_text(f"base: {HW / 'sn40l_node16.yaml'}\nname: slow\nsocket_overrides: {{calibrated: {{p2p_efficiency: 0.4}}}}\n")
    assert cli.main(["describe", str(path)]) == 0
    assert _row(capsys.readouterr().out, "calibrated P2P efficiency") == ["0.4"]
