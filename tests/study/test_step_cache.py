"""Steps kept in the disk cache give what simulating them again gives, and only for equal inputs."""
from __future__ import annotations

from pathlib import Path

import sn40l_sim.serving.step_costs as step_costs
from sn40l_sim.engine.run_graph import EngineOptions
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper import disk_cache
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]
NODE = load_hardware(ROOT / "hw_configs" / "sn40l_node8.yaml")
MODEL = load_model(ROOT / "graphs" / "llama3_1_8b.yaml")


def _timer(node=NODE, policy="full", engine=None):
    return step_timer(node, MODEL, make_policy(policy, {"budget": 2048} if policy != "full" else {}),
                      ParallelPlan(8), ParallelPlan(8, 8), engine=engine or EngineOptions())


def test_a_step_read_back_from_disk_equals_one_simulated_again(tmp_path, monkeypatch):
    with disk_cache.cache_in(None):
        cold = _timer().decode_step(8, 4096), _timer().prefill(4096)
    with disk_cache.cache_in(tmp_path):
        stored = _timer().decode_step(8, 4096), _timer().prefill(4096)
        runs = []
        real = step_costs.run_graph
        monkeypatch.setattr(step_costs, "run_graph", lambda *a, **k: runs.append(1) or real(*a, **k))
        loaded = _timer().decode_step(8, 4096), _timer().prefill(4096)
        assert runs == []
        # another batch, node, graph (the policy's prefill kernels) or engine option is another step
        _timer().decode_step(16, 4096)
        _timer(with_overrides(NODE, {"socket.calibrated.transfer_setup_s": 9e-6})).decode_step(8, 4096)
        _timer(policy="snapstream").prefill(4096)
        _timer(engine=EngineOptions(kernel_looping=False)).decode_step(8, 4096)
        assert len(runs) == 4
    assert cold == stored == loaded
