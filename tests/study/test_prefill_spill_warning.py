"""``run`` tells when one prompt's activations leave a prefill node's HBM (``memory.may_spill``
lists activations by default): the prefill then streams them from DDR, several times slower, and
only the memory table said so (docs/validation.md, "Prefill across models, lengths and sockets":
Llama-3.1-405B's 128K prefill on 16 sockets, 66.9 s where 20.4 s with room in HBM)."""
from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import pytest

from sn40l_sim.study.runner import simulate_experiment
from sn40l_sim.study.sweep.base import experiment_with_sets

REPO = Path(__file__).resolve().parents[2]
#: HBM per module that leaves Llama-3.1-8B's 4K prefill on 8 sockets (1.87 GiB of weights, 64 MiB
#: of KV, 68 MiB of activations a socket, 8 GiB reserved) room for its weights and KV but not for
#: all of its activations; the decode node (batch 1) still fits
TIGHT_HBM = {"hardware.socket.memory.hbm.capacity_bytes_per_unit": "2.49 GiB"}


def _experiment(tmp_path: Path, memory: str = "") -> Path:
    path = tmp_path / "prefill.yaml"
    path.write_text(textwrap.dedent(f"""\
        kind: experiment
        name: prefill_spill
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel:
          prefill: {{tp: 8}}
          decode: {{tp: 8}}
        policies:
          - {{name: full, policy: full}}
        shape: {{prompt_len: 4096, batch: 1, max_new_tokens: 1}}
        workload: {{kind: fixed, count: 1, output_len: 1}}
        serving: {{mode: disaggregated, batch: 1, max_new_tokens: 1}}
        """) + memory)
    return path


def _run(path: Path, sets: dict) -> tuple[dict, list[str]]:
    exp, hardware = experiment_with_sets(path, sets)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, records = simulate_experiment(exp, serve=False, hardware_overrides=hardware)
    return records[0], [str(w.message) for w in caught if "activations per socket" in str(w.message)]


def test_a_prefill_whose_activations_spill_to_ddr_is_told_and_is_slower(tmp_path):
    path = _experiment(tmp_path)
    in_hbm, quiet = _run(path, {})
    assert quiet == [] and in_hbm["memory_prefill_node"]["ddr"]["activations"] == 0
    spilled, told = _run(path, TIGHT_HBM)
    in_ddr = spilled["memory_prefill_node"]["ddr"]["activations"]
    assert in_ddr > 0 and spilled["memory_prefill_node"]["hbm"]["weights"] == in_hbm["memory_prefill_node"]["hbm"]["weights"]
    # the same graph, its activations streamed from DDR: the prefill takes longer
    assert spilled["prefill_len_compiled"] == in_hbm["prefill_len_compiled"] == 4096
    assert spilled["prefill_s"] > 1.2 * in_hbm["prefill_s"]
    assert len(told) == 1
    assert f"puts {in_ddr / 2**30:.2f} GiB in DDR of its " in told[0]
    assert "(memory.may_spill lists activations by default)" in told[0]
    assert f"(prefill {spilled['prefill_s']:.3f} s)" in told[0]
    assert "shape.prompt_len (point full)" in told[0]


def test_an_experiment_that_writes_may_spill_chose_it_and_is_not_told(tmp_path):
    path = _experiment(tmp_path, "memory: {may_spill: [activations]}\n")
    spilled, told = _run(path, TIGHT_HBM)
    assert spilled["memory_prefill_node"]["ddr"]["activations"] > 0 and told == []


def test_a_prefill_that_may_not_spill_is_refused_not_warned(tmp_path):
    # may_spill without activations: the prompt does not fit its prefill node, an input error
    from sn40l_sim.errors import InputError
    path = _experiment(tmp_path, "memory: {may_spill: []}\n")
    with pytest.raises(InputError, match="prefill node"):
        _run(path, TIGHT_HBM)


def test_a_colocated_node_whose_activations_spill_is_told_too(tmp_path):
    # a co-located node holds the prompt's activations beside the decode batch's KV: DeepSeek-R1's
    # 512K prompt (experiments/long_context_1m.yaml without may_spill) put 15.97 of its 21.02 GiB of
    # activations a socket in DDR co-located without a word, where a prefill node's 7.25 was told
    path = _experiment(tmp_path)
    path.write_text(path.read_text().replace("mode: disaggregated", "mode: colocated"))
    in_hbm, quiet = _run(path, {})
    assert quiet == [] and in_hbm["memory"]["ddr"]["activations"] == 0
    spilled, told = _run(path, TIGHT_HBM)
    in_ddr = spilled["memory"]["ddr"]["activations"]
    assert in_ddr > 0 and spilled["prefill_s"] > 1.2 * in_hbm["prefill_s"]
    assert len(told) == 1, told
    assert f"puts {in_ddr / 2**30:.2f} GiB in DDR of its " in told[0]
    assert "co-located node" in told[0] and f"(prefill {spilled['prefill_s']:.3f} s)" in told[0]
    # one that writes may_spill chose it
    path.write_text(path.read_text() + "memory: {may_spill: [activations]}\n")
    assert _run(path, TIGHT_HBM)[1] == []
