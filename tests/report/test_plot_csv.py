"""``python -m sn40l_sim plot``: labels with units, one series per hue value with sorted x, rows that
cannot be told apart refused, unknown columns reported with the available ones (exit 2)."""
from __future__ import annotations

import csv
import itertools
from pathlib import Path

import matplotlib
import matplotlib.axes
import pytest

matplotlib.use("Agg")  # noqa: E305

from sn40l_sim.commands.cli import main  # noqa: E402
from sn40l_sim.errors import InputError  # noqa: E402
from sn40l_sim.report import plot_csv as plot_module  # noqa: E402
from sn40l_sim.report.plot_csv import axis_label, plot_csv  # noqa: E402

ROWS = [  # deliberately out of order in x
    {"experiment": "demo", "kv_policy": "full", "prefill_len": 4096, "batch": 4, "decode_tokens_per_s": 40.0,
     "memory.hbm.kv": 2 * 2**30},
    {"experiment": "demo", "kv_policy": "full", "prefill_len": 4096, "batch": 1, "decode_tokens_per_s": 10.0,
     "memory.hbm.kv": 2**29},
    {"experiment": "demo", "kv_policy": "snapstream", "prefill_len": 4096, "batch": 1, "decode_tokens_per_s": 11.0,
     "memory.hbm.kv": 2**28},
    {"experiment": "demo", "kv_policy": "snapstream", "prefill_len": 4096, "batch": 4, "decode_tokens_per_s": 44.0,
     "memory.hbm.kv": 2**30},
    {"experiment": "demo", "kv_policy": "snapstream", "prefill_len": 8192, "batch": 4, "decode_tokens_per_s": 42.0,
     "memory.hbm.kv": 2**30},
]


def write_csv(tmp_path: Path, rows=ROWS) -> Path:
    path = tmp_path / "results.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize("column, label, scale", [
    ("decode_tokens_per_s", "decode tokens/s (raw)", 1.0),
    ("ttft_s", "TTFT (s)", 1.0),
    ("prefill_len", "prompt length (tokens)", 1.0),
    ("memory.hbm.weights", "HBM per socket: weights (GiB)", 2.0**-30),
    ("latency.tpot_s.p99", "TPOT p99 (s)", 1.0),
    ("sweep.hardware.socket.memory.hbm.bytes_per_s_per_unit", "HBM bandwidth per module/channel (GB/s)", 1e-9),
    ("sweep.hardware.socket.memory.cxl.latency_s", "CXL latency (s)", 1.0),
    ("memory.cxl.kv", "CXL per socket: kv (GiB)", 2.0**-30),
    # a swept size in bytes is plotted in GiB, 2**30 bytes (not 1e9)
    ("sweep.hardware.socket.memory.hbm.reserved_bytes", "HBM reserved by the runtime (GiB)", 2.0**-30),
    ("sweep.serving.batch", "decode batch (sequences per node)", 1.0),
    ("throughput.output_tokens_per_s", "served output tokens/s", 1.0),
    ("prefill_kernel_share.mha", "share of a prefill MoE layer: mha", 1.0),
    ("some_new_field", "some_new_field", 1.0),
    # a policy's parameters are token counts, but for ArkVale's page count and recall fraction
    ("kv_policy_params.budget", "KV policy budget (tokens)", 1.0),
    ("kv_policy_params.pages", "KV policy pages", 1.0),   # not "(tokens)"; the name says the unit
    ("kv_policy_params.recall_fraction", "KV policy recall_fraction", 1.0),
])
def test_labels_carry_units(column, label, scale):
    assert axis_label(column) == (label, pytest.approx(scale))


def test_one_sorted_series_per_hue_value(tmp_path, monkeypatch):
    drawn = []
    original = matplotlib.axes.Axes.plot

    def spy(self, xs, ys, *args, **kwargs):
        drawn.append((kwargs.get("label"), list(xs), list(ys)))
        return original(self, xs, ys, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    path = write_csv(tmp_path)
    out = plot_csv(path, x="batch", y="decode_tokens_per_s", hue=["kv_policy"], where={"prefill_len": "4096"},
                   out=tmp_path / "p.svg")
    assert out.stat().st_size > 0 and out.read_text().lstrip().startswith("<?xml")
    assert drawn == [("full", [1.0, 4.0], [10.0, 40.0]), ("snapstream", [1.0, 4.0], [11.0, 44.0])]


def test_sizes_are_plotted_in_gib_and_the_title_is_the_experiment(tmp_path, monkeypatch):
    titles, ys = [], []
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title", lambda self, t, *a, **k: titles.append(t))
    original = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot",
                        lambda self, x, y, *a, **k: (ys.append(list(y)), original(self, x, y, *a, **k))[1])
    plot_csv(write_csv(tmp_path), x="batch", y="memory.hbm.kv", hue=["kv_policy", "prefill_len"])
    assert titles == ["demo"]
    assert ys == [[0.5, 2.0], [0.25, 1.0], [1.0]]


