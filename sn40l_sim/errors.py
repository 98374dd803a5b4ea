"""Error types that the CLI turns into one clear line and an exit status.

Anything raised as :class:`InputError` (or a subclass) is the user's to fix: a bad file, a bad
field, an infeasible configuration (exit status 2). An :class:`InvariantError` is a physical
invariant a run broke: a bug in the simulator, named, never a silently wrong number (exit status 3).
:class:`Terminated` is SIGTERM, as ``KeyboardInterrupt`` is Ctrl-C (exit status 143 and 130). Any
other exception is a bug in the simulator and is allowed to traceback.
"""
from __future__ import annotations

from pathlib import Path


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

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        what = f"{self.field}: " if self.field else ""
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
