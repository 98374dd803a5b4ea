"""A template's dataflow check (sn40l_sim.models.template.check_dataflow) runs once per template,
attention family and model fields in a process: a sweep loads its model again for every run, and
the test suite checked the same few dozen models some 1,700 times (~7 CPU-s). A model that differs
in any field, another family under the same kind, or another template is checked again; a check
that fails is never kept, so a broken template is refused every time it is loaded."""
from __future__ import annotations

import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.models import template as template_module
from sn40l_sim.models.families import FAMILIES
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.template import GRAPHS_DIR, check_dataflow, template_for


@pytest.fixture
def checks(monkeypatch) -> list[str]:
    """The phases :func:`check_dataflow` checks from here on, starting from an empty memo."""
    monkeypatch.setattr(template_module, "_DATAFLOW_PASSED", {})
    seen: list[str] = []
    real = template_module.dataflow_problem

    def counted(template, model, phase):
        seen.append(phase)
        return real(template, model, phase)

    monkeypatch.setattr(template_module, "dataflow_problem", counted)
    return seen


def test_an_equal_model_is_checked_once_and_a_changed_one_again(checks):
    model = load_model(GRAPHS_DIR / "llama3_1_8b.yaml")   # loading checks it
    assert checks == ["prefill", "decode"]
    template = template_for(model)
    check_dataflow(template, None, model)
    assert checks == ["prefill", "decode"]
    check_dataflow(template, None, load_model(GRAPHS_DIR / "llama3_1_8b.yaml"))   # loaded again: equal
    assert checks == ["prefill", "decode"]
    check_dataflow(template, None, model.model_copy(update={"max_context": 4096}))
    assert checks == ["prefill", "decode"] * 2
    check_dataflow(template.model_copy(), None, model)                            # another template
    assert checks == ["prefill", "decode"] * 3


def test_another_family_under_the_same_kind_is_checked_again(checks, monkeypatch):
    model = load_model(GRAPHS_DIR / "llama3_1_8b.yaml")
    template = template_for(model)
    check_dataflow(template, None, model)
    monkeypatch.setitem(FAMILIES, model.attention.kind, type("Other", (FAMILIES[model.attention.kind],), {}))
    check_dataflow(template, None, model)
    assert checks == ["prefill", "decode"] * 2


def test_a_failing_check_is_refused_each_time_and_never_kept(checks, monkeypatch):
    model = load_model(GRAPHS_DIR / "llama3_1_8b.yaml")
    template = template_for(model)
    template_module._DATAFLOW_PASSED.clear()   # loading it passed (and kept) the real checks
    checks.clear()
    monkeypatch.setattr(template_module, "unread_weight", lambda t, m, phase: (("decode", "kernels"), "broken"))
    for _ in range(2):
        with pytest.raises(InputError, match="decode.kernels: broken"):
            check_dataflow(template, None, model)
    assert checks == ["prefill"] * 2 and template_module._DATAFLOW_PASSED == {}
    monkeypatch.undo()   # the real checks, and the memo as the process had it
    check_dataflow(template, None, model)
