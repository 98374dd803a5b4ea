"""Which results fields a reference measurement may name (study/reference_schema.py): every one it
accepts has a value in the steps-only evaluation validate and calibrate simulate."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.errors import InputError
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.study.evaluation import LoadedExperiments
from sn40l_sim.study.reference_schema import Measurement, check_quantity

REPO = Path(__file__).resolve().parents[2]


def test_every_field_a_measurement_may_name_has_a_value_in_a_steps_only_evaluation():
    # ttft_s was accepted by `check` and refused by `validate` only after its simulations; a field
    # of an opt-in group (kv_policies) has a value when the experiment asks for the group
    # the SnapStream point alone (its record is the one of a run of both points)
    (record,) = LoadedExperiments().records(REPO / "experiments" / "deepseek_tp16.yaml", serve=False,
                                            reads=("snapstream",))
    accepted = []
    for field in RESULTS.fields:
        try:
            check_quantity(Measurement(id="m", quantity=field.name, key="k" if field.keys else None, source="s",
                                       experiment="e.yaml", point="p", calibration=False))
        except InputError:
            continue
        accepted.append(field.name)
        if not field.group and not field.sweep_only:
            assert record.get(field.name) is not None, field.name
    assert {"decode_step_s", "prefill_kernel_share", "max_batch", "decode_roofline_fraction"} <= set(accepted)
    assert not {"ttft_s", "tpot_s", "goodput_tokens_per_s", "max_rate_per_s", "prefill_policy_slowdown"} & set(accepted)
