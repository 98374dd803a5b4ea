"""The networkx topology: what is in it, how it is wired, and how fast it builds."""
from __future__ import annotations

from collections import Counter

import networkx as nx
import pytest
from hw_test_helpers import HW

from sn40l_sim.errors import InputError
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.hardware.topology import (
    bisection_bytes_per_s,
    bisection_links,
    build_topology,
    p2p_graph,
    p2p_links,
    ports_needed,
    socket_pairs,
    torus_dims,
)


@pytest.fixture(scope="module")
def node16():
    return load_hardware(HW / "sn40l_node16.yaml")


@pytest.fixture(scope="module")
def graph16(node16):
    return build_topology(node16)


def test_node16_contents(graph16, node16):
    kinds = Counter(kind for _, kind in graph16.nodes(data="kind"))
    assert kinds["pcu"] == kinds["pmu"] == 16 * 1040
    assert kinds["switch"] == 16 * 4 * 21 * 27
    assert kinds["agcu"] == 16 * 4 * 16
    assert kinds["hbm"] == 16 * 4 and kinds["ddr"] == 16 * 6
    assert (kinds["socket"], kinds["die"], kinds["tile"], kinds["tln"], kinds["p2p"]) == (16, 32, 64, 32, 16)
    assert kinds["host"] == kinds["node"] == 1
    links = Counter(kind for _, _, kind in graph16.edges(data="kind"))
    assert links["p2p"] == 120 and links["die_to_die"] == 16 and links["host"] == 16
    # every edge is a physical link with a bandwidth and a latency
    assert all(d["bytes_per_s"] > 0 and d["latency_s"] >= 0 for _, _, d in graph16.edges(data=True))


def test_every_unit_reaches_memory_and_other_sockets(graph16):
    physical = graph16.subgraph(n for n, k in graph16.nodes(data="kind") if k not in ("node", "socket", "die", "tile"))
    assert nx.is_connected(physical)
    # a PCU reaches its die's HBM through its tile mesh, an AGCU and the TLN
    path = nx.shortest_path(physical, "s0.t0.pcu.10.10", "s0.d0.hbm0")
    kinds = [graph16.nodes[n]["kind"] for n in path]
    assert kinds[0] == "pcu" and "agcu" in kinds and kinds[-2:] == ["tln", "hbm"]
    # the fastest route between sockets is the P2P link, not the (slower) host link
    route = nx.shortest_path(physical, "s0.t0.agcu0", "s9.t3.agcu0", weight="latency_s")
    assert "s0.p2p" in route and "s9.p2p" in route and "host" not in route


def test_checkerboard_and_mesh_edges(graph16, node16):
    pcu = graph16.nodes["s3.t2.pcu.0.0"]
    assert (pcu["kind"], pcu["socket"], pcu["tile"], pcu["die"]) == ("pcu", 3, 2, 1)
    assert graph16.nodes["s3.t2.pmu.0.1"]["kind"] == "pmu"
    assert sorted(graph16["s3.t2.pcu.0.0"]) == ["s3.t2.sw.0.0", "s3.t2.sw.0.1", "s3.t2.sw.1.0", "s3.t2.sw.1.1"]
    mesh = graph16.edges["s3.t2.sw.4.4", "s3.t2.sw.4.5"]
    vec = node16.socket.tile.vector_network
    assert mesh["bytes_per_s"] == pytest.approx(vec.link_bytes_per_cycle * vec.links_per_direction * 1.6e9)
    assert mesh["latency_s"] == pytest.approx(vec.hop_latency_cycles / 1.6e9)
    assert graph16.edges["s3.d0.hbm1", "s3.d0.tln"]["bytes_per_s"] == pytest.approx(409.6e9)


def test_stamped_tiles_do_not_share_edge_data(graph16):
    graph16.edges["s0.t0.sw.0.0", "s0.t0.sw.0.1"]["tag"] = 1
    assert "tag" not in graph16.edges["s1.t0.sw.0.0", "s1.t0.sw.0.1"]
    assert "tag" not in graph16.edges["s0.t0.sw.1.0", "s0.t0.sw.1.1"]


def test_sn10_has_no_hbm_and_one_die():
    graph = build_topology(load_hardware(HW / "sn10.yaml"))
    kinds = Counter(kind for _, kind in graph.nodes(data="kind"))
    assert kinds["hbm"] == 0 and kinds["ddr"] == 6 and kinds["die"] == 1 and kinds["pcu"] == 640
    assert not any(k == "die_to_die" for _, _, k in graph.edges(data="kind"))


def test_p2p_links_and_graph(node16):
    links = p2p_links(node16)
    assert len(links) == 16 * 15 // 2
    assert all(link.socket_a < link.socket_b and link.bytes_per_s == 50e9
               and link.latency_s == pytest.approx(93.75e-9) for link in links)
    doubled = with_overrides(node16, {"topology.links_per_pair": 2, "sockets": 8})
    assert {link.bytes_per_s for link in p2p_links(doubled)} == {100e9}
    g = p2p_graph(doubled)
    assert g.number_of_nodes() == 8 and all(d["links"] == 2 for _, _, d in g.edges(data=True))


