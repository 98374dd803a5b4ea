"""The assembly step: files named by an experiment (also through ``base:``), and errors of the
serving model located at the experiment field they come from."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from sn40l_sim.engine.run_graph import EngineOptions
from sn40l_sim.errors import InputError
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache import make_policy
from sn40l_sim.models.loader import load_model
from sn40l_sim.serving.batching import compiled_size
from sn40l_sim.study.assemble import SETUP_FIELDS, assemble, step_timer
from sn40l_sim.study.experiment import ExperimentSpec, load_experiment
from sn40l_sim.study.runner import simulate_experiment
from sn40l_sim.yamlio import set_value

REPO = Path(__file__).resolve().parents[2]


def test_paths_in_a_base_file_resolve_against_the_base_not_the_overlay(tmp_path):
    # the base experiment lives in base/ with its own hardware copy (8 sockets); the overlay in
    # overlay/ holds a decoy of the same relative name (16 sockets). The base's paths must win.
    (tmp_path / "base" / "hw").mkdir(parents=True)
    (tmp_path / "overlay" / "hw").mkdir(parents=True)
    for name in ("sn40l.yaml", "sn40l_node16.yaml", "sn40l_node8.yaml"):
        shutil.copy(REPO / "hw_configs" / name, tmp_path / "base" / "hw" / name)
    shutil.copy(REPO / "hw_configs" / "sn40l.yaml", tmp_path / "overlay" / "hw" / "sn40l.yaml")
    shutil.copy(REPO / "hw_configs" / "sn40l_node16.yaml", tmp_path / "overlay" / "hw" / "node.yaml")
    shutil.copy(REPO / "hw_configs" / "sn40l_node16.yaml", tmp_path / "overlay" / "hw" / "sn40l_node8.yaml")
    (tmp_path / "base" / "e.yaml").write_text(textwrap.dedent(f"""\
        kind: experiment
        name: base
        hardware: hw/sn40l_node8.yaml
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        policies: [{{name: full, policy: full}}]
        shape: {{prompt_len: 1024}}
        """))
    (tmp_path / "overlay" / "e.yaml").write_text("base: ../base/e.yaml\nname: overlay\n")
    asm = assemble(load_experiment(tmp_path / "overlay" / "e.yaml"))
    assert asm.experiment.spec.name == "overlay"
    assert asm.node.sockets == 8
    # a path the overlay writes itself resolves against the overlay
    (tmp_path / "overlay" / "e.yaml").write_text("base: ../base/e.yaml\nhardware: hw/node.yaml\n")
    assert assemble(load_experiment(tmp_path / "overlay" / "e.yaml")).node.sockets == 16


def test_every_setup_field_maps_to_a_field_of_the_experiment():
    for setup_field, experiment_fields in SETUP_FIELDS.items():
        for experiment_field in experiment_fields if isinstance(experiment_fields, tuple) else (experiment_fields,):
            root = experiment_field.split(".")[0]
            assert root in ExperimentSpec.model_fields, (setup_field, experiment_field)


def test_a_prompt_that_does_not_fit_names_the_field_the_file_has(tmp_path):
    """Without prompt_lens, the prompt comes from shape.prompt_len: the message names that field."""
    from sn40l_sim.errors import InfeasibleError

    text = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")
    asm = assemble(load_experiment(_write(tmp_path, text)))
    located = asm.locate(InfeasibleError("does not fit", field="prompt_len"))
    assert located.field == "shape.prompt_len" and located.line == text.splitlines().index(
        "shape: {prompt_len: 32768}") + 1
    table5 = (REPO / "experiments" / "snapstream_table5.yaml").read_text().replace("../", f"{REPO}/")
    asm = assemble(load_experiment(_write(tmp_path, table5)))
    assert asm.locate(InfeasibleError("does not fit", field="prompt_len")).field == "prompt_lens"


def _write(tmp_path, text):
    path = tmp_path / "e.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("change, field, text", [
    (("serving", "batch"), "serving.batch", "a batch of 4096 does not fit"),
    (("serving", "kv_transfer"), "serving.kv_transfer", "no host_link"),
])
def test_serving_errors_are_located_at_their_experiment_field(tmp_path, change, field, text):
    doc_text = (REPO / "experiments" / "llama8b_node8.yaml").read_text()
    doc_text = doc_text.replace("../hw_configs/", f"{REPO}/hw_configs/").replace("../graphs/", f"{REPO}/graphs/")
    if field == "serving.batch":
        doc_text = doc_text.replace("  batch: max", "  batch: 4096")
    else:
        # an 8-socket node without a host link cannot carry the cache between nodes that way
        (tmp_path / "node.yaml").write_text(f"kind: node\nname: no-host\nsocket: {REPO}/hw_configs/sn40l.yaml\n"
                                            "sockets: 8\ntopology: {kind: full_mesh}\n")
        doc_text = doc_text.replace(f"{REPO}/hw_configs/sn40l_node8.yaml", str(tmp_path / "node.yaml"))
        doc_text = doc_text.replace("  seed: 7", "  seed: 7\n  kv_transfer: host_link")
    path = tmp_path / "e.yaml"
    path.write_text(doc_text)
    with pytest.raises(InputError) as info:
        simulate_experiment(path)
    line = next(i for i, text_line in enumerate(doc_text.splitlines(), 1)
                if text_line.strip().startswith(change[-1] + ":") and i > 20)
    assert (info.value.file, info.value.field, info.value.line) == (str(path), field, line)
    assert text in info.value.message


def test_set_value_refuses_missing_sections_when_asked_not_to_create():
    data = {"socket": {"hbm": {"units_per_die": 2}}}
    set_value(data, ("socket", "hbm", "units_per_die"), 3, create=False)
    assert data["socket"]["hbm"]["units_per_die"] == 3
    with pytest.raises(ValueError, match="is not a section of the document"):
        set_value(data, ("socket", "cxl", "units_per_die"), 1, create=False)


def test_a_step_timer_without_engine_options_maps_for_the_engine_it_runs():
    # the timer runs the default engine (kernel looping on); its kernels were mapped as unlooped
    # calls, which made Llama-70B's decode step at a 4096-token cache 16.9 ms and at 4097 tokens 13.1
    node, model = load_hardware(REPO / "hw_configs" / "sn40l_node16.yaml"), load_model(REPO / "graphs" / "llama3_1_70b.yaml")
    plan = ParallelPlan(16)

    def timer(**engine):
        return step_timer(node, model, make_policy("full", {}), plan, plan, **engine)

    default = timer().decode_step(64, 4096)
    assert default.cycles == timer(engine=EngineOptions()).decode_step(64, 4096).cycles
    assert default.cycles <= timer().decode_step(64, 4097).cycles


def test_the_default_prefill_lengths_stop_at_the_models_context(tmp_path):
    # DeepSeek-R1 holds 163,840 positions: a 150,000-token prompt ran a 262,144-token graph (22.6 s
    # of prefill, its memory sized so) where the deployment's longest graph is the context (9.9 s)
    text = (REPO / "experiments" / "deepseek_tp16.yaml").read_text().replace("../", f"{REPO}/") \
        .replace("prompt_len: 131072", "prompt_len: 150000")
    (tmp_path / "e.yaml").write_text(text)
    asm = assemble(load_experiment(tmp_path / "e.yaml"))
    lens = asm.setup(asm.points[0]).prefill_lens
    assert lens[-1] == 163840 and lens[-2] == 131072 and 262144 not in lens
    assert compiled_size(150000, lens, "prompt length") == 163840
    assert compiled_size(100000, lens, "prompt length") == 131072   # shorter prompts: powers of two as before
    # lengths the experiment gives are its own, past the context or not
    (tmp_path / "e.yaml").write_text(text.replace("  max_new_tokens: 2048\n  # Speculative",
                                                  "  max_new_tokens: 2048\n  prefill_lens: [131072, 262144]\n  # Speculative"))
    asm = assemble(load_experiment(tmp_path / "e.yaml"))
    assert asm.setup(asm.points[0]).prefill_lens == (131072, 262144)


def test_python_callers_pass_a_path_or_a_point_name_and_bad_arguments_are_named(monkeypatch):
    """From a script: ``assemble`` takes the experiment's path as ``simulate_experiment`` does,
    ``setup`` a point's name; a wrong type is an InputError naming the argument, where each was an
    AttributeError deep inside ('str' object has no attribute 'spec', ... 'model_overrides', 'Point'
    object has no attribute 'graph_options')."""
    monkeypatch.chdir(REPO)
    path = "experiments/llama8b_node8.yaml"
    loaded = assemble(load_experiment(path))
    for given in (path, Path(path), REPO / path):
        asm = assemble(given)
        assert (asm.node, asm.model.name, asm.points) == (loaded.node, loaded.model.name, loaded.points)
    named = asm.setup("snapstream")
    assert named == asm.setup(asm.points[1]) and named.policy.name == "snapstream"
    with pytest.raises(InputError, match=r"^point: expected one of the experiment's points or its name "
                                         r"\('full', 'snapstream'\), got 'snap'$"):
        asm.setup("snap")
    with pytest.raises(InputError, match=r"^point: .* got 0$"):
        asm.setup(0)
    with pytest.raises(InputError, match=r"^setup: expected a PointSetup, such as asm.setup\(asm.points\[0\]\), "
                                         r"got Point$"):
        asm.step_timer(asm.points[0])
    with pytest.raises(InputError, match="^experiments/nope.yaml: file not found$"):
        assemble("experiments/nope.yaml")
    with pytest.raises(InputError, match="^experiment: expected the path of a kind: experiment file, got 5$"):
        simulate_experiment(5)
