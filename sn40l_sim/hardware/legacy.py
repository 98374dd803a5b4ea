"""Old-style socket files, converted to the ``memory:`` tiers on load (with one deprecation line).

Before memory tiers were data, a socket file named its two tiers as top-level sections and kept
their efficiency, reservation and stated capacity in other blocks::

    hbm: {units_per_die: 2, ...}              memory:
    ddr: {units_per_die: 3, ...}                hbm: {units_per_die: 2, ..., efficiency: 0.71,
    calibrated: {hbm_efficiency: 0.71, ...}           reserved_bytes: 8 GiB}
    reserved: {hbm_bytes: 8 GiB, ...}    ->     ddr: {units_per_die: 3, ...}
    stated: {hbm_bytes: 64 GiB, ...}          stated: {memory_bytes: {hbm: 64 GiB}, ...}

:func:`upgrade_socket_document` rewrites such a file (or the ``socket_overrides:`` of a node file)
in place, moving each value's recorded origin with it so that errors still point at the line the
user wrote, and warns once per file with a :class:`FutureWarning`. :func:`upgrade_dotted` does the
same for a dotted override path (``socket.hbm.bytes_per_s_per_unit``). Only the two tiers of the
old schema are known here; new tiers exist only in the new form.

Examples
--------
>>> upgrade_dotted("socket.calibrated.hbm_efficiency"), upgrade_dotted("socket.ddr.latency_s")
('socket.memory.hbm.efficiency', 'socket.memory.ddr.latency_s')
>>> upgrade_dotted("socket.p2p.ports")
'socket.p2p.ports'
"""
from __future__ import annotations

import warnings
from typing import Any

from sn40l_sim.yamlio import Document, FieldPath

#: the memory tiers of the old schema, which named them as top-level sections
LEGACY_TIERS = ("hbm", "ddr")

NEW_FORM = ("memory: {hbm: {units_per_die: ..., capacity_bytes_per_unit: ..., bytes_per_s_per_unit: ..., "
            "latency_s: ..., efficiency: ..., reserved_bytes: ...}, ddr: {...}} and stated.memory_bytes: "
            "{hbm: ...} (see hw_configs/sn40l.yaml)")


def _move_origins(origins: dict, old: FieldPath, new: FieldPath) -> None:
    for key in [k for k in origins if k[: len(old)] == old]:
        origins[new + key[len(old):]] = origins.pop(key)


def _upgrade_mapping(data: dict, origins: dict, at: FieldPath) -> list[str]:
    """Convert the old keys of the socket mapping ``data`` (at ``at`` in the file); return what
    was converted, as the old dotted names."""
    done: list[str] = []

    def memory(origin: tuple) -> dict | None:
        section = data.setdefault("memory", {})
        origins.setdefault(at + ("memory",), origin)
        return section if isinstance(section, dict) else None

    def tier_section(tier: str, origin: tuple) -> dict | None:
        section = memory(origin)
        if section is None:
            return None
        if tier not in section:
            section[tier] = {}
            origins.setdefault(at + ("memory", tier), origin)
        return section[tier] if isinstance(section[tier], dict) else None

    for tier in LEGACY_TIERS:  # the old schema's order, which was the placement order
        if tier not in data:
            continue
        origin = origins.get(at + (tier,), origins.get(at))
        value = data.pop(tier)
        section = memory(origin)
        if section is not None:
            if isinstance(value, dict) and isinstance(section.get(tier), dict):
                section[tier].update(value)
            else:
                section[tier] = value
            _move_origins(origins, at + (tier,), at + ("memory", tier))
        done.append(tier)
    for block, old_suffix, new_key in (("calibrated", "_efficiency", "efficiency"),
                                       ("reserved", "_bytes", "reserved_bytes")):
        block_data = data.get(block)
        if not isinstance(block_data, dict):
            continue
        for tier in LEGACY_TIERS:
            old = f"{tier}{old_suffix}"
            if old not in block_data:
                continue
            value = block_data.pop(old)
            target = tier_section(tier, origins.get(at + (block, old), origins.get(at)))
            if target is not None:  # a tier set to null (removed) keeps no efficiency or reservation
                target[new_key] = value
                _move_origins(origins, at + (block, old), at + ("memory", tier, new_key))
            done.append(f"{block}.{old}")
        if block == "reserved" and not block_data:  # the block itself is gone from the schema
            del data[block]
    # a fitted per-call constant and an assumed reconfiguration time, replaced by mechanisms: the
    # configuration a kernel loads (configuration: sizes, calibrated.config_load_bytes_per_s) and the
    # barrier at a kernel boundary (calibrated.sync_latency_s)
    calibrated = data.get("calibrated")
    if isinstance(calibrated, dict) and "kernel_call_overhead_s" in calibrated:
        calibrated.pop("kernel_call_overhead_s")
        origins.pop(at + ("calibrated", "kernel_call_overhead_s"), None)
        done.append("calibrated.kernel_call_overhead_s (dropped: see configuration: and calibrated.sync_latency_s)")
    if "reconfiguration_cycles" in data:
        data.pop("reconfiguration_cycles")
        origins.pop(at + ("reconfiguration_cycles",), None)
        done.append("reconfiguration_cycles (dropped: see configuration: and calibrated.config_load_bytes_per_s)")
    stated = data.get("stated")
    if isinstance(stated, dict):
        for tier in LEGACY_TIERS:
            old = f"{tier}_bytes"
            if old in stated:
                stated.setdefault("memory_bytes", {})[tier] = stated.pop(old)
                origins.setdefault(at + ("stated", "memory_bytes"), origins.get(at + ("stated", old)))
                _move_origins(origins, at + ("stated", old), at + ("stated", "memory_bytes", tier))
                done.append(f"stated.{old}")
    return done


