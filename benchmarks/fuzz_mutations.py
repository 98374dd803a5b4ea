"""The mutations of :mod:`fuzz` (``benchmarks/fuzz.py``): each takes the text of a shipped YAML file
and a seeded generator and returns the mutant (text or bytes), or None when it does not apply to
that file. :data:`MUTATIONS` names them; :data:`ALWAYS_INVALID` those whose mutant can never be a
valid file (docs/robustness.md, "Fuzzing").

Every draw comes from the generator a mutation is given, never from the ``random`` module's own,
so fuzzing leaves other users of that one alone. A number mutation draws the number to change from
it and the new value (``inf``, ``huge``) from a second generator in the state the first was given
in: the mutants of a seed are those the fuzzer made when the value came from the module's
generator seeded with the case's seed.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import yaml

from sn40l_sim.yamlio import parse_yaml

#: mutations whose result can never be a valid file
ALWAYS_INVALID = frozenset({"nan", "inf", "huge", "negative", "invalid_yaml", "binary", "alias_bomb", "self_alias",
                            "deep_nesting", "non_text_key", "bad_unit", "duplicate_key", "unknown_key"})


def _leaves(data: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _leaves(value, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _leaves(value, path + (i,))
    else:
        yield path, data


def _keys(data: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield path + (key,)
            yield from _keys(value, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _keys(value, path + (i,))


def _parent(data: Any, path: tuple) -> Any:
    for part in path[:-1]:
        data = data[part]
    return data


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _numbers(data: Any) -> list[tuple]:
    return [p for p, v in _leaves(data) if isinstance(v, (int, float)) and not isinstance(v, bool) and p]


def _quantities(data: Any) -> list[tuple]:
    return [p for p, v in _leaves(data) if isinstance(v, str) and any(u in v for u in ("B/s", "B", "Hz", "s"))
            and v[:1].isdigit()]


def _set_number(value: Callable[[Any, random.Random], Any]) -> Callable[[str, random.Random], str | None]:
    def mutate(text: str, rng: random.Random) -> str | None:
        # the value's draws start where the case's generator did, so a seed gives the value it gave
        # when they came from the module's generator seeded alike (the module docstring)
        values = random.Random()
        values.setstate(rng.getstate())
        data = parse_yaml(text, "x")[0]
        paths = _numbers(data)
        if not paths:
            return None
        path = rng.choice(paths)
        parent = _parent(data, path)
        parent[path[-1]] = value(parent[path[-1]], values)
        return _dump(data)
    return mutate


def delete_key(text: str, rng: random.Random) -> str | None:
    """A key deleted, anywhere in the file."""
    data = parse_yaml(text, "x")[0]
    path = rng.choice(list(_keys(data)))
    del _parent(data, path)[path[-1]]
    return _dump(data)


def rename_key(text: str, rng: random.Random) -> str | None:
    """A key renamed (a suffix added or its last letter dropped), keeping its place."""
    data = parse_yaml(text, "x")[0]
    path = rng.choice(list(_keys(data)))
    parent = _parent(data, path)
    new = path[-1] + rng.choice(["s", "_x", "2"]) if rng.random() < 0.5 else path[-1][:-1] or "x"
    if new in parent:
        return None
    parent_items = [(new if k == path[-1] else k, v) for k, v in parent.items()]
    parent.clear()
    parent.update(parent_items)
    return _dump(data)


def unknown_key(text: str, rng: random.Random) -> str | None:
    """A key no schema knows (``frobnicate``) added to a section that is not free-form."""
    data = parse_yaml(text, "x")[0]
    sections = [()] + [p for p in _keys(data) if isinstance(_value(data, p), dict)
                       and p[-1] not in FREE_FORM]
    where = _value(data, rng.choice(sections))
    where["frobnicate"] = 1
    return _dump(data)


#: mappings whose keys are the user's (a policy's parameters, a sweep's axes, tiers, totals): a new
#: key there may be valid, or refused later with its own message
FREE_FORM = frozenset({"params", "model_overrides", "graph_options", "axes", "memory", "memory_bytes", "sharding",
                       "kernels", "where", "objectives", "prompt_fraction", "macs_per_lane_stage_per_cycle",
                       "socket_overrides"})


def _value(data: Any, path: tuple) -> Any:
    for part in path:
        data = data[part]
    return data


def retype(text: str, rng: random.Random) -> str | None:
    """A value replaced by one of another type (text, list, mapping, bool, null, number)."""
    data = parse_yaml(text, "x")[0]
    path = rng.choice(list(_keys(data)))
    parent = _parent(data, path)
    parent[path[-1]] = rng.choice(["abc", [1, 2], {"a": 1}, True, None, 7, 0.5, ""])
    return _dump(data)


def truncate(text: str, rng: random.Random) -> str | None:
    """The text cut at a random character."""
    return text[: rng.randrange(0, max(1, len(text)))]


def invalid_yaml(text: str, rng: random.Random) -> str | None:
    """A line that does not parse as YAML inserted."""
    lines = text.splitlines()
    i = rng.randrange(len(lines))
    junk = rng.choice(["key: [unclosed", "key: {a: 1", "\tindented: with a tab", "- a\nb: c", "'unterminated",
                       "a: b: c", "  - : ", "? ? ?", "*undefined_alias", "&a &b x"])
    return "\n".join(lines[:i] + [junk] + lines[i:]) + "\n"


def binary(text: str, rng: random.Random) -> str | bytes | None:
    """Bytes that are not UTF-8 text: random bytes, a NUL, UTF-16, or Latin-1 in the middle."""
    kind = rng.choice(["random", "nul", "utf16", "latin1"])
    if kind == "random":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096)))
    if kind == "nul":
        i = rng.randrange(len(text))
        return (text[:i] + "\x00" + text[i:]).encode("utf-8")
    if kind == "utf16":
        return text.encode("utf-16")
    i = rng.randrange(len(text))
    return text[:i].encode("utf-8") + b"\xe9\xff" + text[i:].encode("utf-8")


def alias_bomb(text: str, rng: random.Random) -> str | None:
    """A top-level value replaced by a billion-laughs alias chain (9^9 leaves)."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    data = parse_yaml(text, "x")[0]
    key = rng.choice(list(data))
    head = "\n".join(f"{k}: {yaml.safe_dump(v, default_flow_style=True).strip()}" for k, v in data.items() if k != key)
    return head + "\n" + "\n".join(lines) + f"\n{key}: *i\n"


