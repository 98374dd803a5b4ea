"""map_graph: graph order, names kept, one mapping per distinct kernel, deterministic."""
from __future__ import annotations

from dataclasses import replace

from conftest import deepseek_graph, distinct_kernels

import sn40l_sim.mapper.graph as graph_mod
from sn40l_sim.mapper import disk_cache, map_graph, map_kernel
from sn40l_sim.mapper.graph import clear_memo


def test_kernels_in_graph_order_with_their_own_names(node):
    graph = deepseek_graph("decode")
    placed = map_graph(node, graph)
    assert [pk.kernel for pk in placed.kernels] == graph.kernels()
    assert placed.graph is graph


def test_identical_layers_are_mapped_once(node, monkeypatch):
    graph = deepseek_graph("decode")
    calls = []

    def counting(socket, kernel, tiers=None, **options):
        calls.append((kernel, tuple(sorted(options.items()))))
        return map_kernel(socket, kernel, tiers, **options)

    monkeypatch.setattr(graph_mod, "map_kernel", counting)
    with disk_cache.cache_in(None):                          # the memo alone, no disk entries
        clear_memo()
        placed = map_graph(node, graph)
        # each distinct kernel once as called, and once more for each placement tried beside the
        # others (on a tile of its own, in the room the others leave), never twice alike
        assert {kernel for kernel, _ in calls} == {k.signature() for k in distinct_kernels(graph)}
        assert len(set(calls)) == len(calls) < len(graph.kernels()) // 5
        by_sig = {}
        for pk in placed.kernels:
            other = by_sig.setdefault(pk.kernel.signature(), pk)
            assert replace(pk, kernel=other.kernel) == other
        mapped = len(calls)
        map_graph(node, graph)
    assert len(calls) == mapped                              # the memo survives between calls


def test_mapping_is_deterministic(node):
    graph = deepseek_graph("prefill")
    with disk_cache.cache_in(None):                          # two cold mappings, not one read back
        clear_memo()
        first = map_graph(node, graph)
        clear_memo()
        second = map_graph(node, graph)
    assert first.kernels == second.kernels
    for kernel in distinct_kernels(graph)[:4]:
        assert map_kernel(node.socket, kernel) == map_kernel(node.socket, kernel)
