"""YAML documents that remember where each value came from.

Every loader in the project goes through :func:`load_document`, so every error can name the file,
the field path and the line. A document may start from another with ``base: other.yaml`` (a path
relative to the file): the base is loaded first and this file's mappings are merged over it key by
key, which is how overlays (SN10 over SN40L) change only what differs. Paths are kept as they were
given (a relative path stays relative, normalised), so messages name files as the user wrote them.
Files are read by :func:`~sn40l_sim.yamlio.reading.read_mapping_file` (safe, and parsed once per
process).
"""
from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sn40l_sim.errors import InputError, shown, with_article
from sn40l_sim.yamlio.reading import FieldPath, dotted, read_mapping_file


@dataclass
class Document:
    """Plain data from YAML plus, for every field path, the (file, line) it came from.

    Attributes
    ----------
    data : Any
        Dicts, lists and scalars, after any ``base:`` merge.
    path : Path
        The file that was asked for (not its bases).
    origins : dict
        Field path tuple -> (file, 1-based line).
    """

    data: Any
    path: Path
    origins: dict[FieldPath, tuple[str, int | None]] = field(default_factory=dict)

    def where(self, field_path: FieldPath) -> tuple[str, int | None]:
        """The file and line of ``field_path``, or of its nearest ancestor that has one."""
        probe = tuple(field_path)
        while True:
            if probe in self.origins:
                return self.origins[probe]
            if not probe:
                return str(self.path), None
            probe = probe[:-1]

    def error(self, field_path: FieldPath, message: str) -> InputError:
        """An :class:`InputError` located at ``field_path``."""
        file, line = self.where(field_path)
        return InputError(message, file=file, field=dotted(field_path) or None, line=line)

    def warn(self, field_path: FieldPath, message: str) -> None:
        """A ``UserWarning`` of ``message`` located as :meth:`error` locates an error (a value given
        with ``--set`` is named once, by its option), attributed to the caller's caller."""
        warnings.warn(str(self.error(field_path, message)), stacklevel=3)

    def resolve(self, relative: str, at: FieldPath = ()) -> Path:
        """A path written in this document at field ``at``, relative to the folder of the file
        that wrote it (a ``base:`` file's paths stay relative to the base file); relative when the
        file was given by a relative path, normalised (``experiments/../graphs/m.yaml`` is
        ``graphs/m.yaml``)."""
        file, _ = self.where(at)
        folder = Path(file).parent if at and file != str(self.path) else self.path.parent
        return shown_path(folder / relative)


def shown_path(path: str | Path) -> Path:
    """``path`` as messages show it: normalised, and kept relative when it is relative.

    >>> str(shown_path("experiments/../hw_configs/sn40l.yaml"))
    'hw_configs/sn40l.yaml'
    """
    return Path(os.path.normpath(path))



def not_a_file(path: Path, written: object = None) -> str:
    """Why ``path``, which is not a regular file, cannot be read as one, as messages say it: a
    folder or a named pipe given where a file goes was called "not found" though it is there.
    ``written``, the path as the file gave it, says when it was empty (``hardware: ""`` resolves to
    the file's folder, and was "a folder, not a file").

    >>> not_a_file(Path("/")), not_a_file(Path("/no/such/file.yaml")), not_a_file(Path("/dev/null"))
    ('is a folder, not a file', 'not found', 'is not a regular file (a device or a pipe)')
    >>> not_a_file(Path("."), "")
    'is an empty path; expected the path of a file'
    """
    if isinstance(written, str) and not written.strip():
        return "is an empty path; expected the path of a file"
    return "is a folder, not a file" if path.is_dir() else \
        "is not a regular file (a device or a pipe)" if path.exists() else "not found"


class PathError(ValueError):
    """A dotted path that does not lead anywhere in a document's data."""


