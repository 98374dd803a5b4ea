"""Error types that the CLI turns into one clear line and exit status 2.

Anything raised as :class:`InputError` (or a subclass) is the user's to fix: a bad file, a bad
field, an infeasible configuration. Any other exception is a bug in the simulator and is allowed
to traceback.
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
        return f"{where}{what}{self.message}"


class InfeasibleError(InputError):
    """A well-formed configuration that cannot run: the model does not fit, the batch exceeds the KV
    capacity, a kernel cannot be placed. The message says what does not fit and by how much."""
