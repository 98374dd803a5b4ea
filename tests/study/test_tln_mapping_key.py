"""A TLN narrower than the memory changes the mapping, so a mapping made on another TLN is not
reused for it: the mapper paces a stream at the narrower of its memory tier and the TLN
(``sn40l_sim/mapper/kernel_cost.py``, ``window_replay.py``), and the mapping key once left the TLN
out (``sn40l_sim/mapper/keys.py``), so that ``run --set hardware.socket.tln.bytes_per_s="10 GB/s"``
gave Llama-3.1-70B's decode step 22.749 ms after a run on the shipped TLN had filled the disk cache
and 22.817 ms from an empty one."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.engine.run_graph import EngineOptions
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper import disk_cache
from sn40l_sim.mapper.graph import clear_memo
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]


def _step_cycles(node, model) -> int:
    timer = step_timer(node, model, make_policy("full", {}), ParallelPlan(16), ParallelPlan(16), {},
                       engine=EngineOptions())
    return timer.decode_step(16, 8448).cycles


def test_a_narrow_tln_step_is_the_same_after_a_step_on_the_shipped_tln():
    base = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")
    narrow = with_overrides(base, {"socket.tln.bytes_per_s": "10 GB/s"})
    model = load_model(ROOT / "graphs" / "llama3_1_70b.yaml")
    with disk_cache.cache_in(None):
        clear_memo()
        cold = _step_cycles(narrow, model)
        clear_memo()
        _step_cycles(base, model)
        after_base = _step_cycles(narrow, model)
    assert after_base == cold