def set_value(data: Any, path: FieldPath, value: Any, *, create: bool = True) -> None:
    """Write ``value`` at ``path`` in plain YAML data, in place: the one way the project writes a
    value at a dotted path (sweep axes, ``--set``, hardware overrides, calibration).

    List entries are picked by integer index (or a string of digits) or by their ``name``.
    With ``create``, missing mappings on the way are created; without it, every mapping on the way
    must exist (an override may only change what the document has).

    Raises
    ------
    PathError
        When the path goes through a value that is not a section, names no list entry, or (without
        ``create``) a section the data does not have.

    Examples
    --------
    >>> data = {"policies": [{"name": "full"}, {"name": "snap", "params": {}}], "serving": None}
    >>> set_value(data, ("policies", "snap", "params", "budget"), 8192)
    >>> set_value(data, ("serving", "batch"), 8)
    >>> data["policies"][1], data["serving"]
    ({'name': 'snap', 'params': {'budget': 8192}}, {'batch': 8})
    >>> set_value(data, ("policies", "snap", "name", "x"), 1)
    Traceback (most recent call last):
    ...
    sn40l_sim.yamlio.document.PathError: 'policies.snap.name' is a value ('snap'), not a section
    """
    if not path:
        raise PathError("empty path")
    node = data
    for i, part in enumerate(path):
        last = i == len(path) - 1
        here = ".".join(map(str, path[: i + 1]))
        if isinstance(node, list):
            index = _list_index(node, part, ".".join(map(str, path[:i])))
            if last:
                node[index] = copy.deepcopy(value)
                return
            node = node[index]
        elif isinstance(node, dict):
            if last:
                node[part] = copy.deepcopy(value)
                return
            if not isinstance(node.get(part), (dict, list)):
                if not create:
                    what = "has no value (set the whole section instead)" if part in node \
                        else "is not a section of the document"
                    raise PathError(f"{here!r} {what}")
                if node.get(part) is not None:
                    raise PathError(f"{here!r} is a value ({node[part]!r}), not a section")
                node[part] = {}
            node = node[part]
        else:  # pragma: no cover - the checks above never descend into a scalar
            raise PathError(f"{here!r} is not a section")


def _list_index(items: list, part: str | int, where: str) -> int:
    if isinstance(part, int) or str(part).isdigit():
        if int(part) < len(items):
            return int(part)
        raise PathError(f"{where} has {len(items)} entries, no index {part}")
    names = [item.get("name") for item in items if isinstance(item, dict)]
    if part in names:
        return names.index(part)
    raise PathError(f"{where} has no entry named {part!r} (entries: {', '.join(map(str, names))})")


def merge_into(target: Document, over: dict, over_origins: dict[FieldPath, tuple[str, int]], *,
               at: FieldPath = (), over_at: FieldPath = ()) -> None:
    """Merge the mapping ``over`` into ``target.data`` at ``at``, key by key, in place, and record
    where each merged value came from: the one merge behind ``base:`` overlays and a node file's
    ``socket_overrides:``.

    A mapping met on both sides is merged recursively (and takes the overlay's line), unless the two
    name different ``kind:`` values (another variant of the section); anything else is replaced whole, and the target's origins below it are dropped so that errors point at the
    overlay. ``over_origins`` are the overlay's origins, whose paths start with ``over_at``.

    Examples
    --------
    >>> target = Document({"x": 1, "y": {"p": 2, "q": 3}}, Path("a.yaml"), {("y", "q"): ("a.yaml", 3)})
    >>> merge_into(target, {"y": {"q": 30}}, {("over", "y", "q"): ("b.yaml", 7)}, over_at=("over",))
    >>> target.data, target.where(("y", "q"))
    ({'x': 1, 'y': {'p': 2, 'q': 30}}, ('b.yaml', 7))
    >>> target = Document({"w": {"kind": "poisson", "rate_per_s": 4}}, Path("a.yaml"), {})
    >>> merge_into(target, {"w": {"kind": "trace", "path": "t.csv"}}, {})
    >>> target.data
    {'w': {'kind': 'trace', 'path': 't.csv'}}
    """
    node = target.data
    for part in at:
        node = node[part]
    for key, value in over.items():
        here, there = at + (key,), over_at + (key,)
        if isinstance(value, dict) and isinstance(node.get(key), dict) and not _other_kind(value, node[key]):
            merge_into(target, value, over_origins, at=here, over_at=there)
            if there in over_origins:
                target.origins[here] = over_origins[there]
            continue
        node[key] = value
        for k in [k for k in target.origins if k[: len(here)] == here]:
            del target.origins[k]
        for k, origin in over_origins.items():
            if k[: len(there)] == there:
                target.origins[here + k[len(there):]] = origin


