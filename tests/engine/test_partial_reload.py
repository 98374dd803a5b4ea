"""A kernel on several tiles that another kernel took units of on some of them loads its
configuration again on those tiles only (sn40l_sim/mapper/residency.py, ``load_bytes``): the
engine charges exactly the bytes of the units it uses there and of those tiles' switches."""
from __future__ import annotations

import dataclasses

from engine_doubles import chain, node16, placed_kernel

import sn40l_sim.engine.run_graph as run_graph_module
from sn40l_sim.engine.run_graph import EngineOptions, run_graph
from sn40l_sim.hardware import figures
from sn40l_sim.mapper.residency import reload_tiles

NODE = node16()
SOCKET = NODE.socket
OPTIONS = EngineOptions(kernel_looping=False, stage_collectives=False)


def _kernel(i: int, kind: str, pcus: tuple[int, ...], pmus: tuple[int, ...]):
    """Call ``i`` of ``kind``, on the tiles where ``pcus`` and ``pmus`` are not zero, its configuration
    that of those units and those tiles' switches (one section: the same units on each tile)."""
    tiles = sum(1 for p, q in zip(pcus, pmus, strict=True) if p or q)
    config = figures.config_bytes(SOCKET, max(pcus), max(pmus), tiles)
    pk = placed_kernel(NODE, f"{kind}{i}", kind, layer=i, config_bytes=config)
    return dataclasses.replace(pk, pcus_per_tile=pcus, pmus_per_tile=pmus, kernel=dataclasses.replace(
        pk.kernel, operators=(dataclasses.replace(pk.kernel.operators[0], name=kind),)))


def _dense_layers(n: int = 3) -> list:
    """DeepSeek-R1's dense layers at SnapStream's batch 64 (``map experiments/deepseek_tp16.yaml
    --phase decode --policy snapstream --batch 64``): the MLA on every PCU of the four tiles, the FFN
    on every PCU of one."""
    mla = ((260,) * 4, (165,) * 4)
    ffn = ((260, 0, 0, 0), (168, 0, 0, 0))
    return [_kernel(i, kind, *units) for i in range(n) for kind, units in (("mla", mla), ("ffn", ffn))]


def test_the_engine_charges_the_taken_tiles_bytes_exactly():
    pks = _dense_layers()
    loads = reload_tiles(SOCKET, pks)
    # the FFN takes the MLA's units on its one tile: each loads its configuration there
    assert loads == ((0,),) * len(pks)
    result = run_graph(NODE, chain(pks), OPTIONS)
    one_tile = figures.config_cycles(SOCKET, figures.config_bytes(SOCKET, 260, 165, 1))
    whole = figures.config_cycles(SOCKET, pks[0].section_config_bytes[0])
    assert 0 < one_tile < whole
    assert [r.config_cycles for r in result.records] == [one_tile, figures.config_cycles(
        SOCKET, pks[1].section_config_bytes[0])] * 3
    assert not any(r.config_resident for r in result.records)


def test_a_partial_reload_is_shorter_than_a_whole_one_by_exactly_the_tiles_kept(monkeypatch):
    pks = _dense_layers()
    partial = run_graph(NODE, chain(pks), OPTIONS)
    real = run_graph_module.call_residency

    def whole_kernels(socket, kernels):
        # every call that loads anything loads every tile it uses, as before partial reloads
        steady, switched = real(socket, kernels)
        every = tuple(tuple(t for t in range(4) if k.pcus_per_tile[t] or k.pmus_per_tile[t]) if s else ()
                      for s, k in zip(steady, kernels, strict=True))
        return every, switched

    monkeypatch.setattr(run_graph_module, "call_residency", whole_kernels)
    whole = run_graph(NODE, chain(pks), OPTIONS)
    saved = 3 * (figures.config_cycles(SOCKET, pks[0].section_config_bytes[0])
                 - figures.config_cycles(SOCKET, figures.config_bytes(SOCKET, 260, 165, 1)))
    assert whole.cycles - partial.cycles == saved > 0


def test_after_another_graph_a_kernel_loads_the_tiles_its_steady_state_keeps():
    # the MLA's steady state loads one tile; after another graph took every unit, its first call
    # loads the other three too, and the switch charges exactly those
    pks = _dense_layers()
    result = run_graph(NODE, chain(pks), OPTIONS)
    three = figures.config_cycles(SOCKET, pks[0].section_config_bytes[0]) - figures.config_cycles(
        SOCKET, figures.config_bytes(SOCKET, 260, 165, 1))
    assert result.switch_load_cycles == three
