"""What a script or notebook passes to the study layer's entry points (docs/notebooks.md, "From
Python: the entry points"): a path where an Experiment is taken, a point's name where a Point is,
and a wrong argument named in an InputError, never an AttributeError or TypeError deep inside."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.study.assemble import assemble
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.mapping import build_phase
from sn40l_sim.study.runner import simulate_assembly

REPO = Path(__file__).resolve().parents[2]
EXP = "experiments/llama8b_node8.yaml"


@pytest.fixture(autouse=True)
def _at_the_repository(monkeypatch):
    monkeypatch.chdir(REPO)   # the experiments' paths, as the docs write them


def test_simulate_assembly_takes_point_names_and_names_a_wrong_first_argument():
    asm = assemble(EXP)
    by_name = simulate_assembly(asm, only=["snapstream"], serve=False)
    by_point = simulate_assembly(asm, only=[asm.points[1]], serve=False)
    assert [r["name"] for r in by_name] == ["snapstream"]
    assert by_name[0]["max_batch"] == by_point[0]["max_batch"] == 256
    assert by_name[0]["decode_step_s"] == by_point[0]["decode_step_s"] > 0
    with pytest.raises(InputError, match=r"^point: expected one of the experiment's points or its name "
                                         r"\('full', 'snapstream'\), got 'snap'$"):
        simulate_assembly(asm, only=["snap"], serve=False)
    for wrong, kind in ((load_experiment(EXP), "Experiment"), (EXP, "str")):
        with pytest.raises(InputError, match=rf"^asm: expected an Assembly \(assemble\(experiment\)\), got {kind}: "
                                             "simulate_experiment takes an experiment or its path$"):
            simulate_assembly(wrong, serve=False)


def test_build_phase_takes_a_path_and_names_a_bad_phase_or_batch():
    from_path = build_phase(EXP, "decode", batch=8)
    loaded = build_phase(load_experiment(EXP), "decode", batch=8)
    assert (from_path.batch, from_path.cache_len, from_path.memory) == (loaded.batch, loaded.cache_len, loaded.memory)
    assert [k.name for k in from_path.graph.kernels()] == [k.name for k in loaded.graph.kernels()]
    with pytest.raises(InputError, match=r"^phase: expected 'prefill' or 'decode', got 'decod'$"):
        build_phase(EXP, "decod")
    for batch in ("8", 8.0, True):
        with pytest.raises(InputError, match=rf"^--batch must be a positive integer, got {batch!r}$"):
            build_phase(EXP, "decode", batch=batch)


def test_assemble_and_simulate_points_name_a_node_or_model_of_the_wrong_type():
    """simulate_points(exp, node.socket, model) raised an AttributeError from pydantic, and a path
    given for the node another from deep inside: the node and model are named, as the experiment is."""
    from sn40l_sim.study.runner import simulate_points
    asm = assemble(EXP)
    for node, model, named in ((asm.node.socket, asm.model, "node: expected a NodeSpec (load_hardware(path)) or None, got SocketSpec"),
                               ("hw_configs/sn40l_node8.yaml", None, "node: expected a NodeSpec (load_hardware(path)) or None, got str"),
                               (asm.node, asm.node, "model: expected a ModelSpec (load_model(path)) or None, got NodeSpec")):
        with pytest.raises(InputError, match=rf"^{re.escape(named)}$"):
            simulate_points(EXP, node, model, serve=False)
        with pytest.raises(InputError, match=rf"^{re.escape(named)}$"):
            assemble(EXP, node=node, model=model)


def test_simulate_assembly_names_a_single_point_given_for_its_list():
    """only="full" was iterated letter by letter and refused as "got 'f'"."""
    asm = assemble(EXP)
    for wrong in ("full", asm.points[0]):
        with pytest.raises(InputError, match=r"^only: expected a list of points or their names, such as \['full'\], got "):
            simulate_assembly(asm, only=wrong, serve=False)


def test_map_phase_names_what_it_takes():
    """map_phase(path), the step build_phase takes skipped, raised "'str' object has no attribute
    'experiment'"."""
    from sn40l_sim.study.mapping import map_phase
    for wrong, kind in ((EXP, "str"), (load_experiment(EXP), "Experiment"), (None, "NoneType")):
        with pytest.raises(InputError, match=rf"^built: expected a PhaseGraph \(build_phase\(experiment, phase\)\), got {kind}$"):
            map_phase(wrong)


def test_an_assemblys_point_methods_take_a_points_name_as_setup_does():
    """asm.setup("snapstream") takes a name, but asm.policy("snapstream"), asm.model_for(...) and
    asm.requests(...)(slots) raised an AttributeError ('str' object has no attribute 'policy')."""
    asm = assemble(EXP)
    point = asm.points[1]
    assert asm.policy("snapstream") == asm.policy(point)
    assert asm.model_for("snapstream") is asm.model_for(point)
    assert asm.requests("snapstream")(4) == asm.requests(point)(4)
    for method in (asm.policy, asm.model_for, asm.requests):
        with pytest.raises(InputError, match=r"^point: expected one of the experiment's points or its name"):
            method("snap")
