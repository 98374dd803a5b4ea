"""Why SnapStream's prefill overhead is not monotone in the prompt length (docs/validation.md,
"SnapStream's prefill overhead over prompt lengths").

Llama-3.1-70B on 16 sockets with the 32K cache (sink 4, ring and observation window 4,096, top-K
28,668): no kernel below sink + ring; two copy kernels, bound by their configuration, up to the
budget; the scoring kernel above it, whose configuration does not grow with the prompt while the
full prefill's attention grows with its square. Each cause is pinned here, not the percentages.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sn40l_sim.kvcache import make_policy
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.evaluation import LoadedExperiments
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.mapping import build_phase, map_phase

ROOT = Path(__file__).resolve().parents[2]
LLAMA70B = ROOT / "graphs" / "llama3_1_70b.yaml"
POLICY = make_policy("snapstream", {"budget": 32768})


def _experiment(directory: Path, prompt_len: int, policies: list[dict]) -> Path:
    spec = {
        "kind": "experiment", "name": f"snap_prefill_{prompt_len}",
        "hardware": str(ROOT / "hw_configs" / "sn40l_node16.yaml"), "model": str(LLAMA70B),
        "parallel": {"prefill": {"tp": 16}, "decode": {"tp": 16}},
        "policies": policies,
        "shape": {"prompt_len": prompt_len, "batch": 1, "max_new_tokens": 8},
        "workload": {"kind": "fixed", "count": 1, "output_len": 8},
        "serving": {"batch": 1, "max_new_tokens": 8},
    }
    path = directory / f"{prompt_len}_{len(policies)}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


# the deployment's 32K cache is kept at every length on purpose; below 32K it warns of unfilled slots
pytestmark = pytest.mark.filterwarnings("ignore:.*reserves and reads slots no sequence fills")

SNAP = [{"name": "snapstream", "policy": "snapstream", "params": {"budget": 32768}}]


@pytest.fixture(scope="module")
def policy_kernels(tmp_path_factory) -> dict[int, dict[str, object]]:
    """Layer 0's SnapStream kernels as ``map`` places them in the compiled prefill, by prompt."""
    directory = tmp_path_factory.mktemp("snap_prefill")
    out = {}
    for prompt in (8192, 32768, 65536, 131064):
        placed = map_phase(build_phase(load_experiment(_experiment(directory, prompt, SNAP)), "prefill"))
        out[prompt] = {pk.kernel.kind: pk for pk in placed.kernels if pk.kernel.name.startswith("L00.")}
    return out


def test_the_compiled_length_decides_which_kernels_snapstream_adds():
    model = load_model(LLAMA70B)
    ops = {L: {k.kind: [op.name for op in k.operators] for k in POLICY.prefill_kernels(model, L, 16)}
           for L in (4096, 8192, 16384, 32768, 65536, 131072)}
    # a 4,096-token graph is shorter than sink + ring (4,100): the cache is the prompt, nothing added
    assert ops[4096] == {}
    # up to the budget the middle fits the top-K slots: copied, never scored
    for L in (8192, 16384, 32768):
        assert set(ops[L]) == {"snapkv", "ring_buffer"} and "scores" not in ops[L]["snapkv"], L
    # above it the window's queries score the middle
    for L in (65536, 131072):
        assert "scores" in ops[L]["snapkv"], L
    # and the observation window is the ring at every length: the scores grow with L, not L^2
    windows = {L: next(op.m for k in POLICY.prefill_kernels(model, L, 16) for op in k.operators if op.name == "scores")
               for L in (65536, 131072)}
    assert windows == {65536: 4096, 131072: 4096}


def test_the_copy_kernels_cost_their_configuration(policy_kernels):
    # each call reloads its configuration (the attention and FFN kernels between take the units),
    # and a one-tile kernel's configuration routes every switch of the tile: a fixed cost per call
    for prompt in (8192, 32768):
        for kind in ("snapkv", "ring_buffer"):
            pk = policy_kernels[prompt][kind]
            assert pk.overhead_cycles >= 0.55 * pk.call_cycles, (prompt, kind)
    assert policy_kernels[8192]["ring_buffer"].call_cycles == policy_kernels[32768]["ring_buffer"].call_cycles


def test_the_scoring_kernels_configuration_does_not_grow_with_the_prompt(policy_kernels):
    short, long = policy_kernels[65536], policy_kernels[131064]
    assert short["snapkv"].overhead_cycles == long["snapkv"].overhead_cycles
    # a fixed share of the 64K call, so doubling the scores' FLOPs does not double the call
    assert short["snapkv"].overhead_cycles >= 0.3 * short["snapkv"].call_cycles
    assert long["snapkv"].kernel.flops >= 2 * short["snapkv"].kernel.flops
    assert long["snapkv"].call_cycles <= 1.7 * short["snapkv"].call_cycles
    # while the full prefill's attention grows with the prompt's square
    assert long["attention"].call_cycles >= 3 * short["attention"].call_cycles


def test_the_overhead_is_that_of_the_compiled_length(tmp_path):
    # a 49,152-token prompt runs the 65,536-token graphs, with and without SnapStream
    loaded = LoadedExperiments()
    both = [{"name": "full", "policy": "full"}, *SNAP]
    overhead = {}
    for prompt in (49152, 65536):
        records = {r["kv_policy"]: r for r in loaded.records(_experiment(tmp_path, prompt, both), serve=False)}
        assert records["snapstream"]["prefill_len_compiled"] == 65536
        overhead[prompt] = records["snapstream"]["prefill_s"] / records["full"]["prefill_s"]
    assert overhead[49152] == overhead[65536] > 1.0
