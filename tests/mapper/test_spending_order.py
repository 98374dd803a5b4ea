"""The idle-unit spending's shortcut (sn40l_sim/mapper/spending.py, ``spend_spare_units``): unpriced,
the idle PCUs are offered slowest stage first and again in order of the cycles each PCU saves, and
the second spending is kept only with no more units and a shorter chain. Where the two orders are
the same, the second spending is the first again and is not made; this test spends every idle unit
of a mapping both ways and compares."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper import allocate as allocate_module
from sn40l_sim.mapper import spending
from sn40l_sim.mapper.graph import clear_memo
from sn40l_sim.mapper.kernel import map_kernel
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

ROOT = Path(__file__).resolve().parents[2]


def _both_orders(socket, rates, stages, limits, chip_tiles, units, budget):
    """spend_spare_units as it was before the shortcut: both spendings made, whatever the orders."""
    slowest = spending._slowest_first(units, limits)
    spent = spending._spend_spare_pcus(socket, rates, stages, limits, chip_tiles, units, budget, slowest)
    spare = budget.tile_pcus(socket.tile.pcus) - sum(u[0] for u in units)
    by_gain = sorted(slowest, key=lambda i: -spending._gain(stages[i], units[i], limits[i], chip_tiles, spare))
    gain = spending._spend_spare_pcus(socket, rates, stages, limits, chip_tiles, units, budget, by_gain)
    fewer = all(sum(u[k] for u in gain) <= sum(u[k] for u in spent) for k in (0, 1))
    paced = [spending._chain(spending._paced(rates, stages, chip_tiles, u)) for u in (gain, spent)]
    return (gain if fewer and paced[0] < paced[1] else spent), by_gain == slowest


def test_the_spending_skipped_where_both_orders_agree_is_the_one_made(monkeypatch):
    socket = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml").socket
    model = load_model(ROOT / "graphs" / "deepseek_r1.yaml")
    graph = build_graph(model, Shape("decode", 16, 131072, 131072, 1, context_len=131072 + 1024),
                        ParallelPlan(16, 16), make_policy("full", {}))
    kernel = next(k for k in graph.kernels() if k.name.endswith("L03.mla")).signature()
    calls = []
    spend = allocate_module.spend_spare_units

    def recorded(socket, rates, stages, limits, chip_tiles, units, budget, price=None):
        got = spend(socket, rates, stages, limits, chip_tiles, list(units), budget, price)
        if price is None:
            calls.append((got, _both_orders(socket, rates, stages, limits, chip_tiles, list(units), budget)))
        return got

    monkeypatch.setattr(allocate_module, "spend_spare_units", recorded)
    clear_memo()        # allocations memoised by an earlier test would not come through here
    map_kernel(socket, kernel)
    same_order = [agree for _, (_, agree) in calls]
    assert any(same_order) and not all(same_order)      # both cases met
    assert all(got == want for got, (want, _) in calls)


def test_a_calls_stream_is_every_stage_once_then_the_slowest_per_further_tile():
    # 5 data tiles through stages of 10, 30 and 20 cycles: 60 for the first tile, then 4 x 30;
    # collectives outlasting that set the end instead
    assert spending._streaming([10.0, 30.0, 20.0], spending.Pricing(0.0, 0.0, 5)) == 60 + 4 * 30
    assert spending._streaming([10.0, 30.0, 20.0], spending.Pricing(0.0, 0.0, 5, overlap_cycles=500)) == 60 + 500
    assert spending._streaming([10.0, 30.0, 20.0], spending.Pricing(0.0, 0.0, 1)) == 60