def upgrade_socket_document(doc: Document) -> None:
    """Convert the old memory-tier keys of one hardware file in place (the socket mapping at the
    top, and a node file's ``socket_overrides:``), warning once if there were any.

    Examples
    --------
    >>> import warnings
    >>> doc = Document({"hbm": {"units_per_die": 2}, "calibrated": {"hbm_efficiency": 0.7, "p2p_efficiency": 0.5},
    ...                 "reserved": {"hbm_bytes": 8}}, __import__("pathlib").Path("old.yaml"),
    ...                {("hbm", "units_per_die"): ("old.yaml", 3), ("calibrated", "hbm_efficiency"): ("old.yaml", 9)})
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     upgrade_socket_document(doc)
    >>> doc.data
    {'calibrated': {'p2p_efficiency': 0.5}, 'memory': {'hbm': {'units_per_die': 2, 'efficiency': 0.7, 'reserved_bytes': 8}}}
    >>> doc.origins[("memory", "hbm", "efficiency")], len(caught)
    (('old.yaml', 9), 1)
    """
    done = _upgrade_mapping(doc.data, doc.origins, ())
    overrides = doc.data.get("socket_overrides")
    if isinstance(overrides, dict):
        done += [f"socket_overrides.{name}" for name in _upgrade_mapping(overrides, doc.origins, ("socket_overrides",))]
    if done:
        warnings.warn(f"{doc.path}: old-style keys ({', '.join(done)}) are deprecated; write "
                      f"{NEW_FORM}", FutureWarning, stacklevel=2)


def upgrade_dotted(path: str) -> str:
    """The new dotted path of an old one (``socket.hbm.x`` -> ``socket.memory.hbm.x``,
    ``socket.calibrated.hbm_efficiency`` -> ``socket.memory.hbm.efficiency``,
    ``socket.reserved.hbm_bytes`` -> ``socket.memory.hbm.reserved_bytes``,
    ``socket.stated.hbm_bytes`` -> ``socket.stated.memory_bytes.hbm``); other paths unchanged."""
    parts = path.split(".")
    head, rest = (parts[:1], parts[1:]) if parts[:1] == ["socket"] else ([], parts)
    if rest and rest[0] in LEGACY_TIERS:
        rest = ["memory"] + rest
    elif len(rest) == 2:
        for tier in LEGACY_TIERS:
            new = {("calibrated", f"{tier}_efficiency"): ["memory", tier, "efficiency"],
                   ("reserved", f"{tier}_bytes"): ["memory", tier, "reserved_bytes"],
                   ("stated", f"{tier}_bytes"): ["stated", "memory_bytes", tier]}.get((rest[0], rest[1]))
            if new is not None:
                rest = new
                break
    return ".".join(head + rest)


def upgrade_overrides(overrides: dict[str, Any], where: str = "<overrides>") -> dict[str, Any]:
    """``overrides`` with old dotted paths replaced by new ones, warning once if any changed."""
    out = {upgrade_dotted(path): value for path, value in overrides.items()}
    changed = [path for path in overrides if upgrade_dotted(path) != path]
    if changed:
        warnings.warn(f"{where}: old-style memory-tier paths are deprecated: "
                      + ", ".join(f"{p} -> {upgrade_dotted(p)}" for p in changed), FutureWarning, stacklevel=2)
    return out