def _other_kind(over: dict, base: dict) -> bool:
    """Whether the overlay's mapping names another ``kind`` than the base's: a different variant of a
    tagged section (a trace workload over a Poisson one), whose keys the base's must not fill."""
    return "kind" in over and "kind" in base and over["kind"] != base["kind"]


def load_document(path: str | Path, *, upgrade: Callable[[Document], None] | None = None,
                  _seen: tuple[Path, ...] = ()) -> Document:
    """Load a YAML file, following ``base:`` overlays, keeping the origin of every value.

    ``upgrade``, if given, rewrites each file's own document in place (data and origins) before
    it is merged with its base, so an old-style file converts alike whether it is the overlay or
    the base (the hardware loader converts old memory-tier keys this way).

    Raises
    ------
    InputError
        For a missing file, a syntax error, a duplicate key, a non-mapping top level or a
        ``base:`` cycle, naming the file and line.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.yaml").write_text("x: 1\\ny: {p: 2, q: 3}\\n")
    >>> _ = (folder / "b.yaml").write_text("base: a.yaml\\ny: {q: 30}\\n")
    >>> doc = load_document(folder / "b.yaml")
    >>> doc.data
    {'x': 1, 'y': {'p': 2, 'q': 30}}
    >>> doc.where(("y", "q"))[1], doc.where(("y", "p"))[1]
    (2, 2)
    """
    # a Python caller's argument (load_hardware, load_model, experiment_with_sets): None or a number
    # was a TypeError from os.path, and "" read as the working folder (".: is a folder")
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, str) and not path.strip():
        raise InputError(f"path: expected the path of a YAML file, got {shown(path)}")
    path = shown_path(path)
    if path.resolve() in _seen:
        raise InputError("'base:' files refer to each other in a cycle", file=path, field="base")
    data, origins = read_mapping_file(path)
    base_rel = data.pop("base", None)
    if upgrade is not None:
        upgrade(Document(data, path, origins))
    if base_rel is None:
        return Document(data, path, origins)
    if not isinstance(base_rel, str):
        file, line = origins.get(("base",), (str(path), None))
        raise InputError("expected a relative path to another YAML file", file=file, field="base", line=line)
    base_path = shown_path(path.parent / base_rel)
    if not base_path.is_file():
        file, line = origins.get(("base",), (str(path), None))
        raise InputError(f"base file {shown(base_rel)} {not_a_file(base_path, base_rel)} (looked for {base_path})",
                         file=file, field="base", line=line)
    merged = load_document(base_path, upgrade=upgrade, _seen=_seen + (path.resolve(),))
    base_kind, own_kind = merged.data.get("kind"), data.get("kind")
    if isinstance(base_kind, str) and isinstance(own_kind, str) and base_kind != own_kind:
        # an experiment over a node file was refused for the node's keys, named in the node's base
        file, line = origins.get(("base",), (str(path), None))
        raise InputError(f"base file {base_rel!r} is {with_article(base_kind)} file (kind: {base_kind}); expected a base of "
                         f"this file's kind, {own_kind}", file=file, field="base", line=line)
    merge_into(merged, data, origins)
    merged.origins[()] = origins[()]  # the overlay is the document: its root is where errors start
    return Document(merged.data, path, merged.origins)


__all__ = ["Document", "shown_path", "PathError", "set_value", "merge_into", "load_document"]
