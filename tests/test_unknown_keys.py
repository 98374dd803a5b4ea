"""A misspelt key is refused naming the field that was meant (``sn40l_sim.schema``): the closest
field of the mapping it sits in (the model class there, an attention family or a tagged workload
included), or the fields there are when none is close; a misspelt required key is named as the
typo, not as the field it left missing."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim import schema_keys
from sn40l_sim.commands import cli
from sn40l_sim.study.experiment import ExperimentSpec

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")


@pytest.mark.parametrize("edit, where", [
    (("seed: 7", "sed: 7"), "serving.sed: unknown key; did you mean 'seed'?"),
    # a required key misspelt is first the typo, then the field it left missing
    (("name: llama8b_node8", "nmae: llama8b_node8"), "nmae: unknown key; did you mean 'name'? (and 1 more"),
    (("{name: full, policy: full}", "{name: full, polcy: full}"), "policies[0].polcy: unknown key; did you mean "
                                                                  "'policy'?"),
    # the attention family the override's kind names (a subclass of the declared AttentionSpec)
    (("policies:", "model_overrides: {attention: {kind: gqa, headz: 32}}\npolicies:"),
     "model_overrides.attention.headz: unknown key; did you mean 'heads'?"),
    (("count: 48", "count: 48\n  rate_per_sec: 4"), "workload.rate_per_sec: unknown key; did you mean 'rate_per_s'?"),
    # nothing close: the fields there are
    (("seed: 7", "seed: 7\nslo: {p99: {max_s: 1 s, percentile: 99}}"), "slo.p99: unknown key (expected one of "
                                                                       "tpot, ttft)"),
])
def test_a_misspelt_key_names_the_field_meant(tmp_path, capsys, edit, where):
    assert edit[0] in EXPERIMENT
    path = tmp_path / "e.yaml"
    path.write_text(EXPERIMENT.replace(edit[0], edit[1], 1))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f": {where}" in err, err


def test_a_misspelt_hardware_field_names_the_field_meant(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text((REPO / "hw_configs" / "sn40l.yaml").read_text().replace("  lanes: 32", "  lanez: 32"))
    assert cli.main(["check", str(path)]) == 2
    assert "pcu.lanez: unknown key; did you mean 'lanes'?" in capsys.readouterr().err


def test_known_keys_follow_the_data_through_lists_tags_and_subclasses():
    data = {"workload": {"kind": "trace", "path": "t.csv"}, "policies": [{"name": "a"}],
            "model_overrides": {"attention": {"kind": "mla"}}}
    assert "cap_lengths" in schema_keys.known_keys(ExperimentSpec, data, ("workload", "trace"))
    assert "rate_per_s" in schema_keys.known_keys(ExperimentSpec, {"workload": {"kind": "poisson"}}, ("workload",))
    assert "prompt_fraction" in schema_keys.known_keys(ExperimentSpec, data, ("policies", 0))
    # a free-form mapping (checked later, against the model file) has no declared fields here
    assert schema_keys.known_keys(ExperimentSpec, data, ("model_overrides", "attention")) == []
