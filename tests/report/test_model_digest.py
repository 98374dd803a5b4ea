"""A record's ``model_digest`` names the model as simulated, not the path its kernel template was
found by: the same model file named from another working folder compared as another model."""
from __future__ import annotations

import json
from pathlib import Path

from sn40l_sim.commands.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = """kind: experiment
name: digest_paths
hardware: ../hw_configs/sn40l_node16.yaml
model: ../graphs/{model}
parallel: {{prefill: {{tp: 16}}, decode: {{tp: 16}}}}
policies: [{{name: full, policy: full}}]
shape: {{prompt_len: 1024, batch: 1, max_new_tokens: 4}}
workload: {{kind: fixed, count: 1, output_len: 4}}
serving: {{batch: 1, max_new_tokens: 4}}
"""


def _project_copy(tmp_path: Path, name: str, template_edit: tuple[str, str] | None = None) -> Path:
    """A folder laid out as the project (experiments/, graphs/, hw_configs/) holding one experiment."""
    root = tmp_path / name
    for folder, files in (("hw_configs", ("sn40l.yaml", "sn40l_node16.yaml")),
                          ("graphs", ("llama3_1_8b.yaml", "kernels_llama.yaml"))):
        (root / folder).mkdir(parents=True)
        for file in files:
            text = (ROOT / folder / file).read_text()
            if template_edit is not None and file == "kernels_llama.yaml":
                assert template_edit[0] in text
                text = text.replace(*template_edit)
            (root / folder / file).write_text(text)
    (root / "experiments").mkdir()
    (root / "experiments" / "exp.yaml").write_text(EXPERIMENT.format(model="llama3_1_8b.yaml"))
    return root


def _model_digest(out: Path) -> str:
    return json.loads((out / "results.json").read_text())[0]["model_digest"]


def test_the_model_digest_does_not_depend_on_the_working_folder_or_the_paths_spelling(tmp_path, monkeypatch):
    root = _project_copy(tmp_path, "project")
    monkeypatch.chdir(root)
    assert main(["run", "experiments/exp.yaml", "--out", str(tmp_path / "a"), "--no-plot", "--quiet"]) == 0
    monkeypatch.chdir(root / "experiments")
    assert main(["run", "exp.yaml", "--out", str(tmp_path / "b"), "--no-plot", "--quiet"]) == 0
    assert main(["run", str(root / "experiments" / "exp.yaml"), "--out", str(tmp_path / "c"), "--no-plot",
                 "--quiet"]) == 0
    # the template was named graphs/kernels_llama.yaml, kernels_llama.yaml's folder as ../graphs/... and
    # as an absolute path: three digests for one model, and compare called the runs other models
    assert _model_digest(tmp_path / "a") == _model_digest(tmp_path / "b") == _model_digest(tmp_path / "c")


def test_an_edited_kernel_template_is_another_model(tmp_path, monkeypatch):
    # the template is part of the model as simulated: an edit to it under its own name changes the digest
    for name, edit in (("shipped", None), ("edited", ("block_q: 8192", "block_q: 4096"))):
        root = _project_copy(tmp_path, name, edit)
        monkeypatch.chdir(root)
        assert main(["run", "experiments/exp.yaml", "--out", str(tmp_path / f"out_{name}"), "--no-plot",
                     "--quiet"]) == 0
    assert _model_digest(tmp_path / "out_shipped") != _model_digest(tmp_path / "out_edited")