@pytest.mark.parametrize("kind", ["line", "bar", "scatter"])
def test_hue_values_in_the_legend_are_in_the_unit_its_title_names(tmp_path, monkeypatch, kind):
    """A sweep's bandwidth axis as hue: the legend's title says GB/s, so its entries are 25 and 50,
    not the CSV's bytes/s."""
    legends = []
    original = matplotlib.axes.Axes.legend

    def spy(self, *args, **kwargs):
        legend = original(self, *args, **kwargs)
        legends.append((legend.get_title().get_text(), [t.get_text() for t in legend.get_texts()]))
        return legend

    monkeypatch.setattr(matplotlib.axes.Axes, "legend", spy)
    axis = "sweep.hardware.socket.p2p.bytes_per_s_per_port"
    rows = [{"experiment": "demo", "kv_policy": policy, "batch": batch, axis: f"{rate}.0",
             "decode_tokens_per_s": 10.0 * batch} for policy in ("full", "snapstream")
            for rate in (25_000_000_000, 50_000_000_000) for batch in (1, 4)]
    plot_csv(write_csv(tmp_path, rows), x="batch", y="decode_tokens_per_s", hue=["kv_policy", axis], kind=kind)
    assert legends == [("KV policy, P2P bandwidth per port (GB/s)",
                        ["full, 25", "full, 50", "snapstream, 25", "snapstream, 50"])]


def test_rows_sharing_an_x_are_refused_with_the_column_that_differs(tmp_path):
    with pytest.raises(InputError) as info:
        plot_csv(write_csv(tmp_path), x="batch", y="decode_tokens_per_s", hue=["kv_policy"])
    assert info.value.field == "--x"
    assert "2 rows have batch=4 (kv_policy=snapstream)" in info.value.message
    assert "prefill_len" in info.value.message


