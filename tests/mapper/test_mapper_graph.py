"""map_graph: graph order, names kept, one mapping per distinct kernel, deterministic."""
from __future__ import annotations

from dataclasses import replace

from conftest import ROOT, deepseek_graph, distinct_kernels

import sn40l_sim.mapper.graph as graph_mod
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.mapper import disk_cache, map_graph, map_kernel
from sn40l_sim.mapper.graph import clear_memo
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model


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
        assert len(set(calls)) == len(calls) < len(graph.kernels())
        by_sig = {}
        for pk in placed.kernels:
            other = by_sig.setdefault(pk.kernel.signature(), pk)
            assert replace(pk, kernel=other.kernel) == other
        mapped = len(calls)
        map_graph(node, graph)
        assert len(calls) == mapped                          # the memo survives between calls
        # and the count is the distinct kernels' and placements', not the layers': the same model
        # with half its layers maps as many kernels
        clear_memo()
        calls.clear()
        map_graph(node, _decode_graph(layers=31))
    assert len(calls) == mapped


def _decode_graph(layers: int, drafts: int = 0):
    """DeepSeek-R1's decode graph as ``deepseek_graph`` builds it, of the model with ``layers`` layers."""
    model = load_model(ROOT / "graphs" / "deepseek_r1.yaml").model_copy(update={"layers": layers})
    return build_graph(model, Shape("decode", 16, 131072, 131072, drafts), ParallelPlan(16, 16),
                       expert_loading="all")


def test_a_graphs_call_contexts_and_waits_are_worked_out_once_per_distinct_kernel(node, monkeypatch):
    # they read a kernel's operators and collectives, not its name or layer: the windows of its
    # overlapped collectives (a collective timed at 25 sizes each) once, not for each of 61 layers
    graph = deepseek_graph("decode", drafts=2)
    collectives = CollectiveModel.from_node(node)
    asked: dict[str, list] = {"_call": [], "_after": []}

    def recording(name, kernel_at):
        real, got = getattr(graph_mod, name), asked[name]

        def spy(*args):
            got.append(args[kernel_at].signature())
            return real(*args)
        return spy

    monkeypatch.setattr(graph_mod, "_call", recording("_call", 1))      # (socket, kernel, ...)
    monkeypatch.setattr(graph_mod, "_after", recording("_after", 0))    # (kernel, call, ...)
    placed = map_graph(node, graph, collective_cycles=lambda c: collectives.run(c).cycles)
    distinct = {k.signature() for k in graph.kernels()}
    assert set(asked["_call"]) == distinct and len(asked["_call"]) == len(distinct)
    assert set(asked["_after"]) == distinct
    # as many for the model with half its layers: the placements tried, not the layers, count
    worked_out = len(asked["_after"])
    asked["_after"].clear()
    map_graph(node, _decode_graph(layers=31, drafts=2), collective_cycles=lambda c: collectives.run(c).cycles)
    assert len(asked["_after"]) == worked_out
    assert any(pk.kernel.collectives for pk in placed.kernels)
    by_sig = {}
    for pk in placed.kernels:
        other = by_sig.setdefault(pk.kernel.signature(), pk)
        assert replace(pk, kernel=other.kernel) == other


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


def test_map_kernel_names_a_node_or_a_graph_given_for_its_socket_or_kernel(node):
    """From Python, ``map_kernel(node, graph.kernels()[i])`` (the node, not its socket) was an
    AttributeError from pydantic; ``map_kernel(node.socket, graph)`` one from the mapper."""
    import pytest

    from sn40l_sim.errors import InputError
    graph = deepseek_graph("decode")
    kernel = graph.kernels()[1]
    assert map_kernel(node.socket, kernel).cycles > 0
    for socket, given, named in ((node, kernel, "NodeSpec and FusedKernel"), (node.socket, graph, "SocketSpec and KernelGraph")):
        with pytest.raises(InputError, match=rf"^map_kernel: expected a SocketSpec \(node.socket\) and a FusedKernel "
                                             rf"\(graph.kernels\(\)\[i\]\), got {named}$"):
            map_kernel(socket, given)
