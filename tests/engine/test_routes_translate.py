"""On rings, tori and hypercubes every route, and every member's order of destinations in the direct
collective, is socket 0's moved by a translation of the topology (dimension-order routing,
docs/architecture.md); full meshes route as before."""
from __future__ import annotations

import pytest

from sn40l_sim.engine.links import LinkTable, shortest_path
from sn40l_sim.engine.peer_order import peer_order
from sn40l_sim.hardware.loader import load_hardware, with_overrides

NODE16 = "hw_configs/sn40l_node16.yaml"


def _table(sockets: int, kind: str) -> LinkTable:
    node = with_overrides(load_hardware(NODE16), {"sockets": sockets, "topology.kind": kind,
                                                  "socket.p2p.ports": max(16, sockets)})
    return LinkTable.from_node(node)


def _plus(dims: tuple[int, ...], a: int, x: int) -> int:
    """Socket ``a`` moved by socket ``x``'s coordinates, digit by digit."""
    out, place = 0, 1
    for size in dims:
        out += ((a // place + x // place) % size) * place
        place *= size
    return out


@pytest.mark.parametrize("sockets, kind, dims", [(64, "ring", (64,)), (8, "ring", (8,)), (5, "ring", (5,)),
                                                 (64, "torus2d", (8, 8)), (8, "torus2d", (4, 2)),
                                                 (16, "hypercube", (2, 2, 2, 2))])
def test_routes_and_destinations_are_translations_of_socket_0s(sockets, kind, dims):
    table = _table(sockets, kind)
    assert table.dims == dims
    zero = [table.route(0, b) for b in range(sockets)]
    for a in range(sockets):
        for b in range(sockets):
            moved = tuple((_plus(dims, u, a), _plus(dims, v, a)) for u, v in zero[b])
            assert table.route(a, _plus(dims, b, a)) == moved
            assert len(moved) == len(shortest_path(table._near, 0, b)) - 1   # still a shortest route
        assert peer_order(a, sockets, dims) == [_plus(dims, b, a) for b in peer_order(0, sockets, dims)]
    if sockets % 2 == 0 and kind == "ring":   # the opposite socket: always the increasing way round
        assert table.route(sockets - 1, sockets // 2 - 1)[0] == (sockets - 1, 0)


def test_full_mesh_routes_are_direct_and_orders_shifted():
    table = LinkTable.from_node(load_hardware(NODE16))
    assert table.dims is None and table.member_dims(list(range(16))) is None
    assert all(table.route(a, b) == ((a, b),) for a in range(16) for b in range(16) if a != b)
    assert peer_order(3, 16, table.dims) == [(3 + k) % 16 for k in range(1, 16)]


def test_a_collective_over_some_sockets_shifts_in_member_numbers():
    table = _table(8, "torus2d")
    assert table.member_dims(list(range(8))) == (4, 2) and table.member_dims(list(range(4))) is None
    assert peer_order(1, 4, table.member_dims(list(range(4)))) == [2, 3, 0]
