"""The results declaration (sn40l_sim/report/fields.py) against what build_record produces, the
docs/design.md §5 contract, the generated docs/results.md, and a toy field that flows from one
declaration to the CSV, the printed table, plot labels, the goldens and the docs."""
from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_results import simulate  # noqa: E402

from sn40l_sim.engine.breakdown import USES  # noqa: E402
from sn40l_sim.report.fields import RESULTS  # noqa: E402
from sn40l_sim.report.plot_csv import axis_label  # noqa: E402
from sn40l_sim.report.registry import Field  # noqa: E402
from sn40l_sim.report.results import to_csv  # noqa: E402
from sn40l_sim.report.results_doc import render  # noqa: E402
from sn40l_sim.report.table import side_by_side  # noqa: E402
from sn40l_sim.report.table_rows import Row  # noqa: E402
from sn40l_sim.study.golden import key_results  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

#: docs/design.md §5 "Results": fields every record carries; never renamed or dropped
DESIGN_SECTION_5 = ("name", "model", "hardware", "kv_policy", "prefill_len", "kv_len", "batch", "max_batch",
                    "ttft_s", "tpot_s", "decode_step_s", "decode_tokens_per_s", "decode_tokens_per_s_reported",
                    "prefill_kernel_share", "memory")


@pytest.fixture(scope="module")
def records():
    return [simulate("full", {})[0], simulate("snapstream", {"budget": 8192})[0]]


def test_build_record_produces_exactly_the_declared_fields(records):
    for rec in records:
        assert RESULTS.mismatches(rec) == []
        assert set(rec) == {f.name for f in RESULTS if not f.sweep_only and not f.group}


def test_every_csv_column_is_a_declared_field(records):
    header = to_csv(records).splitlines()[0].split(",")
    assert [c for c in header if RESULTS.resolve(c) is None] == []
    assert RESULTS.resolve("memory.hbm.kv")[1] == {"tier": "hbm", "use": "kv"}
    assert RESULTS.resolve("latency.ttft_s.p99")[0].unit == "s"
    assert RESULTS.resolve("kv_occupancy.series") is None  # a list: JSON only


def test_design_fields_are_declared_produced_and_lead_the_csv(records):
    assert set(RESULTS.design) == set(DESIGN_SECTION_5)
    header = to_csv(records).splitlines()[0].split(",")
    scalars = [f for f in RESULTS.design if not RESULTS[f].keys]
    assert header[:len(scalars)] == scalars
    for name in DESIGN_SECTION_5:
        assert name in records[0] and RESULTS[name].description


def test_every_field_has_a_unit_string_and_a_one_line_description():
    for path, field in RESULTS.walk():
        assert field.description.endswith(".") and "\n" not in field.description, path
        assert isinstance(field.unit, str), path


def test_mismatches_name_an_undeclared_and_a_missing_field(records):
    rec = dict(records[0], toy_s=1.0)
    del rec["kv_len"]
    rec["throughput"] = dict(rec["throughput"], extra=1)
    assert RESULTS.mismatches(rec) == ["kv_len: declared but not produced", "toy_s: produced but not declared",
                                       "throughput.extra: produced but not declared"]
    declared = RESULTS.extended(Field("toy_s", "s", "A toy."))
    assert declared.mismatches(records[0]) == ["toy_s: declared but not produced"]


def test_a_name_or_position_declared_twice_is_refused():
    with pytest.raises(ValueError, match="name declared twice"):
        RESULTS.extended(Field("batch", "1", "Again."))
    with pytest.raises(ValueError, match="table position declared twice"):
        RESULTS.extended(Field("toy", "1", "A toy.", table=Row(RESULTS["batch"].table.at, "toy")))


def test_a_toy_field_declared_once_flows_everywhere(records):
    # adding a results field: one declaration (here) and one value in the record (build_record)
    toy = Field("toy_wait_s", "s", "A toy waiting time.", axis="toy wait", table=Row(145, "toy wait (ms)", ".1f", 1e3),
                csv=16, golden=True)
    fields = RESULTS.extended(toy)
    recs = [dict(r, toy_wait_s=0.25 * (i + 1)) for i, r in enumerate(records)]
    assert all(fields.mismatches(r) == [] for r in recs)
    text = to_csv(recs, fields)
    header = text.splitlines()[0].split(",")
    # after the §5 columns (position 16 > 15), before the rest
    assert header.index("toy_wait_s") == max(i for i, c in enumerate(header) if c.startswith("prefill_kernel_share.")) + 1
    assert [row["toy_wait_s"] for row in csv.DictReader(io.StringIO(text))] == ["0.25", "0.5"]
    lines = side_by_side(recs, fields).splitlines()
    labels = [line[:32].strip() for line in lines]
    assert labels.index("toy wait (ms)") == labels.index("decode step (ms)") + 1
    assert lines[labels.index("toy wait (ms)")].split()[-2:] == ["250.0", "500.0"]
    assert axis_label("toy_wait_s", fields) == ("toy wait (s)", 1.0)
    assert key_results(recs, fields)["full"]["toy_wait_s"] == 0.25
    assert "| `toy_wait_s` | s | A toy waiting time. | toy wait (ms) | 16 | yes |" in render(fields)
    assert "toy_wait_s" not in render()