def self_alias(text: str, rng: random.Random) -> str | None:
    """A top-level value that contains itself through an alias."""
    data = parse_yaml(text, "x")[0]
    key = rng.choice(list(data))
    head = "\n".join(f"{k}: {yaml.safe_dump(v, default_flow_style=True).strip()}" for k, v in data.items() if k != key)
    return head + "\n" + f"{key}: &loop " + rng.choice(["[*loop]", "{x: *loop}", "[1, [2, *loop]]"]) + "\n"


def deep_nesting(text: str, rng: random.Random) -> str | None:
    """A key holding lists or mappings nested thousands deep."""
    depth = rng.choice([40, 200, 1000, 20000])
    return text + "deep: " + ("[" * depth + "]" * depth if rng.random() < 0.5 else "{a: " * depth + "1" + "}" * depth) + "\n"


def date_value(text: str, rng: random.Random) -> str | None:
    """A value replaced by a date (one impossible) or a time, which YAML 1.1 reads as a date, an
    error or a base-60 integer."""
    lines = [i for i, line in enumerate(text.splitlines()) if ": " in line and not line.lstrip().startswith("#")]
    if not lines:
        return None
    all_lines = text.splitlines()
    i = rng.choice(lines)
    key = all_lines[i].split(": ", 1)[0]
    all_lines[i] = f"{key}: {rng.choice(['2024-13-45', '2024-01-31', '2024-01-31T10:00:00', '12:30:00', '1:30'])}"
    return "\n".join(all_lines) + "\n"


def non_text_key(text: str, rng: random.Random) -> str | None:
    """A top-level key that is not text (a number, a bool, null, a date, a list)."""
    return text + rng.choice(["1: one\n", "true: yes\n", "null: x\n", "2024-01-01: x\n", "? [a, b]\n: c\n",
                              "1.5: x\n"])


def duplicate_key(text: str, rng: random.Random) -> str | None:
    """A top-level key written a second time."""
    data = parse_yaml(text, "x")[0]
    key = rng.choice(list(data))
    return text + f"{key}: {yaml.safe_dump(data[key], default_flow_style=True).strip()}\n"


def bad_unit(text: str, rng: random.Random) -> str | None:
    """A quantity given a wrong, extreme or non-finite unit (``5 parsecs``, ``1e400 B``)."""
    data = parse_yaml(text, "x")[0]
    paths = _quantities(data)
    if not paths:
        return None
    path = rng.choice(paths)
    _parent(data, path)[path[-1]] = rng.choice(["2.5 B/s", "1e30 GB/s", "-1 GiB", "nan ns", "1.6 THz", "5 parsecs",
                                                "1e400 B", "0 Hz", "64 GB/s/s"])
    return _dump(data)


MUTATIONS: dict[str, Callable[[str, random.Random], str | bytes | None]] = {
    "delete_key": delete_key,
    "rename_key": rename_key,
    "unknown_key": unknown_key,
    "retype": retype,
    "nan": _set_number(lambda v, values: math.nan),
    "inf": _set_number(lambda v, values: values.choice([math.inf, -math.inf])),
    "huge": _set_number(lambda v, values: values.choice([1e30, 2**64, 1e300])),
    "negative": _set_number(lambda v, values: -abs(v) - 1),
    "fractional": _set_number(lambda v, values: v + 0.5 if isinstance(v, int) else v * 1.5),
    "zero": _set_number(lambda v, values: 0),
    "bad_unit": bad_unit,
    "date_value": date_value,
    "non_text_key": non_text_key,
    "duplicate_key": duplicate_key,
    "truncate": truncate,
    "invalid_yaml": invalid_yaml,
    "binary": binary,
    "alias_bomb": alias_bomb,
    "self_alias": self_alias,
    "deep_nesting": deep_nesting,
}
