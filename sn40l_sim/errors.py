"""Error types that the CLI turns into one clear line and an exit status.

Anything raised as :class:`InputError` (or a subclass) is the user's to fix: a bad file, a bad
field, an infeasible configuration (exit status 2). An :class:`InvariantError` is a physical
invariant a run broke: a bug in the simulator, named, never a silently wrong number (exit status 3).
:class:`Terminated` is SIGTERM, as ``KeyboardInterrupt`` is Ctrl-C (exit status 143 and 130). Any
other exception is a bug in the simulator and is allowed to traceback.
"""
from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any

#: the longest quoted value a message shows whole: a 5,000-character string or a list of 2,000
#: numbers given to a field was repeated whole, burying the one line that says what was wrong
QUOTE_LIMIT = 80


def shown(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for a message, shortened when longer than ``limit`` characters: a text to
    its start and its length, a list, tuple or mapping to its first entries and its length.

    Examples
    --------
    >>> shown("max"), shown([1, 2]), shown(None)
    ("'max'", '[1, 2]', 'None')
    >>> shown("x" * 5000)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' (5,000 characters)"
    >>> shown([1] * 2000)
    '[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, ...] (2,000 items)'
    >>> shown({"kind": "y" * 300})
    "{'kind': 'yyyyyyyyyyyyyyyyyyyy...' (300 characters)} (1 item)"
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, str):
        if len(value) <= limit // 2:   # long only by its escapes ('\x00' for one character): nothing to cut
            return text
        head = repr(value[:limit // 2])
        return f"{head[:-1]}...{head[-1]} ({len(value):,} characters)"
    if isinstance(value, (list, tuple, dict)):
        if isinstance(value, dict):
            items = [f"{shown(k, limit // 2)}: {shown(v, limit // 2)}" for k, v in islice(value.items(), limit)]
            opening, closing = "{", "}"
        else:
            items = [shown(v, limit // 2) for v in islice(value, limit)]
            opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
        kept: list[str] = []
        for item in items:   # as many entries as the limit holds, at least one
            if kept and len(", ".join([*kept, item])) > limit - 8:
                break
            kept.append(item)
        more = ", ..." if len(kept) < len(value) else ""
        count = f"{len(value):,} item{'s' if len(value) != 1 else ''}"
        return f"{opening}{', '.join(kept)}{more}{closing} ({count})"
    return f"{text[:limit]}... ({len(text):,} characters)"


def with_article(noun: str) -> str:
    """``noun`` after "a" or "an", as its first letter asks, for a message naming a kind that the
    file gave ("is an experiment file", not "is a experiment file").

    Examples
    --------
    >>> with_article("experiment"), with_article("socket"), with_article("")
    ('an experiment', 'a socket', 'a ')
    """
    return f"{'an' if noun[:1].lower() in set('aeiou') else 'a'} {noun}"


def _shown_file(file: str, limit: int = 4 * QUOTE_LIMIT) -> str:
    """A file's path as an error's prefix: whole, or past ``limit`` characters (a path longer than
    any folder holds, given on the command line) its start and its end, with its length.

    >>> _shown_file("hw_configs/sn40l.yaml")
    'hw_configs/sn40l.yaml'
    >>> _shown_file("/tmp/" + "x" * 5000 + ".yaml")
    '/tmp/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.yaml (a path of 5,010 characters)'
    """
    if len(file) <= limit:
        return file
    return f"{file[:QUOTE_LIMIT // 2]}...{file[-QUOTE_LIMIT // 2:]} (a path of {len(file):,} characters)"


class InputError(Exception):
    """Bad input: names the file, the field path and (where known) the YAML line.

    Parameters
    ----------
    message : str
        What was wrong and what was expected.
    file : str or Path, optional
        The file the bad value came from.
    field : str, optional
        Dotted field path, e.g. ``socket.pcu.lanes``.
    line : int, optional
        1-based line in ``file`` where the value stands.

    Examples
    --------
    >>> str(InputError("expected a positive integer, got -3", file="hw.yaml", field="socket.dies", line=7))
    'hw.yaml:7: socket.dies: expected a positive integer, got -3'
    >>> print(InputError("no such point", file="a\\nb.yaml"))
    a\\nb.yaml: no such point
    """

    def __init__(self, message: str, *, file: str | Path | None = None,
                 field: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = str(file) if file is not None else None
        self.field = field
        self.line = line

    def located_at(self, *, file: str | Path | None, field: str | None, line: int | None,
                   message: str | None = None) -> InputError:
        """This error of its own class at another place (and, given one, with another message).
        A copy, not ``self.__class__(...)``: a subclass's constructor may take other arguments
        (:class:`~sn40l_sim.mapper.memory.TiersOverflow` takes its placement), and rebuilding one
        through ``InputError``'s raised a ``TypeError`` traceback in place of the message.

        >>> class Odd(InputError):
        ...     def __init__(self, message, extra):
        ...         super().__init__(message)
        ...         self.extra = extra
        >>> moved = Odd("does not fit", 3).located_at(file="exp.yaml", field="shape.prompt_len", line=4)
        >>> str(moved), type(moved).__name__, moved.extra
        ('exp.yaml:4: shape.prompt_len: does not fit', 'Odd', 3)
        """
        moved = type(self).__new__(type(self))  # not copy.copy: it calls the constructor with args
        moved.__dict__.update(self.__dict__)
        moved.message = self.message if message is None else message
        moved.args = (moved.message,)
        moved.file = str(file) if file is not None else None
        moved.field = field
        moved.line = line
        return moved

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = _shown_file(self.file) + (f":{self.line}" if self.line else "") + ": "
        # a value given on the command line is located at its option, which names the field already
        what = f"{self.field}: " if self.field and self.file != f"--set {self.field}" else ""
        # one line, whatever text it quotes (a name or a path with a line break in it)
        return f"{where}{what}{self.message}".replace("\r", "\\r").replace("\n", "\\n")


class InfeasibleError(InputError):
    """A well-formed configuration that cannot run: the model does not fit, the batch exceeds the KV
    capacity, a kernel cannot be placed. The message says what does not fit and by how much."""


class InvariantError(Exception):
    """A physical invariant a simulated run broke (bytes not conserved, a request served twice, a
    tier over its capacity, a unit above its peak): a bug, not bad input.

    Examples
    --------
    >>> str(InvariantError("bytes_conserved", "hbm: 10 B moved, kernels account for 12 B", point="full"))
    'invariant bytes_conserved violated at point full: hbm: 10 B moved, kernels account for 12 B'
    """

    def __init__(self, invariant: str, detail: str, *, point: str | None = None) -> None:
        super().__init__(invariant, detail)
        self.invariant, self.detail, self.point = invariant, detail, point

    def __str__(self) -> str:
        where = f" at point {self.point}" if self.point else ""
        return f"invariant {self.invariant} violated{where}: {self.detail}"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by the CLI's handler so that a run stops as it does on
    Ctrl-C (workers stopped, finished work kept, outputs marked interrupted)."""
