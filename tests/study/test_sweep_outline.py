"""``describe`` of an experiment with a ``sweep:`` section: every axis with its values, the runs,
the section's settings and each file a sweep point names (it listed only the base's files and the
axes' names, so a model axis's second model was nowhere)."""
from __future__ import annotations

from sweep_helpers import REPO, write_experiment

from sn40l_sim.commands.cli import main
from sn40l_sim.study.sweep.load import load_sweep
from sn40l_sim.study.sweep.outline import shown_values, sweep_outline


def _describe(path, capsys) -> list[str]:
    assert main(["describe", str(path)]) == 0
    return capsys.readouterr().out.splitlines()


def test_describe_lists_each_axis_with_its_values_and_the_runs(capsys):
    lines = _describe(REPO / "experiments" / "deepseek_sweep.yaml", capsys)
    assert "  sweep      grid over 2 axis(es): 50 sweep point(s), 100 run(s) (the lines above are its base)" in lines
    assert "    serving.batch     10 values: 1, 2, 4, 8, 16, 32, 64, 128, 256, 512" in lines
    assert "    shape.prompt_len  5 values: 8192, 16384, 32768, 65536, 131072" in lines
    assert "    objectives: maximise decode_tokens_per_s, minimise tpot_s" in lines
    assert any(line.startswith("    infeasible: skip") for line in lines)


def test_describe_lists_the_files_the_sweep_points_name(tmp_path, capsys):
    other = REPO / "graphs" / "llama3_1_70b.yaml"
    hw16 = REPO / "hw_configs" / "sn40l_node16.yaml"
    path = write_experiment(tmp_path, f"mode: zip\naxes:\n  model: [{REPO / 'graphs/llama3_1_8b.yaml'}, {other}]\n"
                                      f"  hardware: [{REPO / 'hw_configs/sn40l_node8.yaml'}, {hw16}]\n"
                                      "  hbm: {path: hardware.socket.memory.hbm.bytes_per_s_per_unit, "
                                      "values: [409.6 GB/s, 819.2 GB/s]}\n")
    lines = _describe(path, capsys)
    assert "  sweep      zip over 3 axis(es): 2 sweep point(s), 4 run(s) (the lines above are its base)" in lines
    assert "    hbm (hardware.socket.memory.hbm.bytes_per_s_per_unit)  2 values: 409.6 GB/s, 819.2 GB/s" in lines
    assert f"  model      {other}  ->  {other}  (a sweep point's)" in lines
    assert f"  hardware   {hw16}  ->  {hw16}  (a sweep point's)" in lines
    assert f"                      python -m sn40l_sim describe {other}" in lines   # described like the base's
    # the base's own files are not listed twice
    assert sum(1 for line in lines if "llama3_1_8b.yaml  ->" in line) == 1


def test_a_section_that_does_not_load_is_named_not_raised(tmp_path, capsys):
    path = write_experiment(tmp_path, "axes:\n  serving.batchh: [1, 2]\n")
    lines = _describe(path, capsys)
    assert "  sweep      over serving.batchh (the lines above are its base; the section does not load: check says " \
           "why)" in lines


def test_outline_counts_the_runs_of_every_point_and_elides_long_axes(tmp_path):
    path = write_experiment(tmp_path, "axes:\n  serving.batch: {start: 1, stop: 20, num: 20}\n")
    sweep = load_sweep(path)
    outline = sweep_outline(sweep)
    assert (outline.runs, outline.invalid) == (40, 0)   # two policies at each of 20 points
    assert shown_values(sweep.axes[0]) == "20 values: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ..., 20"
