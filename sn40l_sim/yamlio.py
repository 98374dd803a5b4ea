"""YAML documents that remember where each value came from.

Every loader in the project goes through :func:`load_document`, so every error can name the file,
the field path and the line. A document may start from another with ``base: other.yaml`` (a path
relative to the file): the base is loaded first and this file's mappings are merged over it key by
key, which is how overlays (SN10 over SN40L) change only what differs. Paths are kept as they were
given (a relative path stays relative, normalised), so messages name files as the user wrote them.

Reading is safe against hostile or broken files (:func:`parse_yaml`): a file is text of at most
:data:`MAX_FILE_BYTES`, nested at most :data:`MAX_DEPTH` deep, whose aliases expand to at most
:data:`MAX_ALIAS_VALUES` values and never contain themselves; mapping keys are strings; values are
YAML 1.2 core scalars (``1e30`` is a number, ``yes``, ``2024-01-31`` and ``1:30`` are text, as
written) and no tag other than the plain ones (``!!binary``, ``!!set``, ``!!timestamp``, a custom
``!tag`` are refused). Each refusal is one :class:`~sn40l_sim.errors.InputError` with the file and
line.

Examples
--------
>>> parse_yaml("a: 1e3\\nb: yes\\nc: 2024-13-45\\nd: .nan\\n", "x.yaml")[0]
{'a': 1000.0, 'b': 'yes', 'c': '2024-13-45', 'd': nan}
>>> parse_yaml("a: &x [1, 2]\\nb: *x\\n", "x.yaml")[0]
{'a': [1, 2], 'b': [1, 2]}
>>> parse_yaml("a: &x [*x]\\n", "x.yaml")
Traceback (most recent call last):
...
sn40l_sim.errors.InputError: x.yaml:1: a[0]: an alias (*name) refers to a value that contains it (a cycle)
>>> parse_yaml("1: one\\n", "x.yaml")
Traceback (most recent call last):
...
sn40l_sim.errors.InputError: x.yaml:1: mapping keys must be text, got 1 (quote it: '1')
"""
from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from sn40l_sim.errors import InputError

#: largest YAML file read (configuration files are a few kB)
MAX_FILE_BYTES = 4 * 2**20
#: deepest nesting of mappings and lists (the project's files nest at most 6 deep)
MAX_DEPTH = 32
#: most values that aliases (``*name``) may expand to in one file ("billion laughs" stop here)
MAX_ALIAS_VALUES = 10_000

FieldPath = tuple[str | int, ...]


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
    origins: dict[FieldPath, tuple[str, int]] = field(default_factory=dict)

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


def dotted(field_path: FieldPath) -> str:
    """``("socket", "hbm", 0, "capacity")`` -> ``"socket.hbm[0].capacity"``.

    >>> dotted(("socket", "hbm", 0, "capacity"))
    'socket.hbm[0].capacity'
    """
    out = ""
    for part in field_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


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
    sn40l_sim.yamlio.PathError: 'policies.snap.name' is a value ('snap'), not a section
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


