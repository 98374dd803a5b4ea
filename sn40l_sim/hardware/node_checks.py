"""Checks of a node a schema cannot express: its topology must be buildable with the socket's P2P
ports (:func:`check_node`, run by the loader on every node file and every changed node). An error
is located at the field the node's own file wrote, and names the way out."""
from __future__ import annotations

from sn40l_sim.errors import InputError
from sn40l_sim.hardware.spec import NodeSpec, TopologySpec
from sn40l_sim.hardware.topology import ports_needed
from sn40l_sim.yamlio import Document, FieldPath


def check_node(node: NodeSpec, doc: Document) -> None:
    """Node-level checks: the topology must be buildable with the socket's P2P ports. The error is
    located at the field the node's own file wrote (``sockets: 32`` over a base's full mesh), not
    at the base's line it disagrees with."""
    kind, n, per_pair = node.topology.kind, node.sockets, node.topology.links_per_pair
    topology = (("topology", "kind"), ("sockets",))
    try:
        needed = ports_needed(n, kind, per_pair)
    except InputError as exc:
        raise doc.error(_own_field(doc, topology), exc.message) from None
    if needed > node.socket.p2p.ports:
        at = _own_field(doc, topology + (("topology", "links_per_pair"), ("socket_overrides", "p2p", "ports")))
        raise doc.error(at,
                    f"a {kind} of {n} sockets with {per_pair} link(s) per pair needs {needed} P2P ports per "
                    f"socket, but socket.p2p.ports is {node.socket.p2p.ports}"
                    f"{_other_topologies(n, kind, per_pair, node.socket.p2p.ports)}")


def _other_topologies(sockets: int, kind: str, per_pair: int, ports: int) -> str:
    """The way out of the ports error: more ports, or a topology of ``sockets`` whose need fits in
    ``ports`` (``"; raise it, or choose a topology that fits in 16 (ring: 2, torus2d: 4)"``)."""
    fits = []
    for other in TopologySpec.model_fields["kind"].annotation.__args__:
        try:
            need = ports_needed(sockets, other, per_pair)
        except InputError:   # a hypercube of a count that is not a power of two
            continue
        if other != kind and need <= ports:
            fits.append(f"{other}: {need}")
    return f"; raise it, or choose a topology that fits in {ports} ({', '.join(fits)})" if fits else "; raise it"


def _own_field(doc: Document, candidates: tuple[FieldPath, ...]) -> FieldPath:
    """The first of ``candidates`` that ``doc``'s own file wrote (not a ``base:`` it starts from),
    else the first."""
    for path in candidates:
        origin = doc.origins.get(path)
        if origin is not None and origin[0] == str(doc.path):
            return path
    return candidates[0]
