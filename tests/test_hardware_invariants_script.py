"""``scripts/hardware_invariants.py``: its checks flag what breaks an invariant and only that, and a
few real probes, one per check, hold (docs/validation.md, "Invariants over random configurations").

The random hunt itself is opt-in: ``SN40L_SIM_INVARIANT_PROBES=40 python -m pytest
tests/test_hardware_invariants_script.py`` runs that many probes from seed 0 and fails on any
violation (the documented tile-size case among them, for as long as it stands)."""
from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import hardware_invariants as hi  # noqa: E402


def _timing(ms: float, hbm_share: float = 0.0, p2p_share: float = 0.0) -> SimpleNamespace:
    """A stand-in step: ``ms`` long, its HBM bytes ``hbm_share`` of it at the achievable rate."""
    cycles = round(ms * 1.6e6)
    rate = 4 * 409.6e9 * 0.9556   # the shipped socket's achievable HBM rate
    return SimpleNamespace(seconds=ms / 1e3, cycles=cycles, tier_bytes={"hbm": round(hbm_share * ms / 1e3 * rate)},
                           resource_busy_cycles={"p2p": round(p2p_share * cycles), "compute": 0})


class _Canned(hi.Hunt):
    """A hunt whose steps are given: by (HBM rate overridden or not, other fields, length)."""

    def __init__(self, steps):
        super().__init__()
        self.steps = steps

    def step(self, probe, hardware, batch, length):
        hbm = hardware.get("memory.hbm.bytes_per_s_per_unit") == "819.2 GB/s"
        return self.steps["hbm2x" if hbm else ("faster" if hardware else "base"), length]


PROBE = hi.Probe("llama8b", "full", "prefill", 1, 1024, "p2p.bytes_per_s_per_port", "100 GB/s")


def test_a_slower_faster_machine_and_a_cheaper_longer_prompt_are_reported():
    hunt = _Canned({("base", 1024): _timing(10), ("faster", 1024): _timing(10.2),
                    ("hbm2x", 1024): _timing(9), ("base", 2048): _timing(9.8)})
    hi.run_probe(hunt, PROBE, tolerance=0.01)
    assert [v.split(":")[0] for v in hunt.violations] == ["faster_machine", "longer_prompt"]
    assert "+2.00%" in hunt.violations[0] and "--set hardware.socket.p2p.bytes_per_s_per_port" in hunt.violations[0]


def test_within_tolerance_nothing_is_reported():
    hunt = _Canned({("base", 1024): _timing(10), ("faster", 1024): _timing(10.05),
                    ("hbm2x", 1024): _timing(9), ("base", 2048): _timing(9.95)})
    hi.run_probe(hunt, PROBE, tolerance=0.01)
    assert hunt.violations == []


def test_twice_the_hbm_rate_is_held_to_half_and_a_memory_bound_step_near_it():
    # memory-bound (HBM 95% of the step, links 10%): twice the rate must leave at most
    # 1.15 * (1 - 0.475) = 0.604 of the step, and never less than half
    for doubled_ms, expected in ((5.5, []), (7.0, ["hbm_halved_memory_bound"]), (4.0, ["hbm_doubled"])):
        hunt = _Canned({("base", 1024): _timing(10, 0.95, 0.1), ("faster", 1024): _timing(10, 0.95, 0.1),
                        ("hbm2x", 1024): _timing(doubled_ms), ("base", 2048): _timing(20)})
        hi.run_probe(hunt, PROBE, tolerance=0.01)
        assert [v.split(":")[0] for v in hunt.violations] == expected, doubled_ms
    # links busy 57% of the step: collective-bound at twice the HBM rate, not held near half
    assert hi.halved_at_most(0.97, 0.57) is None


def test_the_draw_is_a_function_of_the_seed():
    first = [hi.draw(random.Random(5)) for _ in range(3)]
    assert first == [hi.draw(random.Random(5)) for _ in range(3)]
    assert all(p.faster in hi.FASTER[p.field][1] for p in first)


#: one real probe per check: a looped decode whose P2P links get faster (faster machine, longer
#: cache, larger batch, twice the HBM, memory, SnapStream's KV), and a prefill on a faster clock
REAL = (hi.Probe("llama8b", "full", "decode", 4, 2048, "p2p.bytes_per_s_per_port", "100 GB/s"),
        hi.Probe("llama8b", "snapstream", "prefill", 1, 512, "clock_hz", "2.0 GHz"))


def test_real_probes_hold():
    # the looped decode's faster links among them: the loop's first iteration, its call, is scored
    # as the engine runs it (tests/mapper/test_loop_first_iteration.py)
    hunt = hi.Hunt()
    for probe in REAL:
        hi.run_probe(hunt, probe, tolerance=0.0)
    assert hunt.violations == []
    assert {"faster_machine", "hbm_doubled", "longer_context", "larger_batch", "longer_prompt", "memory_conserved",
            "snapstream_kv", "peaks_and_bytes"} <= set(hunt.checked)


@pytest.mark.skipif(not os.environ.get("SN40L_SIM_INVARIANT_PROBES"), reason="opt-in: SN40L_SIM_INVARIANT_PROBES=N")
def test_random_probes_hold():
    found = hi.hunt(0, int(os.environ["SN40L_SIM_INVARIANT_PROBES"]), 0.01)
    assert found.violations == []


@pytest.mark.parametrize("tolerance", ["-1", "nan", "1", "x"])
def test_a_tolerance_outside_zero_to_one_is_a_bad_argument(tolerance, capsys):
    # a negative slack flags every unchanged step, NaN none: exit 1 would report made-up violations
    with pytest.raises(SystemExit) as exc:
        hi.main(["--probes", "1", "--tolerance", tolerance])
    assert exc.value.code == 2
    assert "--tolerance" in capsys.readouterr().err
