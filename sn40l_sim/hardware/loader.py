"""Hardware YAML -> validated, immutable :class:`~sn40l_sim.hardware.spec.NodeSpec`.

Two kinds of file:

- ``kind: socket`` describes one socket (every field of :class:`SocketSpec`); loading it gives a
  one-socket node.
- ``kind: node`` names its socket file by relative path (``socket: sn40l.yaml``) instead of copying
  it, and adds ``sockets:``, ``topology:``, optionally ``host_link:`` and ``socket_overrides:``
  (a mapping merged over the socket file, e.g. to try another HBM bandwidth).

A socket's memory tiers are the named entries of ``memory:``, fastest first. Files written before
that (top-level ``hbm:``/``ddr:``, ``calibrated.hbm_efficiency``, ``reserved.hbm_bytes``) still
load: :mod:`sn40l_sim.hardware.legacy` converts them and warns once per file.

Either kind may start from another file with ``base:`` (an overlay, see :mod:`sn40l_sim.yamlio`).
After the schema, :func:`check_socket` and :func:`check_node` test what a schema cannot: the
published totals against the per-unit values, the tile grid against its units, the P2P ports
against the topology, the calibrated values against their physical bounds.

Examples
--------
>>> node = load_hardware("hw_configs/sn40l_node16.yaml")
>>> node.sockets, node.topology.kind, node.socket.name
(16, 'full_mesh', 'SN40L')
>>> faster = with_overrides(node, {"socket.memory.hbm.bytes_per_s_per_unit": "800 GB/s"})
>>> faster.socket.memory["hbm"].bytes_per_s_per_unit, node.socket.memory["hbm"].bytes_per_s_per_unit
(800000000000.0, 409600000000.0)
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from sn40l_sim.errors import InputError, with_article
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.grid import socket_tiles_error, tile_grid_error
from sn40l_sim.hardware.legacy import upgrade_overrides, upgrade_socket_document
from sn40l_sim.hardware.node_checks import check_node
from sn40l_sim.hardware.node_names import renamed_node
from sn40l_sim.hardware.spec import NodeSpec, SocketSpec, TopologySpec, calibrated_parameters
from sn40l_sim.quantities import format_bytes
from sn40l_sim.schema import NAME_LIMIT, name_too_long, validate
from sn40l_sim.yamlio import Document, FieldPath, PathError, load_document, merge_into, not_a_file, set_value

HARDWARE_KINDS = ("socket", "node")
#: the file an error in hardware overrides (a sweep axis, --set, a calibration pass) names
OVERRIDES_FILE = "<overrides>"
#: published totals are rounded; the stated peak FLOP/s must agree within this fraction
_STATED_FLOPS_TOLERANCE = 0.005
_STATED_EXACT_TOLERANCE = 1e-9


def document_kind(doc: Document, expected: tuple[str, ...] | None = None) -> str:
    """Pop and return the top-level ``kind:`` of a document, checking it is one of ``expected``."""
    kind = doc.data.pop("kind", None)
    if kind is None:
        raise doc.error(("kind",), f"required field is missing: expected 'kind: <{' | '.join(expected or HARDWARE_KINDS)}>' "
                                   "at the top of the file")
    if expected is not None and kind not in expected:
        origin, _ = doc.where(("kind",))
        if origin != str(doc.path):
            # the kind comes through base: (a node overlay without a kind of its own whose base: names a
            # model file): the file given is named, not the base the user did not touch, as an
            # experiment's loader does (sn40l_sim/study/experiment.py)
            raise InputError(f"this is {with_article(kind)} file through its base: ({origin} says kind: {kind}); expected one "
                             f"of {list(expected)}", file=doc.path, field="base")
        raise doc.error(("kind",), f"expected one of {list(expected)}, got {kind!r}")
    return kind


def load_hardware(path: str | Path) -> NodeSpec:
    """Load a socket or node file into a validated :class:`NodeSpec`.

    Parameters
    ----------
    path : str or Path
        A ``kind: node`` or ``kind: socket`` YAML file (``hw_configs/``; a socket is a 1-socket node).

    Returns
    -------
    NodeSpec
        The node, every quantity in base units (bytes, bytes/s, Hz, seconds), frozen: change a field
        with :func:`with_overrides`.

    Raises
    ------
    InputError
        Naming the file, the field path and the line, for any syntax, schema or consistency error.

    Examples
    --------
    >>> node = load_hardware("hw_configs/sn40l_node16.yaml")
    >>> node.name, node.sockets, node.socket.clock_hz, node.socket.memory["hbm"].bytes_per_s_per_unit
    ('SN40L-16', 16, 1600000000.0, 409600000000.0)
    """
    doc = load_document(path, upgrade=upgrade_socket_document)
    kind = document_kind(doc, HARDWARE_KINDS)
    if kind == "socket":
        socket = load_socket_document(doc)
        return NodeSpec(name=socket.name, socket=socket, sockets=1, topology=TopologySpec(kind="full_mesh"))
    return _load_node(doc)


def load_socket_document(doc: Document) -> SocketSpec:
    """Validate and check a socket document (``kind`` already popped)."""
    socket = validate(SocketSpec, doc)
    check_socket(socket, doc, stated=True)
    warn_tier_order(socket, doc)
    return socket


#: words of the warning :func:`warn_tier_order` gives, by which an experiment whose ``memory.order``
#: places the tiers itself silences it (sn40l_sim/study/assemble.py)
TIER_ORDER_WARNING = "tiers are placed in the order listed"


def warn_tier_order(socket: SocketSpec, doc: Document) -> None:
    """Warn, at the faster tier's line, when a file lists a memory tier after a slower one: tiers
    are placed in the order listed (fastest first, docs/architecture.md), so a file listing
    ``ddr`` above ``hbm`` ran every weight and cache from DDR, two hundred times slower, without a
    word. Only files warn: a sweep or ``--set`` that slows a tier keeps the file's placement on
    purpose."""
    tiers = list(socket.memory)
    for i, tier in enumerate(tiers):
        rate = figures.memory_bytes_per_s(socket, tier)
        slower = [t for t in tiers[:i] if figures.memory_bytes_per_s(socket, t) < rate]
        if slower:
            (file, line), before = doc.where(("memory", tier)), slower[0]
            where = f"{file}:{line}" if line is not None else file
            warnings.warn(f"{where}: memory.{tier}: listed after {before}, a slower tier "
                          f"({_rate_text(rate)} against {_rate_text(figures.memory_bytes_per_s(socket, before))} a "
                          f"socket): {TIER_ORDER_WARNING}, so weights, KV and activations fill "
                          f"{before} first; list the tiers fastest first (a tier an overlay adds goes after its "
                          "base's wherever it is written: write a whole socket file), or order them per experiment "
                          "with memory.order", stacklevel=2)
            return


def _rate_text(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e12:.4g} TB/s" if bytes_per_s >= 1e12 else f"{bytes_per_s / 1e9:.4g} GB/s"


def _node_socket_document(doc: Document) -> Document:
    """The socket document a node file names, with the node's ``socket_overrides`` merged in
    (their origins pointing at the node file); ``kind`` already popped."""
    data = doc.data
    socket_ref = data.get("socket")
    if socket_ref is None:
        raise doc.error(("socket",), "required field is missing: the relative path of the socket file")
    if not isinstance(socket_ref, str):
        raise doc.error(("socket",), f"expected the relative path of a socket file, got {type(socket_ref).__name__}")
    socket_path = doc.resolve(socket_ref, ("socket",))   # relative to the file that wrote it (a base: too)
    if not socket_path.is_file():
        raise doc.error(("socket",), f"socket file {socket_ref!r} {not_a_file(socket_path, socket_ref)} (looked for {socket_path})")
    socket_doc = load_document(socket_path, upgrade=upgrade_socket_document)
    try:
        document_kind(socket_doc, ("socket",))
    except InputError as exc:
        # the kind may come from a base: of the file named, so name the file the node wrote
        exc.message += f" ({socket_ref} is named as 'socket:' in {doc.path.name}, which needs a socket file)"
        raise
    overrides = data.get("socket_overrides", {})
    if not isinstance(overrides, dict):
        raise doc.error(("socket_overrides",), "expected a mapping of socket fields to new values")
    merge_into(socket_doc, overrides, doc.origins, over_at=("socket_overrides",))
    return socket_doc


def socket_document(path: str | Path) -> Document:
    """The socket description of a socket or node file as a document (after ``base:`` overlays,
    old-style conversion and a node's ``socket_overrides``), with the file and line of every value:
    what ``calibrate --write`` edits. Field paths are relative to the socket (``memory.hbm.efficiency``).
    """
    doc = load_document(path, upgrade=upgrade_socket_document)
    if document_kind(doc, HARDWARE_KINDS) == "socket":
        return doc
    return _node_socket_document(doc)


def _load_node(doc: Document) -> NodeSpec:
    socket_doc = _node_socket_document(doc)
    try:
        socket = load_socket_document(socket_doc)
    except InputError as exc:
        if exc.file == str(doc.path) and exc.field:  # the bad value came from socket_overrides
            exc.field = f"socket_overrides.{exc.field}"
        raise
    node_data = {k: v for k, v in doc.data.items() if k != "socket_overrides"}
    node_data["socket"] = socket
    node = validate(NodeSpec, Document(node_data, doc.path, doc.origins))
    if len(node.name) > NAME_LIMIT:   # a node's name may grow by overrides, not in its file (schema.DerivedName)
        raise doc.error(("name",), name_too_long(node.name))
    check_node(node, doc)
    return node


def _fail(doc: Document, at: FieldPath, message: str) -> InputError:
    return doc.error(at, message)


def check_socket(socket: SocketSpec, doc: Document, *, stated: bool = True, prefix: FieldPath = ()) -> None:
    """Consistency checks a schema cannot express; ``stated=False`` skips the published totals.

    Raises
    ------
    InputError
        At the field (``prefix`` + path, located in ``doc``) that disagrees.
    """
    def at(*path: str | int) -> FieldPath:
        return prefix + path

    if "bf16" not in socket.pcu.macs_per_lane_stage_per_cycle:
        raise _fail(doc, at("pcu", "macs_per_lane_stage_per_cycle"), "a rate for bf16 is required")
    for dtype in socket.pcu.macs_per_lane_stage_per_cycle:   # positive by the schema; whole MACs or whole cycles
        if (problem := figures.mac_rate_problem(socket, dtype)) is not None:
            raise _fail(doc, at("pcu", "macs_per_lane_stage_per_cycle", dtype), problem)
    if sorted(socket.pcu.modes) != ["simd", "systolic"]:
        # the mapper runs every GEMM on the systolic array and the rest on the SIMD lanes
        # (sn40l_sim/mapper/tiling.py): a PCU lacking either is not modelled, and was mapped as if it had both
        raise _fail(doc, at("pcu", "modes"), "expected both modes, [systolic, simd]: the simulator maps GEMMs "
                                             "systolic and other work on SIMD lanes, and models no PCU without "
                                             f"either; got {list(socket.pcu.modes)}")
    if socket.pcu.pipeline_latency_cycles < socket.pcu.stages:   # a value crosses each stage, a cycle each
        raise _fail(doc, at("pcu", "pipeline_latency_cycles"), f"a value crosses each of the {socket.pcu.stages} stages "
                    f"in a cycle at least; expected at least {socket.pcu.stages} cycles, got {socket.pcu.pipeline_latency_cycles}")

    pmu = socket.pmu
    row = pmu.banks * pmu.bank_width_bytes   # a port reads one row across all banks (hardware/units/pmu.py)
    if pmu.capacity_bytes < row or pmu.capacity_bytes % row:
        raise _fail(doc, at("pmu", "capacity_bytes"), f"a PMU of {pmu.banks} banks x {pmu.bank_width_bytes} B holds "
                                                      f"whole rows of {row} B; expected a multiple of {row} B, got "
                                                      f"{pmu.capacity_bytes:g} B")
    grid_error = tile_grid_error(socket.tile)
    if grid_error is not None:
        raise _fail(doc, at("tile", grid_error[0]), grid_error[1])
    tile = socket.tile
    if tile.agcus > 2 * (tile.grid_cols + 1):
        raise _fail(doc, at("tile", "agcus"), f"{tile.agcus} AGCUs do not fit on the top and bottom edges of a "
                                              f"{tile.grid_cols + 1}-switch-wide mesh (at most {2 * (tile.grid_cols + 1)})")
    if (tiles_error := socket_tiles_error(socket.dies, socket.tiles_per_die)) is not None:
        raise _fail(doc, at(tiles_error[0]), tiles_error[1])
    if socket.dies > 1 and socket.die_to_die is None:
        raise _fail(doc, at("die_to_die"), f"a socket of {socket.dies} dies needs a die_to_die link")

    for tier, spec in socket.memory.items():
        total = figures.memory_bytes(socket, tier)
        if spec.reserved_bytes and spec.reserved_bytes >= total:
            raise _fail(doc, at("memory", tier, "reserved_bytes"),
                        f"reserves {format_bytes(spec.reserved_bytes)} but the socket has only {format_bytes(total)} "
                        f"of {tier.upper()}: nothing would be left to use (expected less than the tier's capacity)")

    for path, param in calibrated_parameters(socket).items():
        if not param.low <= param.value <= param.high:
            raise _fail(doc, at(*path.split(".")),
                        f"{param.value:g} is outside the physical bounds [{param.low:g}, {param.high:g}]")
    if stated:
        _check_stated(socket, doc, at)


def _check_stated(socket: SocketSpec, doc: Document, at) -> None:
    """Each published total against the product of the per-unit fields it follows from; the error
    shows every factor and where each was set, since any of them may be the one that changed."""
    s, pcu = socket.stated, socket.pcu
    counts = ("dies", "tiles_per_die")
    dies = f"{socket.dies} die{'s' if socket.dies > 1 else ''}"
    grid = f"{dies} x {socket.tiles_per_die} tiles"
    flops = figures.peak_flops(socket)
    # stated path -> (stated value, derived value, how the derived one is reached, its fields)
    claims: dict[tuple[str, ...], tuple[float | None, float, str, tuple[str, ...]]] = {
        ("pcus",): (s.pcus, figures.pcus(socket), f"{grid} x {socket.tile.pcus} PCUs = {figures.pcus(socket)}",
                    counts + ("tile.pcus",)),
        ("pmus",): (s.pmus, figures.pmus(socket), f"{grid} x {socket.tile.pmus} PMUs = {figures.pmus(socket)}",
                    counts + ("tile.pmus",)),
        ("sram_bytes",): (s.sram_bytes, figures.sram_bytes(socket),
                          f"{figures.pmus(socket)} PMUs x {format_bytes(socket.pmu.capacity_bytes)} = "
                          f"{_bytes_text(figures.sram_bytes(socket))}", counts + ("tile.pmus", "pmu.capacity_bytes")),
        ("bf16_flops",): (s.bf16_flops, flops,
                          f"{figures.pcus(socket)} PCUs x {pcu.lanes} lanes x {pcu.stages} stages x "
                          f"{pcu.macs_per_lane_stage_per_cycle['bf16']:g} MAC x 2 FLOP x {socket.clock_hz / 1e9:g} GHz "
                          f"= {_flops_text(flops)}",
                          counts + ("tile.pcus", "pcu.lanes", "pcu.stages", "pcu.macs_per_lane_stage_per_cycle.bf16",
                                    "clock_hz")),
    }
    for tier, claim in s.memory_bytes.items():
        spec = socket.memory.get(tier)
        if spec is None:
            claims[("memory_bytes", tier)] = (claim, 0.0, f"the socket has no {tier} tier", ("memory",))
            continue
        total = figures.memory_bytes(socket, tier)
        claims[("memory_bytes", tier)] = (
            claim, total, f"{dies} x {spec.units_per_die} {tier.upper()} units x "
                          f"{format_bytes(spec.capacity_bytes_per_unit)} = {_bytes_text(total)}",
            ("dies", f"memory.{tier}.units_per_die", f"memory.{tier}.capacity_bytes_per_unit"))
    for name, (claim, value, how, causes) in claims.items():
        if claim is None:
            continue
        tolerance = _STATED_FLOPS_TOLERANCE if name == ("bf16_flops",) else _STATED_EXACT_TOLERANCE
        if abs(value - claim) > tolerance * claim:
            where = ", ".join(_where(doc, at(*cause.split("."))) for cause in causes)
            text = (_flops_text(claim) if name == ("bf16_flops",) else _bytes_text(claim)
                    if name[0] in ("sram_bytes", "memory_bytes") else f"{claim:g}")
            stated = ".".join(("stated",) + name)
            raise _fail(doc, at("stated", *name),
                        f"stated {text} but {how} ({where}); fix one of them, or set {stated}: null "
                        "(stated: null for all) if the socket is hypothetical")


def _bytes_text(n_bytes: float) -> str:
    return f"{format_bytes(n_bytes)} ({n_bytes:,.0f} B)" if n_bytes else "0 B"


def _flops_text(flops: float) -> str:
    return f"{flops / 1e12:.6g} TFLOPS"


def _where(doc: Document, path: FieldPath) -> str:
    """``field at file:line`` for an error message, or the field alone where no line is known."""
    file, line = doc.where(path)
    name = ".".join(map(str, path))
    return f"{name} at {Path(file).name}:{line}" if line else name


def with_overrides(node: NodeSpec, overrides: dict[str, object]) -> NodeSpec:
    """A new validated node with dotted-path fields replaced, for sweeps and calibration.

    Values may be readable quantities (``"800 GB/s"``). The structural checks run again; the
    published totals under ``stated`` are not re-checked, because an overridden part is a
    hypothetical one. A node whose fields an override changes is named after the file's node and
    the changes (``SN40L-16 (sockets 8)``), so records and plots tell it from the file's node;
    overrides that change nothing, or that set ``name`` themselves, keep the name.

    Parameters
    ----------
    node : NodeSpec
        The starting point (left unchanged).
    overrides : dict
        Dotted path under the node (``"socket.memory.hbm.bytes_per_s_per_unit"``, ``"sockets"``) ->
        value; ``"socket"`` may name a socket (or node) file, whose socket replaces the node's.
        Old-style memory paths (``socket.hbm.*``, ``socket.calibrated.hbm_efficiency``) are
        converted with a deprecation warning.

    Raises
    ------
    InputError
        Located at ``<overrides>`` and the dotted path, for unknown fields or bad values.

    Examples
    --------
    >>> node = load_hardware("hw_configs/sn40l_node16.yaml")
    >>> eight = with_overrides(node, {"sockets": 8})
    >>> eight.sockets, eight.name, with_overrides(node, {"sockets": 16}).name
    (8, 'SN40L-16 (sockets 8)', 'SN40L-16')
    >>> with_overrides(node, {"socket.memory.hbm.bytes_per_s_per_unit": "fast"})
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: <overrides>: socket.memory.hbm.bytes_per_s_per_unit: expected a bandwidth quantity such as '1.6 TB/s', got 'fast'
    >>> with_overrides(node, [("sockets", 8)])
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: <overrides>: expected a mapping of dotted field paths to values, such as {'sockets': 8}, got a list
    >>> sn30 = with_overrides(node, {"socket": "hw_configs/sn30.yaml"})
    >>> sn30.socket.name, sn30.sockets, sn30.name
    ('SN30', 16, 'SN40L-16 (socket hw_configs/sn30.yaml)')
    """
    _check_override_paths(overrides)
    overrides = upgrade_overrides(overrides)
    values = dict(overrides)
    if isinstance(values.get("socket"), (str, Path)):
        # a socket file's path, as a node file's socket: takes (--set hardware.socket=hw_configs/sn10.yaml
        # was refused as "expected a mapping"); the node is named after the path as given
        values["socket"] = load_hardware(values["socket"]).socket
    data = node.model_dump()
    for dotted_path in sorted(values):
        value = values[dotted_path]
        try:
            set_value(data, tuple(dotted_path.split(".")), value.model_dump() if isinstance(value, BaseModel)
                      else value, create=False)
        except PathError as exc:
            raise InputError(f"cannot override {dotted_path!r}: {exc}", file=OVERRIDES_FILE, field=dotted_path) from None
    # the overridden fields are the ones written: check_node blames the one changed, not its first
    doc = Document(data, Path(OVERRIDES_FILE), {tuple(path.split(".")): (OVERRIDES_FILE, None) for path in values})
    new = validate(NodeSpec, doc)
    check_socket(new.socket, doc, stated=False, prefix=("socket",))
    check_node(new, doc)
    return renamed_node(node, new, overrides)


def _check_override_paths(overrides: object) -> None:
    """Refuse overrides that are not a mapping of dotted paths (a Python caller's list of pairs, a
    number as a key) in the words of the other override errors, not as an ``AttributeError``."""
    if not isinstance(overrides, Mapping):
        raise InputError("expected a mapping of dotted field paths to values, such as {'sockets': 8}, "
                         f"got a {type(overrides).__name__}", file=OVERRIDES_FILE)
    for path in overrides:
        if not isinstance(path, str) or not path or "" in path.split("."):
            raise InputError(f"override keys must be dotted field paths such as 'socket.clock_hz', got {path!r}",
                             file=OVERRIDES_FILE)