_TAG = "tag:yaml.org,2002:"
#: the YAML 1.2 core schema's plain scalars (YAML 1.1's yes/no/on/off, dates, sexagesimal and
#: octal forms are text here: a value is what it looks like, never silently something else)
_CORE = (
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("int", r"^(?:[-+]?[0-9][0-9_]*|0x[0-9a-fA-F]+|0o[0-7]+)$", "-+0123456789"),
    ("float", r"^(?:[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?"
              r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", "-+0123456789."),
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
)


class _CoreResolver(BaseResolver):
    """Implicit tags of the YAML 1.2 core schema only."""


for _name, _pattern, _first in _CORE:
    _CoreResolver.add_implicit_resolver(_TAG + _name, re.compile(_pattern), list(_first))


class _Refused(yaml.YAMLError):
    """A file the loader refuses to read further (too deep)."""

    def __init__(self, message: str, mark: Any) -> None:
        super().__init__(message)
        self.message, self.mark = message, mark


class _SafeComposer(Reader, Scanner, Parser, Composer, _CoreResolver):
    """Composes the node graph of one document, refusing nesting deeper than :data:`MAX_DEPTH`
    before Python's recursion limit is near."""

    def __init__(self, text: str) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _CoreResolver.__init__(self)
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Refused(f"values nested more than {MAX_DEPTH} deep; expected a configuration file",
                               self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


#: tags a value may carry (plain YAML); anything else is refused
_PLAIN_TAGS = frozenset(_TAG + name for name in ("str", "int", "float", "bool", "null", "seq", "map"))


class _Walk:
    """Plain data from a composed node graph, with the origin of every value."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.origins: dict[FieldPath, tuple[str, int]] = {}
        self.seen: set[int] = set()
        self.alias_values = 0

    def error(self, node: yaml.Node, prefix: FieldPath, message: str) -> InputError:
        return InputError(message, file=self.file, field=dotted(prefix) or None, line=node.start_mark.line + 1)

    def value(self, node: yaml.Node, prefix: FieldPath = (), inside: tuple[int, ...] = (),
              aliased: bool = False) -> Any:
        if id(node) in inside:
            raise self.error(node, prefix, "an alias (*name) refers to a value that contains it (a cycle)")
        aliased = aliased or id(node) in self.seen
        self.seen.add(id(node))
        if aliased:
            self.alias_values += 1
            if self.alias_values > MAX_ALIAS_VALUES:
                raise self.error(node, prefix, f"aliases (*name) expand to more than {MAX_ALIAS_VALUES} values; "
                                 "expected a configuration file (write the values out)")
        if len(prefix) > MAX_DEPTH:
            raise self.error(node, prefix, f"values nested more than {MAX_DEPTH} deep through aliases")
        self.origins[prefix] = (self.file, node.start_mark.line + 1)
        if node.tag not in _PLAIN_TAGS:
            raise self.error(node, prefix, f"the YAML tag {node.tag.replace(_TAG, '!!')} is not supported; "
                             "expected a plain value, list or mapping")
        inside = inside + (id(node),)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _TAG + "str":
                    shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else "a list or mapping"
                    raise self.error(key_node, prefix, f"mapping keys must be text, got {shown}"
                                     + (f" (quote it: '{shown}')" if isinstance(key_node, yaml.ScalarNode) else ""))
                key = key_node.value
                if key in out:
                    raise self.error(key_node, prefix + (key,), f"duplicate key {key!r}")
                out[key] = self.value(value_node, prefix + (key,), inside, aliased)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.value(item, prefix + (i,), inside, aliased) for i, item in enumerate(node.value)]
        return self.scalar(node, prefix)

    def scalar(self, node: yaml.ScalarNode, prefix: FieldPath) -> Any:
        kind, text = node.tag[len(_TAG):], node.value
        try:
            if kind == "str":
                return text
            if kind == "null":
                return None
            if kind == "bool":
                return text.lower() == "true"
            if kind == "int":
                digits = text.replace("_", "")
                return int(digits, 16) if digits[:2] == "0x" else int(digits[2:], 8) if digits[:2] == "0o" \
                    else int(digits)
            lowered = text.lower().lstrip("+")
            if lowered in (".inf", "-.inf", ".nan"):
                return {".inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}[lowered]
            return float(text.replace("_", ""))
        except ValueError:
            raise self.error(node, prefix, f"expected {'an integer' if kind == 'int' else 'a ' + kind}, got "
                             f"{text!r}") from None


def parse_yaml(text: str, file: str) -> tuple[Any, dict[FieldPath, tuple[str, int]]]:
    """The plain data of one YAML document and the (file, line) of every value, read safely (see
    the module docstring); ``file`` names the text in errors.

    Raises
    ------
    InputError
        For a syntax error or anything the safe reading refuses, with the file and line.
    """
    loader = None
    try:
        loader = _SafeComposer(text)   # the reader refuses control characters (a NUL) already here
        root = loader.get_single_node()
    except _Refused as exc:
        raise InputError(exc.message, file=file, line=exc.mark.line + 1 if exc.mark else None) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = " ".join(str(exc.problem or exc).split())
        raise InputError(f"YAML syntax error: {problem}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise InputError(f"YAML syntax error: {' '.join(str(exc).split())}", file=file) from None
    finally:
        if loader is not None:
            loader.dispose()
    if root is None:
        return None, {}
    walk = _Walk(file)
    return walk.value(root), walk.origins


def _parse_file(path: Path) -> tuple[Any, dict]:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InputError(f"the file has {size} bytes; a YAML configuration file of at most "
                             f"{MAX_FILE_BYTES // 2**20} MiB was expected", file=path)
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError("file not found", file=path) from None
    except IsADirectoryError:
        raise InputError("is a folder; expected a YAML file", file=path) from None
    except OSError as exc:
        raise InputError(f"cannot read the file: {exc.strerror or exc}", file=path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not a text file (byte {exc.start} is not UTF-8); expected a YAML file",
                         file=path) from None
    data, origins = parse_yaml(text, str(path))
    if data is None:
        raise InputError("the file is empty; expected a YAML mapping", file=path)
    if not isinstance(data, dict):
        raise InputError(f"expected a YAML mapping at the top level, got {type(data).__name__}",
                         file=path, line=1)
    return data, origins


def merge_into(target: Document, over: dict, over_origins: dict[FieldPath, tuple[str, int]], *,
               at: FieldPath = (), over_at: FieldPath = ()) -> None:
    """Merge the mapping ``over`` into ``target.data`` at ``at``, key by key, in place, and record
    where each merged value came from: the one merge behind ``base:`` overlays and a node file's
    ``socket_overrides:``.

    A mapping met on both sides is merged recursively (and takes the overlay's line); anything else
    is replaced whole, and the target's origins below it are dropped so that errors point at the
    overlay. ``over_origins`` are the overlay's origins, whose paths start with ``over_at``.

    Examples
    --------
    >>> target = Document({"x": 1, "y": {"p": 2, "q": 3}}, Path("a.yaml"), {("y", "q"): ("a.yaml", 3)})
    >>> merge_into(target, {"y": {"q": 30}}, {("over", "y", "q"): ("b.yaml", 7)}, over_at=("over",))
    >>> target.data, target.where(("y", "q"))
    ({'x': 1, 'y': {'p': 2, 'q': 30}}, ('b.yaml', 7))
    """
    node = target.data
    for part in at:
        node = node[part]
    for key, value in over.items():
        here, there = at + (key,), over_at + (key,)
        if isinstance(value, dict) and isinstance(node.get(key), dict):
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
    path = shown_path(path)
    if path.resolve() in _seen:
        raise InputError("'base:' files refer to each other in a cycle", file=path, field="base")
    data, origins = _parse_file(path)
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
        raise InputError(f"base file {base_rel!r} not found (looked for {base_path})",
                         file=file, field="base", line=line)
    merged = load_document(base_path, upgrade=upgrade, _seen=_seen + (path.resolve(),))
    merge_into(merged, data, origins)
    merged.origins[()] = origins[()]  # the overlay is the document: its root is where errors start
    return Document(merged.data, path, merged.origins)
