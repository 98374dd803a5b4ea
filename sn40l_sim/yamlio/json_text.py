"""JSON text read as every reader in the project reads it (results.json, status.json, failures.json,
a sweep's stored runs, goldens, the leave-one-out file, JSONL traces): :func:`parse_json` is
``json.loads`` whose only error on bad text is :class:`json.JSONDecodeError`, with a line.

``json.loads`` has two more: text nested deeper than Python's recursion limit (``[[[[...`` a few
thousand deep) raised ``RecursionError``, and an integer of more than 4,300 digits (Python's limit
on converting text to ``int``, against a quadratic conversion) a plain ``ValueError``; a JSONL
trace line holding either stopped ``check`` with a traceback. Both are now a decode error at the
line where the text goes wrong, which the callers already report in one line.

>>> parse_json('{"a": [1, 2]}')
{'a': [1, 2]}
>>> parse_json('\\n' + '[' * 100000 + ']' * 100000)
Traceback (most recent call last):
...
json.decoder.JSONDecodeError: nested deeper than Python's recursion allows: line 2 column 1 (char 1)
>>> parse_json('{"n": 1' + '0' * 5000 + '}')
Traceback (most recent call last):
...
json.decoder.JSONDecodeError: an integer of more than 4300 digits: line 1 column 7 (char 6)
"""
from __future__ import annotations

import json
import re
import sys
from typing import Any


def parse_json(text: str, **kwargs: Any) -> Any:
    """``json.loads(text, **kwargs)``, raising :class:`json.JSONDecodeError` (a ``ValueError``) for
    every text it cannot read (see the module docstring)."""
    try:
        return json.loads(text, **kwargs)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested deeper than Python's recursion allows", text,
                                   _first_nonspace(text)) from None
    except ValueError as exc:
        digits = _digit_limit()
        long = re.search(rf"\d{{{digits + 1},}}", text) if digits else None
        if type(exc) is not ValueError or long is None:   # an object_pairs_hook's own error: the caller's
            raise
        raise json.JSONDecodeError(f"an integer of more than {digits} digits", text, long.start()) from exc


def _digit_limit() -> int:
    """Python's limit on the digits of an integer read from text (0: none)."""
    getter = getattr(sys, "get_int_max_str_digits", None)
    return int(getter()) if getter is not None else 0


def _first_nonspace(text: str) -> int:
    """The position of the first character that is not white space (where the nesting starts)."""
    return len(text) - len(text.lstrip())