def test_memory_rows_follow_the_tiers_the_record_holds(records):
    # a third tier, as a hardware file may declare, shows up in the table without a code change
    rec = dict(records[0])
    rec["memory"] = dict(rec["memory"], cxl={"weights": 0, "kv": 3 * 2**30, "activations": 0, "reserved": 0,
                                             "capacity": 512 * 2**30, "free": 509 * 2**30})
    labels = [line[:32].strip() for line in side_by_side([rec]).splitlines()
              if "/socket" in line and not line.startswith("prefill node")]   # the decode node's rows
    assert labels == ["HBM/socket weights (GiB)", "HBM/socket KV (GiB)", "HBM/socket activations (GiB)",
                      "HBM/socket reserved (GiB)", "HBM/socket free (GiB)", "DDR/socket used (GiB)",
                      "DDR/socket reserved (GiB)", "DDR/socket free (GiB)", "CXL/socket weights (GiB)",
                      "CXL/socket KV (GiB)", "CXL/socket activations (GiB)", "CXL/socket reserved (GiB)",
                      "CXL/socket free (GiB)"]
    cells = {line[:32].strip(): line.split()[-1] for line in side_by_side([rec]).splitlines()}
    assert (cells["CXL/socket KV (GiB)"], cells["CXL/socket free (GiB)"]) == ("3.00", "509.00")
    assert axis_label("memory.cxl.kv") == ("CXL per socket: kv (GiB)", pytest.approx(2.0**-30))


def test_committed_results_page_is_current():
    page = REPO / "docs" / "results.md"
    assert page.read_text(encoding="utf-8") == render(), \
        "docs/results.md is out of date: run python scripts/make_results_doc.py"
    for path, _ in RESULTS.walk():
        assert f"| `{path}` |" in render()


def test_the_page_script_checks_and_writes(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO / "scripts"))
    import make_results_doc

    monkeypatch.setattr(make_results_doc, "PAGE", tmp_path / "results.md")
    assert make_results_doc.main(["--check"]) == 1
    assert make_results_doc.main([]) == 0 and (tmp_path / "results.md").read_text() == render()
    assert make_results_doc.main(["--check"]) == 0


@pytest.mark.parametrize("name", ["kv_policies", "slo"])
def test_an_opt_in_group_is_produced_whole_or_not_at_all(records, name):
    group = RESULTS.in_group(name)
    assert group and RESULTS.groups == ("chunked_prefill", "kv_policies", "multi_model", "prefill_hardware",
                                        "prefix_cache", "rate_search", "slo", "speed", "trace")
    rec = dict(records[0])
    assert not set(group) & set(rec) and RESULTS.mismatches(rec) == []      # not asked for: absent
    rec[group[0]] = None
    assert RESULTS.mismatches(rec) == [f"{name}: declared but not produced" for name in group[1:]]
    page = render()
    assert all(f"`{RESULTS[name].pattern()}`" in page for name in group) and f"(opt-in: `{name}`)" in page


def test_the_page_says_what_brings_every_opt_in_group():
    # the groups an experiment's sections bring (study/experiment_rules.py) and the one it asks
    # for by name: a newcomer reads on the page how to get each, so a new group is named there
    from sn40l_sim.study.experiment_rules import AUTOMATIC_GROUPS

    header = render().split("| Field |")[0]
    assert set(RESULTS.groups) == set(AUTOMATIC_GROUPS) | {"kv_policies"}
    assert [g for g in RESULTS.groups if f"`{g}`" not in header] == []


