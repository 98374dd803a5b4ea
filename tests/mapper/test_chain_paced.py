"""A looped iteration's section computes at its compute stages' pace once its stream has read ahead
during the wait for the previous iteration's collectives (:mod:`sn40l_sim.mapper.read_ahead`), so
the allocator balances those stages for their own pace (``chain_paced``), not only for the stream's:
the slowest compute stage is then never slower than with the stream-paced balance, and below the
stream where the tile has the units (docs/validation.md, "A longer cache can be faster: a looped
decoder balanced to its stream")."""
from __future__ import annotations

from conftest import ROOT, node16

from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.mapper.budget import NO_LIMITS
from sn40l_sim.mapper.kernel import LoopContext, best_plan
from sn40l_sim.mapper.planning import section_allocation
from sn40l_sim.mapper.spending import section_chain_paced
from sn40l_sim.mapper.tier_split import TierSplit
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model


def _decoder(kv_len: int):
    model = load_model(ROOT / "graphs" / "llama3_1_70b.yaml")
    graph = build_graph(model, Shape("decode", 64, 0, kv_len), ParallelPlan(16))
    return next(k for k in graph.kernels() if k.name == "L00.decoder")


def _slowest_compute(alloc, stages) -> int:
    return max(c for c, s in zip(alloc.cycles, stages, strict=True) if not s.is_memory)


def test_only_a_gated_loops_first_section_is_chain_paced():
    assert section_chain_paced(LoopContext(80, 1000, True), 0)
    assert not section_chain_paced(LoopContext(80, 1000, True), 1)
    assert not section_chain_paced(LoopContext(80, 0, True), 0)      # no wait: the stream paces it
    assert not section_chain_paced(LoopContext(80, 1000, False), 0)  # not looped


def test_a_chain_paced_section_computes_no_slower_and_below_the_stream_where_it_can():
    socket = node16().socket
    ops = _decoder(160).operators
    tiers = TierSplit.all_in("hbm")
    below = 0
    for n_tiles in (1024, 2048, 4096):
        stages, _, paced = section_allocation(socket, ops, n_tiles, tiers, 4, 0, 0, NO_LIMITS, chain_paced=True)
        _, _, streamed = section_allocation(socket, ops, n_tiles, tiers, 4, 0, 0, NO_LIMITS)
        assert paced is not None and streamed is not None
        assert sum(paced.pcus) <= socket.tile.pcus and sum(paced.pmus) <= socket.tile.pmus
        assert _slowest_compute(paced, stages) <= _slowest_compute(streamed, stages), n_tiles
        stream = max(c for c, s in zip(paced.cycles, stages, strict=True) if s.is_memory)
        below += _slowest_compute(paced, stages) < stream
    assert below   # the decoder's GEMMs at batch 64 can outpace its stream on a tile's 260 PCUs


def test_a_gated_looped_decoder_with_a_longer_cache_is_no_faster():
    # the shipped calibration, where a 160-token cache's plan was 30% slower per iteration than a
    # 192-token cache's (188,960 against 145,715 cycles at 2,048 data tiles)
    socket = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml").socket
    loop = LoopContext(80, 89_104, True)   # the gate: its two 1 MiB all-reduces over 16 sockets
    plans = [best_plan(socket, _decoder(kv), TierSplit.all_in("hbm"), loop=loop)
             for kv in (160, 192)]
    assert plans[0].objective[0] <= plans[1].objective[0]