def test_p2p_links_name_their_units_and_still_unpack(node16):
    # the fields say what each number is (bytes per second, seconds); callers that unpack the old
    # 4-tuples (LinkTable, scripts) keep working
    link = p2p_links(node16)[0]
    assert link._fields == ("socket_a", "socket_b", "bytes_per_s", "latency_s")
    a, b, bytes_per_s, latency_s = link
    assert (a, b, bytes_per_s, latency_s) == (link.socket_a, link.socket_b, link.bytes_per_s, link.latency_s)
    assert (a, b, bytes_per_s) == (0, 1, 50e9)


@pytest.mark.parametrize("n, kind, degree", [(16, "full_mesh", 15), (16, "ring", 2), (2, "ring", 1), (16, "torus2d", 4),
                                             (8, "torus2d", 3), (16, "hypercube", 4), (1, "full_mesh", 0)])
def test_ports_needed(n, kind, degree):
    assert ports_needed(n, kind, 1) == degree
    assert ports_needed(n, kind, 3) == 3 * degree


def test_ports_needed_is_the_busiest_sockets_degree_of_the_enumerated_pairs():
    # the closed form against the pairs themselves, on every size up to 64 (odd tori, rings of two)
    for kind in ("full_mesh", "ring", "torus2d", "hypercube"):
        for n in (n for n in range(1, 65) if kind != "hypercube" or n & (n - 1) == 0):
            degree = Counter(s for pair in socket_pairs(n, kind) for s in pair)
            assert ports_needed(n, kind, 2) == 2 * max(degree.values(), default=0), (kind, n)
    with pytest.raises(InputError, match="power-of-two"):
        ports_needed(12, "hypercube", 1)


def test_a_full_mesh_of_a_hundred_thousand_sockets_is_refused_without_listing_its_pairs(node16):
    # its 5e9 pairs were enumerated to count the ports: 23 GB, then the OOM killer
    with pytest.raises(InputError, match="needs 99999 P2P ports per socket, but socket.p2p.ports is 16"):
        with_overrides(node16, {"sockets": 100_000})


def test_socket_pairs_are_symmetric_topologies():
    assert torus_dims(12) == (3, 4)
    for kind in ("ring", "torus2d", "hypercube"):
        g = nx.Graph(socket_pairs(16, kind))
        assert len({d for _, d in g.degree}) == 1  # vertex-transitive: every socket alike
    with pytest.raises(InputError, match="power-of-two"):
        socket_pairs(12, "hypercube")


def test_bisection_matches_brute_force_on_odd_and_weighted_graphs():
    g = nx.path_graph(5)  # halves of 2 and 3: one edge cut
    assert bisection_bytes_per_s(g) == 1.0
    g = nx.complete_graph(5)
    assert bisection_bytes_per_s(g) == 6.0  # 2 x 3
    g = nx.Graph()
    g.add_edge(0, 1, bytes_per_s=10.0)
    g.add_edge(2, 3, bytes_per_s=10.0)
    g.add_edge(1, 2, bytes_per_s=1.0)
    assert bisection_bytes_per_s(g) == 1.0
    big = nx.cycle_graph(24)  # above the exact limit: the heuristic still finds a 2-edge cut
    assert bisection_bytes_per_s(big) >= 2.0


def test_closed_form_bisections_match_every_halving_up_to_20_sockets():
    # the closed forms that replace the heuristic above 20 sockets, checked where the halvings can be enumerated
    checked = 0
    for n in range(1, 21):
        for kind in ("full_mesh", "ring", "torus2d", "hypercube"):
            if kind == "hypercube" and n & (n - 1):
                continue
            links = bisection_links(n, kind)
            if links is None:  # a torus with an odd longer side
                assert kind == "torus2d" and max(torus_dims(n)) % 2 == 1
                continue
            graph = nx.Graph(socket_pairs(n, kind))
            graph.add_nodes_from(range(n))
            assert bisection_bytes_per_s(graph, weight=None) == links, (n, kind)
            checked += 1
    assert checked == 59  # 20 full meshes, 20 rings, 14 tori (all but 2 x 3, 3 x 3, 2 x 5, 2 x 7, 3 x 5, 4 x 5), 5 hypercubes


@pytest.mark.parametrize("sockets, kind, links", [(32, "ring", 2), (64, "ring", 2), (32, "hypercube", 16),
                                                  (64, "hypercube", 32), (32, "torus2d", 8), (64, "torus2d", 16)])
def test_sweep_sized_nodes_report_their_minimum_cut(node16, sockets, kind, links):
    # a sweep's hardware.sockets beyond 20: the heuristic cut 32- and 64-socket rings at 4 and 8 links
    node = with_overrides(node16, {"sockets": sockets, "topology.kind": kind, "topology.links_per_pair": 2})
    assert figures.p2p_bisection_bytes_per_s(node) == links * 2 * 50e9
    assert figures.p2p_bisection_is_exact(node)
    odd_torus = with_overrides(node16, {"sockets": 35, "topology.kind": "torus2d"})  # 5 x 7: no closed form
    assert not figures.p2p_bisection_is_exact(odd_torus)