def test_a_prefill_nodes_memory_is_shown_beside_the_decode_nodes():
    # a 1M-token prompt's activations and cache are on the prefill node (42 GiB of activations, 26
    # of them in DDR): the table showed only the decode node's rows, "DDR/socket used 0.00"
    gib = 2**30
    rec = {"name": "snap", "memory": {"hbm": {"weights": 40 * gib, "kv": 9 * gib, "activations": 0,
                                              "reserved": 8 * gib, "free": 7 * gib},
                                      "ddr": {"weights": 0, "kv": 0, "activations": 0, "free": 1520 * gib}},
           "memory_prefill_node": {"hbm": {"weights": 40 * gib, "kv": 0, "activations": 16 * gib,
                                           "reserved": 8 * gib, "free": 0},
                                   "ddr": {"weights": 0, "kv": 4 * gib, "activations": 26 * gib,
                                           "free": 1490 * gib}}}
    cells = {line[:44].strip(): line.split()[-1] for line in side_by_side([rec]).splitlines()}
    assert cells["DDR/socket used (GiB)"] == "0.00"
    assert cells["prefill node HBM/socket activations (GiB)"] == "16.000"
    assert cells["prefill node DDR/socket activations (GiB)"] == "26.000"
    assert cells["prefill node DDR/socket KV (GiB)"] == "4.00"
    assert cells["prefill node HBM/socket free (GiB)"] == "0.00"
    # co-located, a record has no prefill node and the table no such row
    colocated = dict(rec, memory_prefill_node=None)
    assert "prefill node" not in side_by_side([colocated])


def test_a_few_kib_of_memory_is_not_shown_as_zero():
    # Llama-3.1-405B's decode at batch 1 on 16 sockets holds 64 KiB of activations a socket
    rec = {"name": "full", "memory": {"hbm": {"weights": 47 * 2**30, "kv": 0, "activations": 65536,
                                              "reserved": 8 * 2**30, "free": 0}}}
    cells = {line[:32].strip(): line.split()[-1] for line in side_by_side([rec]).splitlines()}
    assert cells["HBM/socket activations (GiB)"] == "6.1e-05"
    assert (cells["HBM/socket KV (GiB)"], cells["HBM/socket free (GiB)"]) == ("0.00", "0.00")   # a zero stays
    # and docs/results.md says so, not that the memory rows keep their fixed decimals
    assert "6.1e-05" in render() and "fixed decimals" not in render()


def test_the_memory_uses_and_the_kv_occupancy_capacity_say_where_a_store_is_counted():
    # ArkVale's records hold memory.ddr.kv_offload, a use the memory field did not name, and their
    # kv_occupancy is counted against that store (2.83 TB a node at 70B, batch 256), not against
    # batch x kv_len x kv_bytes_per_token (0.69 TB) as for every other policy
    described = {path: field.description for path, field in RESULTS.walk()}
    assert all(use in described["memory.<tier>.<use>"] for use in USES)
    assert "kv_offload" in described["kv_occupancy.capacity_bytes_per_node"]
    assert "batch x kv_len x kv_bytes_per_token" in described["kv_occupancy.capacity_bytes_per_node"]


def test_a_prefill_nodes_rows_add_up_to_its_capacity_when_it_reserves_other_than_the_decode_node():
    # a prefill_hardware reserving 54 GiB of its 64: the prefill rows had no reserved row and added
    # up to 10 GiB, with nothing on screen saying why
    gib = 2**30
    tier = {"weights": 2 * gib, "kv": 1 * gib, "activations": 3 * gib, "reserved": 8 * gib, "free": 50 * gib}
    prefill = {"weights": 2 * gib, "kv": 1 * gib, "activations": 3 * gib, "reserved": 54 * gib, "free": 4 * gib}
    rec = {"name": "p", "memory": {"hbm": tier}, "memory_prefill_node": {"hbm": prefill}}
    cells = {line[:44].strip(): float(line.split()[-1]) for line in side_by_side([rec]).splitlines()
             if line.startswith("prefill node HBM/socket")}
    assert cells["prefill node HBM/socket reserved (GiB)"] == 54.0
    assert sum(cells.values()) == 64.0


def test_the_page_script_renders_its_own_checkouts_declaration(tmp_path):
    # an installed sn40l_sim of another checkout (here a decoy ahead on the path) must not be the
    # one rendered: --check then judged this checkout's page against the other's fields
    decoy = tmp_path / "sn40l_sim" / "report"
    decoy.mkdir(parents=True)
    (decoy.parent / "__init__.py").write_text("")
    (decoy / "__init__.py").write_text("")
    (decoy / "results_doc.py").write_text("def render():\n    return 'another checkout'\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "make_results_doc.py"), "--check"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
