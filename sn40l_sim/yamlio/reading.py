"""Safe reading of YAML text and files: plain data and the line of every value.

Reading is safe against hostile or broken files (:func:`parse_yaml`): a file is text of at most
:data:`MAX_FILE_BYTES`, nested at most :data:`MAX_DEPTH` deep, whose aliases expand to at most
:data:`MAX_ALIAS_VALUES` values and never contain themselves; mapping keys are strings; values are
YAML 1.2 core scalars (``1e30`` is a number, ``yes``, ``2024-01-31`` and ``1:30`` are text, as
written) and no tag other than the plain ones (``!!binary``, ``!!set``, ``!!timestamp``, a custom
``!tag`` are refused). Each refusal is one :class:`~sn40l_sim.errors.InputError` with the file and
line.

A process parses each text once (:func:`read_mapping_file`): the same hardware, model and
experiment files are read again and again (every point of a sweep, ``validate``, ``check``, the
tests), and the pure-Python parser is most of the cost of loading them. The parsed data is kept
under the file's whole text, so an edited file is a new text and is parsed again whatever its
modification time says; every caller receives its own copy, so what one caller changes in its data
no other sees; and the lines are kept apart from the file name, so every caller's origins name the
file as that caller gave it. Only texts that parse are kept (an error is found again, with the
same message, on every read).

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

import math
import re
import stat
from collections import OrderedDict
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from sn40l_sim.errors import InputError, shown

#: largest YAML file read (configuration files are a few kB)
MAX_FILE_BYTES = 4 * 2**20
#: deepest nesting of mappings and lists (the project's files nest at most 6 deep)
MAX_DEPTH = 32
#: most values that aliases (``*name``) may expand to in one file ("billion laughs" stop here)
MAX_ALIAS_VALUES = 10_000
#: most parsed texts a process keeps (the project ships about 30 YAML files; a sweep reads a few)
PARSED_TEXTS_KEPT = 256

FieldPath = tuple[str | int, ...]


def dotted(field_path: FieldPath) -> str:
    """``("socket", "hbm", 0, "capacity")`` -> ``"socket.hbm[0].capacity"``.

    >>> dotted(("socket", "hbm", 0, "capacity"))
    'socket.hbm[0].capacity'
    """
    out = ""
    for part in field_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def path_parts(text: str) -> tuple[str, ...]:
    """The parts of a dotted path a user typed (``--set``, a sweep axis's ``path:``), a list index
    written either way: as :func:`dotted` prints it in every message (``policies[1].params``) or
    dotted (``policies.1.params``). Copying a field from an error into ``--set`` made a key named
    ``policies[1]``, refused as unknown with "did you mean 'policies'?".

    >>> path_parts("policies[1].params.budget"), path_parts("policies.1.params.budget")
    (('policies', '1', 'params', 'budget'), ('policies', '1', 'params', 'budget'))
    >>> path_parts("a[0][2]")
    ('a', '0', '2')
    """
    return tuple(re.sub(r"\[(\d+)\]", r".\1", text).split("."))



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
                    written = key_node.value if isinstance(key_node, yaml.ScalarNode) else "a list or mapping"
                    raise self.error(key_node, prefix, f"mapping keys must be text, got {written}"
                                     + (f" (quote it: '{written}')" if isinstance(key_node, yaml.ScalarNode) else ""))
                key = key_node.value
                if key == "<<" and key_node.style is None:
                    # PyYAML's merge key: not part of YAML 1.2 and not honoured here, so say so
                    # rather than report an unknown key "<<"
                    raise self.error(key_node, prefix + (key,), "YAML merge keys (<<: *name) are not supported; "
                                     "write the keys out, or use an alias (*name) for a whole value")
                if key in out:
                    raise self.error(key_node, prefix + (key,), f"duplicate key {shown(key)}")
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
                             f"{shown(text)}") from None


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


#: text -> (data, line of every field path) of the texts parsed in this process, least recently used first
_PARSED: OrderedDict[str, tuple[Any, dict[FieldPath, int]]] = OrderedDict()


def refuse_special_file(path: Path, expected: str) -> None:
    """Refuse a path that is neither a regular file nor a folder (a device such as ``/dev/zero``, a
    named pipe): reading one may never end (memory filled until the process was killed) or block
    until a writer comes. A missing file or a folder is left to the caller's own message.

    Raises
    ------
    InputError
        Naming the path and ``expected`` (what the caller reads, e.g. ``"a YAML file"``).
    """
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise InputError(f"is not a regular file (a device or a pipe); expected {expected}", file=path)


#: where what makes a configuration file that large belongs: a long list of requests (the only
#: list a configuration grows with) is read from a trace file, which has no such limit
_TOO_BIG_HINT = (" (a long list of requests goes in a CSV or JSONL trace: workload: {kind: trace, path: FILE}, "
                 "columns arrival_s, prompt_len, output_len)")


def read_mapping_file(path: Path) -> tuple[Any, dict[FieldPath, tuple[str, int]]]:
    """The data of the YAML file at ``path``, which must hold a mapping, and the (file, line) of
    every value, the file named as ``path`` is written; the text is parsed once per process (see
    the module docstring) and the data is the caller's own.

    Raises
    ------
    InputError
        For a missing or unreadable file, one larger than :data:`MAX_FILE_BYTES`, text that is not
        UTF-8, anything :func:`parse_yaml` refuses, an empty file or a top level that is not a
        mapping, naming the file (and the line where there is one).
    """
    refuse_special_file(path, "a YAML file")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InputError(f"the file has {size} bytes; a YAML configuration file of at most "
                             f"{MAX_FILE_BYTES // 2**20} MiB was expected{_TOO_BIG_HINT}", file=path)
        with open(path, "rb") as handle:   # at most one byte past the limit, whatever the size said
            raw = handle.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise InputError(f"the file has more than {MAX_FILE_BYTES} bytes; a YAML configuration file of at "
                             f"most {MAX_FILE_BYTES // 2**20} MiB was expected{_TOO_BIG_HINT}", file=path)
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
    data, origins = _parse_once(text, str(path))
    if data is None:
        raise InputError("the file is empty; expected a YAML mapping", file=path)
    if not isinstance(data, dict):
        raise InputError(f"expected a YAML mapping at the top level, got {type(data).__name__}",
                         file=path, line=1)
    return data, origins


def _parse_once(text: str, file: str) -> tuple[Any, dict[FieldPath, tuple[str, int]]]:
    """:func:`parse_yaml` of ``text``, parsed only if this process has not parsed it yet."""
    kept = _PARSED.get(text)
    if kept is None:
        data, origins = parse_yaml(text, file)
        kept = _PARSED[text] = (data, {at: line for at, (_, line) in origins.items()})
        if len(_PARSED) > PARSED_TEXTS_KEPT:
            _PARSED.popitem(last=False)
    else:
        _PARSED.move_to_end(text)
    data, lines = kept
    return _copy(data), {at: (file, line) for at, line in lines.items()}


def _copy(data: Any) -> Any:
    """A copy of plain YAML data (dicts, lists and immutable scalars; nothing shared, since
    :class:`_Walk` builds a new value wherever an alias repeats one) — much quicker than
    ``copy.deepcopy``."""
    if isinstance(data, dict):
        return {key: _copy(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_copy(value) for value in data]
    return data


__all__ = ["MAX_FILE_BYTES", "MAX_DEPTH", "MAX_ALIAS_VALUES", "PARSED_TEXTS_KEPT", "FieldPath", "dotted", "parse_yaml",
           "read_mapping_file"]
