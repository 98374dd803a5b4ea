"""The plot a sweep draws from its ``plot:`` section (sn40l_sim/study/sweep/run.py)."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.study.sweep.load import load_sweep
from sn40l_sim.study.sweep.run import _value_names

REPO = Path(__file__).resolve().parents[2]


def test_a_labelled_axis_of_files_is_named_by_its_labels_in_the_legend():
    # experiments/socket_scaling.yaml's legend read "../graphs/llama3_1_70b.yaml, 8": the CSV's
    # sweep.model holds the path as written; its axis's labels name each file
    names = _value_names(load_sweep(REPO / "experiments" / "socket_scaling.yaml"))
    assert names["sweep.model"] == {"../graphs/llama3_1_70b.yaml": "llama3_1_70b",
                                    "../graphs/llama3_1_8b.yaml": "llama3_1_8b"}
    # numbers are shown in the legend's unit, not renamed
    assert names.get("sweep.sockets", {}) == {}