def test_bar_plot_and_default_output_name(tmp_path):
    path = write_csv(tmp_path)
    out = plot_csv(path, x="kv_policy", y="decode_tokens_per_s", hue=["prefill_len"], where={"batch": "4"},
                   kind="bar")
    assert out == tmp_path / "decode_tokens_per_s_vs_kv_policy.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_is_byte_identical_across_runs(tmp_path):
    path = write_csv(tmp_path)
    a = plot_csv(path, x="batch", y="decode_tokens_per_s", hue=["kv_policy", "prefill_len"], out=tmp_path / "a.png")
    b = plot_csv(path, x="batch", y="decode_tokens_per_s", hue=["kv_policy", "prefill_len"], out=tmp_path / "b.png")
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize("argv, field, words", [
    (["--x", "batch", "--y", "tpot_s"], "--y", "unknown column 'tpot_s'; the file has: experiment, kv_policy"),
    # the likely column first: the list after it has some 150 names in a results.csv
    (["--x", "bacth", "--y", "decode_tokens_per_s"], "--x", "unknown column 'bacth' (did you mean 'batch'?)"),
    (["--x", "batch", "--y", "decode_tokens_per_s", "--hue", "policy"], "--hue",
     "unknown column 'policy' (did you mean 'kv_policy'?); the file has: experiment, kv_policy"),
    (["--x", "batch", "--y", "kv_policy"], "--y", "no numeric values"),
    # a text x has no place on a scatter plot's number line: the refusal named --y, whose numbers were fine
    (["--x", "kv_policy", "--y", "decode_tokens_per_s", "--kind", "scatter"], "--x",
     "column 'kv_policy' has no numeric values in the selected rows: a scatter plot places points by their numbers"),
    (["--x", "batch", "--y", "decode_tokens_per_s", "--hue", "kv_policy", "prefill_len", "--where", "batch=64"],
     "--where", "no row matches"),
    # which value the column does hold: a typo or a batch the sweep left out is seen at once
    (["--x", "batch", "--y", "decode_tokens_per_s", "--where", "kv_policy=ful"], "--where",
     "no row matches {'kv_policy': 'ful'}: kv_policy is never 'ful' in the rows selected (it holds 'full', "
     "'snapstream')"),
    (["--x", "batch", "--y", "decode_tokens_per_s", "--out", "plot.jpg"], "--out", ".png, .svg or .pdf"),
    # the later value replaced the earlier: half of the rows asked for were plotted, unsaid
    (["--x", "batch", "--y", "decode_tokens_per_s", "--where", "kv_policy=full", "--where", "kv_policy=snapstream"],
     "--where", "column 'kv_policy' is given twice ('full' and 'snapstream')"),
])
def test_cli_errors_are_one_line_exit_2(tmp_path, capsys, argv, field, words):
    path = write_csv(tmp_path)
    assert main(["plot", str(path)] + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{field}: " in err[0] and words in err[0], err


@pytest.mark.parametrize("argv, field", [
    (["--x", "batch", "--y", "decode_tokens_per_s", "--hue", "kv_policy", "prefill_len", "--logy"], "--logy"),
    (["--x", "batch", "--y", "decode_tokens_per_s", "--hue", "kv_policy", "prefill_len", "--logx"], "--logx"),
    (["--x", "batch", "--y", "decode_tokens_per_s", "--hue", "kv_policy", "prefill_len", "--logx",
      "--kind", "scatter"], "--logx"),
])
def test_a_log_axis_refuses_values_it_cannot_show(tmp_path, capsys, argv, field):
    # matplotlib masks values <= 0 on a log axis: the point would vanish from the plot unsaid
    rows = [dict(r) for r in ROWS]
    rows[1]["decode_tokens_per_s" if field == "--logy" else "batch"] = 0
    path = write_csv(tmp_path, rows)
    assert main(["plot", str(path), "--out", str(tmp_path / "x.png")] + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    column = "decode_tokens_per_s" if field == "--logy" else "batch"
    assert len(err) == 1 and f"{field}: " in err[0] and f"{column} = 0 in 1 selected row" in err[0], err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("name", ["results.json", "renamed.csv"])
def test_a_results_json_is_told_that_plot_reads_a_results_csv(tmp_path, capsys, name):
    # by its suffix, or by its content when a results.json was given another name
    path = tmp_path / name
    path.write_text('[\n  {"name": "full", "decode_step_s": 0.088}\n]\n')
    assert main(["plot", str(path), "--x", "name", "--y", "decode_step_s"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}: ") and "plot reads a results.csv" in err[0], err
    assert "unknown column" not in err[0]


def test_cli_missing_file_and_success(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "none.csv"), "--x", "a", "--y", "b"]) == 2
    assert "file not found" in capsys.readouterr().err
    path = write_csv(tmp_path)
    assert main(["plot", str(path), "--x", "batch", "--y", "decode_tokens_per_s", "--hue", "kv_policy",
                 "prefill_len", "--logx", "--logy", "--out", str(tmp_path / "x.png")]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'x.png'}"
    assert plot_module.read_csv(path)[0][:2] == ["experiment", "kv_policy"]


def test_hue_columns_given_with_repeated_options_all_pick_the_series(tmp_path, capsys):
    # `--hue kv_policy --hue prefill_len` kept only prefill_len: two rows at batch 4 and 4096 tokens
    # (full and snapstream) were then refused as one series; both columns tell them apart
    path = write_csv(tmp_path)
    argv = ["plot", str(path), "--x", "batch", "--y", "decode_tokens_per_s", "--out", str(tmp_path / "x.png")]
    assert main(argv + ["--hue", "kv_policy", "--hue", "prefill_len"]) == 0
    assert main(argv + ["--hue", "prefill_len"]) == 2
    capsys.readouterr()
    assert main(argv + ["--hue", "kv_policy", "prefill_len", "--hue", "kv_policy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --hue: column 'kv_policy' is given twice; expected each column once"], err


def test_scatter_draws_unjoined_labelled_points_sharing_an_x(tmp_path, monkeypatch):
    drawn, notes = [], []
    original = matplotlib.axes.Axes.scatter

    def spy(self, xs, ys, **kwargs):
        drawn.append((kwargs["label"], list(xs), list(ys)))
        return original(self, xs, ys, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "scatter", spy)
    real_save = plot_module.save_figure
    monkeypatch.setattr(plot_module, "save_figure", lambda fig, path, **kw: notes.append(fig) or
                        real_save(fig, path, **kw))
    out = plot_csv(write_csv(tmp_path), x="batch", y="decode_tokens_per_s", hue=["prefill_len"], kind="scatter",
                   label="kv_policy")
    assert out.is_file()
    # the 4096 series holds two rows at batch 4 and two at batch 1: a scatter keeps all four
    assert drawn == [("4096", [4.0, 1.0, 1.0, 4.0], [40.0, 10.0, 11.0, 44.0]), ("8192", [4.0], [42.0])]
    # each point named beside it (report/figure.py's place_labels keeps the names apart)
    (ax,) = notes[0].axes
    assert sorted((t.get_text(), tuple(t.xy)) for t in ax.texts) == [
        ("full", (1.0, 10.0)), ("full", (4.0, 40.0)), ("snapstream", (1.0, 11.0)), ("snapstream", (4.0, 42.0)),
        ("snapstream", (4.0, 44.0))]
    with pytest.raises(InputError, match="add --kind scatter"):
        plot_csv(write_csv(tmp_path), x="batch", y="decode_tokens_per_s", label="kv_policy")


@pytest.mark.parametrize("text, line, words", [
    ("a,b\n1,2\n3\n", 3, "expected 2 values (one per column of the header), got 1"),
    ("a,b\n1,2,3\n4,5\n", 2, "expected 2 values (one per column of the header), got 3"),
    ('a,b\n"1,\n5",2\n\n3,4,5\n', 5, "got 3"),   # a value spanning lines; a blank line is no row
    ("a,b,a\n1,2,3\n", 1, "column 'a' is named twice in the header (columns 1 and 3)"),
])
def test_a_ragged_row_or_a_column_named_twice_is_refused_at_its_line(tmp_path, capsys, text, line, words):
    # all were plotted: a short row left out without a word, a long one cut short, a header a,a's first
    # column lost
    path = tmp_path / "results.csv"
    path.write_text(text)
    assert main(["plot", str(path), "--x", "a", "--y", "b", "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}:{line}: ") and words in err[0], err
    assert not (tmp_path / "x.png").exists()


def test_a_folder_is_named_as_one_and_a_byte_order_mark_is_not_a_column(tmp_path, capsys):
    assert main(["plot", str(tmp_path), "--x", "a", "--y", "b"]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path}: is a folder; expected a CSV file (a results.csv)\n"
    path = tmp_path / "results.csv"
    path.write_bytes(b"\xef\xbb\xbfa,b\n1,2\n")
    assert plot_module.read_csv(path) == (["a", "b"], [{"a": "1", "b": "2"}])


def test_a_run_folder_points_to_its_csv_or_says_why_it_has_none(tmp_path, capsys):
    from sn40l_sim.report.outputs import OutputFolder

    (tmp_path / "done").mkdir()
    done = write_csv(tmp_path / "done").parent
    assert main(["plot", str(done), "--x", "a", "--y", "b"]) == 2
    assert capsys.readouterr().err == (f"error: {done}: is a folder; expected a CSV file (a results.csv); "
                                       f"{done / 'results.csv'} is in it\n")
    # a run that stopped before writing its results: "file not found" alone left the user to guess
    failed = tmp_path / "failed"
    with pytest.raises(RuntimeError), OutputFolder(failed, command="run x.yaml", outputs=("results.csv",)):
        raise RuntimeError("invariant broken")
    for given in (failed, failed / "results.csv"):
        assert main(["plot", str(given), "--x", "a", "--y", "b"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {given}: ") and err.rstrip().endswith(
            f"its run (run x.yaml) failed, as {failed / 'status.json'} says: invariant broken"), err


def test_the_empty_results_csv_of_a_sweep_that_gave_no_record_points_to_its_failures(tmp_path, capsys):
    (tmp_path / "results.csv").write_text("\n")
    (tmp_path / "failures.json").write_text('[{"point": "full[batch=1024]"}]')
    assert main(["plot", str(tmp_path / "results.csv"), "--x", "a", "--y", "b"]) == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 'results.csv'}: expected a header and at least one row (a results.csv); no run of its "
        f"sweep gave a record: the run is in {tmp_path / 'failures.json'}, with why each failed or was skipped\n")


@pytest.mark.parametrize("kind", ["line", "bar", "scatter"])
def test_rows_without_a_number_to_plot_are_named_in_a_warning(tmp_path, monkeypatch, kind):
    # results.csv leaves a value a point does not have empty; a nan or inf was dropped without a word
    drawn = []
    for method in ("plot", "bar", "scatter"):
        original = getattr(matplotlib.axes.Axes, method)
        monkeypatch.setattr(matplotlib.axes.Axes, method, lambda self, xs, ys, *a, _o=original, **k:
                            (drawn.append((list(xs), list(ys))), _o(self, xs, ys, *a, **k))[1])
    path = tmp_path / "results.csv"
    path.write_text("batch,ttft_s\n1,0.5\n2,nan\n3,0.75\n4,inf\n5,\n6,1.25\nnan,2\n")
    with pytest.warns(UserWarning) as caught:
        assert main(["plot", str(path), "--x", "batch", "--y", "ttft_s", "--kind", kind,
                     "--out", str(tmp_path / "x.png")]) == 0
    assert [str(w.message) for w in caught] == [
        f"{path}: 4 of 7 rows not plotted: ttft_s is nan (line 3); ttft_s is inf (line 5); "
        "ttft_s is empty (line 6); batch is nan (line 8)"]
    assert [ys for _, ys in drawn] == [[0.5, 0.75, 1.25]]


def test_a_text_x_keeps_its_rows_and_no_row_left_is_an_error(tmp_path, recwarn):
    path = tmp_path / "results.csv"
    path.write_text("name,ttft_s\nfull,0.5\n,0.75\n")
    plot_csv(path, x="name", y="ttft_s", kind="bar")
    path.write_text("name,ttft_s\nfull,nan\nsnap,\n")
    with pytest.raises(InputError, match="column 'ttft_s' has no numeric values"):
        plot_csv(path, x="name", y="ttft_s", kind="bar")
    assert not recwarn.list


def test_hues_the_results_tell_apart_read_apart_in_the_legend():
    # at six digits both read "25"; the CSV keeps nine
    column = ["sweep.hardware.socket.p2p.bytes_per_s_per_port"]
    assert plot_module._legend(column, ("25000000000.0",)) == "25"
    assert plot_module._legend(column, ("25000001000.0",)) == "25.000001"


@pytest.mark.parametrize("kind", ["line", "bar", "scatter"])
def test_a_value_no_axis_can_span_is_one_line(tmp_path, capsys, kind):
    # 1e308 beside -1e308 (finite both) overflowed matplotlib's ticks: a 58-line traceback
    path = tmp_path / "results.csv"
    path.write_text("batch,decode_tokens_per_s\n1,1e308\n2,-1e308\n")
    assert main(["plot", str(path), "--x", "batch", "--y", "decode_tokens_per_s", "--kind", kind]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {path}: --y: decode_tokens_per_s is beyond 1e+300 in magnitude (line 2): an axis cannot "
                   "span it"]
    path.write_text("batch,decode_tokens_per_s\n1,1e300\n2,-1e300\n")   # the bound itself is drawn
    assert main(["plot", str(path), "--x", "batch", "--y", "decode_tokens_per_s", "--kind", kind]) == 0


@pytest.mark.parametrize("kind, option, column", [
    ("line", "--logy", "decode_tokens_per_s"), ("bar", "--logy", "decode_tokens_per_s"),
    ("scatter", "--logy", "decode_tokens_per_s"), ("line", "--logx", "batch"), ("scatter", "--logx", "batch")])
def test_a_value_no_logarithmic_axis_can_span_is_one_line(tmp_path, capsys, kind, option, column):
    # a log axis from 1 to 1e270 (under the linear bound) put matplotlib's decade ticks past the
    # largest float: an OverflowError traceback, exit status 1 (a line plot's x ticks are matplotlib's
    # past 12 values)
    path = tmp_path / "results.csv"
    values = [f"1e{15 * i}" for i in range(13)] + ["1e270"]
    rows = [f"{i},{v}" if option == "--logy" else f"{v},{i}" for i, v in enumerate(values, start=1)]
    path.write_text("batch,decode_tokens_per_s\n" + "\n".join(rows) + "\n")
    argv = ["plot", str(path), "--x", "batch", "--y", "decode_tokens_per_s", "--kind", kind, option]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {path}: {option}: {column} is beyond 1e+200 in magnitude (line 15): a logarithmic axis cannot span it"]
    path.write_text(path.read_text().replace("1e270", "1e200"))   # the bound itself is drawn
    assert main(argv) == 0


@pytest.mark.parametrize("kind", ["line", "bar", "scatter"])
def test_one_number_written_two_ways_is_one_hue(tmp_path, monkeypatch, kind):
    """A zipped sweep can write one axis value as 1 in one row and 1.0 in another (the values as
    written): they are one series, not two with the same number in the legend."""
    legends = []
    original = matplotlib.axes.Axes.legend

    def spy(self, *args, **kwargs):
        legend = original(self, *args, **kwargs)
        legends.append([t.get_text() for t in legend.get_texts()])
        return legend

    monkeypatch.setattr(matplotlib.axes.Axes, "legend", spy)
    path = tmp_path / "results.csv"
    path.write_text("sweep.rate,batch,decode_step_s\n1,1,0.5\n1.0,2,0.75\n2,1,0.25\n2.0,2,0.5\n")
    plot_csv(path, x="batch", y="decode_step_s", hue=["sweep.rate"], kind=kind)
    assert legends == [["1", "2"]]


def test_one_x_written_two_ways_is_one_x(tmp_path, monkeypatch):
    """Rows at x = 1 and x = 1.0 share an x: refused as any two rows at one x are (a line plot drew a
    vertical zig-zag between them), and a bar plot has one category for them, not two ticks "1"."""
    path = tmp_path / "results.csv"
    path.write_text("sweep.rate,batch,decode_step_s\n1,1,0.5\n1.0,2,0.75\n2,1,0.25\n2.0,2,0.5\n")
    with pytest.raises(InputError, match=r"2 rows have sweep.rate=1 \(all rows\); they differ in batch"):
        plot_csv(path, x="sweep.rate", y="decode_step_s")
    ticks = []
    monkeypatch.setattr(matplotlib.axes.Axes, "set_xticks",
                        lambda self, positions, labels=None, **k: ticks.append(list(labels or [])))
    plot_csv(path, x="sweep.rate", y="decode_step_s", hue=["batch"], kind="bar")
    assert ticks == [["1", "2"]]


def _record_series_styles(monkeypatch) -> list[tuple]:
    """The (colour, dash, marker) of each series drawn from here on, as the plot draws it."""
    drawn: list[tuple] = []
    for method in ("plot", "scatter"):
        original = getattr(matplotlib.axes.Axes, method)
        monkeypatch.setattr(matplotlib.axes.Axes, method, lambda self, xs, ys, *a, _o=original, **k: (
            drawn.append((str(k.get("color", k.get("c"))), k.get("linestyle"), k.get("marker"))),
            _o(self, xs, ys, *a, **k))[1])
    return drawn


@pytest.mark.parametrize("kind", ["line", "scatter"])
def test_every_series_of_three_hue_columns_is_drawn_its_own_way(tmp_path, monkeypatch, kind):
    """With three hue columns the middle one changed neither colour nor dash nor marker: a sweep's
    hue [kv_policy, sweep.model, sweep.hbm] drew 8B's and 70B's lines alike, told apart only by where
    they lay. Each series now differs from every other in colour or in dash and marker."""
    drawn = _record_series_styles(monkeypatch)
    rows = [{"experiment": "demo", "kv_policy": policy, "model": model, "rate": rate, "batch": batch,
             "decode_step_s": 0.001 * batch * rate}
            for policy in ("full", "snap") for model in ("8b", "70b") for rate in (1, 2) for batch in (1, 4)]
    plot_csv(write_csv(tmp_path, rows), x="batch", y="decode_step_s", hue=["kv_policy", "model", "rate"], kind=kind)
    assert len(drawn) == 8 and len(set(drawn)) == 8, drawn


@pytest.mark.parametrize("kind", ["line", "scatter"])
def test_more_text_hue_values_than_colours_are_drawn_each_its_own_way(tmp_path, monkeypatch, kind):
    """The colour cycle holds ten colours: a hue of twelve text values (policies, say) drew the
    eleventh and twelfth series exactly as the first and second."""
    drawn = _record_series_styles(monkeypatch)
    rows = [{"experiment": "demo", "kv_policy": f"policy_{chr(97 + i)}", "batch": batch, "decode_step_s": 0.001 * i}
            for i in range(12) for batch in (1, 4)]
    plot_csv(write_csv(tmp_path, rows), x="batch", y="decode_step_s", hue=["kv_policy"], kind=kind)
    assert len(drawn) == 12 and len(set(drawn)) == 12, drawn


@pytest.mark.parametrize("wanted", ["409.6 GB/s", "0.4096 TB/s", "409600000000"])
def test_where_takes_a_value_with_its_unit_as_a_sweep_axis_wrote_it(tmp_path, wanted):
    """A sweep writes a bandwidth axis in bytes/s; --where (or a sweep plot's where:) given the value
    as the axis wrote it, 409.6 GB/s, matched no row."""
    path = tmp_path / "results.csv"
    path.write_text("sweep.hbm,batch,decode_step_s\n409600000000.0,1,0.5\n409600000000.0,2,0.75\n"
                    "819200000000.0,1,0.25\n819200000000.0,2,0.5\n")
    ys = []
    original = matplotlib.axes.Axes.plot
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matplotlib.axes.Axes, "plot", lambda self, x, y, *a, **k: (ys.append(list(y)),
                                                                                 original(self, x, y, *a, **k))[1])
        plot_csv(path, x="batch", y="decode_step_s", where={"sweep.hbm": wanted})
    assert ys == [[0.5, 0.75]]


def test_a_labelled_axis_of_files_on_x_is_ticked_by_its_labels(tmp_path, monkeypatch):
    """A sweep's model axis with labels: the legend named each file by its label, the x axis of a bar
    plot by its path."""
    ticks = []
    monkeypatch.setattr(matplotlib.axes.Axes, "set_xticks",
                        lambda self, positions, labels=None, **k: ticks.append(list(labels or [])))
    path = tmp_path / "results.csv"
    path.write_text("sweep.model,kv_policy,decode_step_s\n../graphs/llama3_1_8b.yaml,full,0.5\n"
                    "../graphs/llama3_1_70b.yaml,full,0.75\n")
    names = {"sweep.model": {"../graphs/llama3_1_8b.yaml": "8B", "../graphs/llama3_1_70b.yaml": "70B"}}
    plot_csv(path, x="sweep.model", y="decode_step_s", hue=["kv_policy"], kind="bar", value_names=names)
    assert ticks == [["8B", "70B"]]   # the paths in their numbers' order (report/axis_text.py): 8b before 70b


def test_a_group_of_columns_named_for_an_axis_lists_its_columns(tmp_path, capsys):
    # --y memory listed every one of a results.csv's 150 columns; a nested field's name now lists its parts
    rows = [{**row, "memory.hbm.kv": 1.0, "memory.hbm.weights": 2.0, "memory.ddr.kv": 0.0} for row in ROWS]
    path = write_csv(tmp_path, rows)
    assert main(["plot", str(path), "--x", "batch", "--y", "memory.hbm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--y: 'memory.hbm' is a group of 2 columns; name one of them: memory.hbm.kv, " \
        "memory.hbm.weights" in err[0] and "memory.ddr.kv" not in err[0], err


def _numeric_inputs():
    """Dotted paths of the numeric fields of an experiment's workload, serving and slo sections:
    the axes of a load sweep (arrival rate, nodes, chunk, acceptance, SLO bounds)."""
    import typing

    from sn40l_sim.study import serving_section as serving
    from sn40l_sim.study import slo_section as slo

    def numeric(annotation) -> bool:
        args = typing.get_args(annotation)
        return annotation in (int, float) or any(numeric(a) for a in args if a is not type(None))

    sections = [("workload", serving.PoissonWorkload), ("workload", serving.TraceWorkload),
                ("workload", serving.FixedWorkload), ("workload.prefix", serving.PrefixSharing),
                ("serving", serving.ServingSection), ("serving.speculative", serving.SpeculativeSection),
                ("slo.ttft", slo.LatencySLO), ("slo.tpot", slo.LatencySLO)]
    return sorted({f"{prefix}.{name}" for prefix, model in sections for name, field in model.model_fields.items()
                   if numeric(field.annotation) and typing.get_origin(field.annotation) is not tuple})


@pytest.mark.parametrize("path", _numeric_inputs())
def test_a_serving_or_workload_axis_is_labelled_in_words_not_by_its_path(path):
    # a load sweep's x axis (sweep.workload.rate_per_s) was labelled "workload.rate_per_s", no unit
    label, _ = axis_label(f"sweep.{path}")
    assert path not in label, label


@pytest.mark.parametrize("column, label", [
    ("sweep.workload.rate_per_s", "arrival rate (requests/s)"),
    ("sweep.workload.duration_s", "trace window length (s)"),
    ("sweep.serving.prefill_chunk", "prefill chunk (tokens)"),
    ("sweep.slo.tpot.max_s", "TPOT objective (s)"),
])
def test_load_sweep_axes_carry_their_units(column, label):
    assert axis_label(column) == (label, 1.0)


def test_a_legend_of_many_series_moves_beside_the_axes_rather_than_hide_points(tmp_path, monkeypatch):
    """Ten series spanning the axes (the demo sweep's plot): no corner was free, and matplotlib's
    "best" legend covered the first points of two curves; it now sits beside the axes."""
    from sn40l_sim.report import figure as figure_module

    rows = [{"experiment": "demo", "kv_policy": policy, "prefill_len": length, "batch": batch,
             "decode_tokens_per_s": 0.05 + 0.01 * i + 0.001 * batch}
            for i, (policy, length) in enumerate(itertools.product(("full", "snapstream"), (1, 2, 3, 4, 5)))
            for batch in (1, 2, 4, 8, 16)]
    saved = []
    monkeypatch.setattr(plot_module, "save_figure", lambda fig, path, metadata=None: saved.append(fig) or path)
    plot_csv(write_csv(tmp_path, rows), x="batch", y="decode_tokens_per_s", hue=["kv_policy", "prefill_len"], logx=True)
    (ax,) = saved[0].axes
    renderer = saved[0].canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    assert not any(legend.overlaps(marker) for marker in figure_module._markers(ax))
    assert legend.x0 >= ax.get_window_extent(renderer).x1   # beside the axes, not shrunk over them
    assert len(ax.get_legend().get_texts()) == 10


def test_a_legend_clear_of_the_points_stays_inside_the_axes(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(plot_module, "save_figure", lambda fig, path, metadata=None: saved.append(fig) or path)
    plot_csv(write_csv(tmp_path), x="batch", y="decode_tokens_per_s", hue=["kv_policy", "prefill_len"])
    (ax,) = saved[0].axes
    renderer = saved[0].canvas.get_renderer()
    assert ax.get_window_extent(renderer).contains(*ax.get_legend().get_window_extent(renderer).p1)


@pytest.mark.parametrize("x, hue, kind, words", [
    ("batch", "kv_policy", "bar", "batch is drawn as categories (--kind bar)"),
    ("kv_policy", "batch", "line", "kv_policy is drawn as categories (not all numbers)"),
])
def test_logx_on_an_axis_of_categories_is_refused_not_dropped(tmp_path, capsys, x, hue, kind, words):
    """A bar plot (or a text x) was drawn on a linear axis of categories, --logx dropped without a word."""
    path = write_csv(tmp_path)
    out = tmp_path / "p.png"
    assert main(["plot", str(path), "--x", x, "--y", "decode_tokens_per_s", "--kind", kind, "--logx",
                 "--hue", hue, "--where", "prefill_len=4096", "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {path}: --logx: {words}") and line.endswith("drop --logx")
    assert not out.exists()


@pytest.mark.parametrize("values, held", [
    (12, ", ".join(f"'{b}'" for b in range(1, 13))),
    (13, ", ".join(f"'{b}'" for b in range(1, 13)) + ", ... (13 values)"),
])
def test_where_lists_twelve_values_a_column_holds_and_counts_more(tmp_path, capsys, values, held):
    rows = [dict(ROWS[0], batch=b, decode_tokens_per_s=10.0 * b) for b in range(1, values + 1)]
    path = write_csv(tmp_path, rows)
    assert main(["plot", str(path), "--x", "decode_tokens_per_s", "--y", "prefill_len", "--where", "batch=99"]) == 2
    assert capsys.readouterr().err.rstrip().endswith(f"batch is never '99' in the rows selected (it holds {held})")


def test_a_python_callers_hue_where_and_columns_are_read_or_named(tmp_path):
    """From Python, hue="kv_policy" was read letter by letter ("unknown column 'k'"), where given as
    the command line writes it (["batch=4"]) raised a ValueError from dict(), and x=None a TypeError."""
    path = write_csv(tmp_path)
    one = plot_csv(path, "batch", "decode_tokens_per_s", hue="kv_policy", where={"prefill_len": 4096},
                   out=tmp_path / "one.png")
    listed = plot_csv(path, "batch", "decode_tokens_per_s", hue=["kv_policy"], where={"prefill_len": 4096},
                      out=tmp_path / "listed.png")
    assert one.read_bytes() == listed.read_bytes()
    for kwargs, named in ((dict(where=["batch=4"]), "--where: expected a mapping of column to value, such as "
                                                    "{'batch': '16'}, got ['batch=4']"),
                          (dict(x=None), "--x: expected a column name, got None"),
                          (dict(y=3), "--y: expected a column name, got 3")):
        with pytest.raises(InputError) as caught:
            plot_csv(path, **{"x": "batch", "y": "decode_tokens_per_s", "out": tmp_path / "w.png", **kwargs})
        assert str(caught.value) == named
