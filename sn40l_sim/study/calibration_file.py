"""Fitted values written back into the hardware YAML (``python -m sn40l_sim calibrate --write``):
each on the exact line it was read from (:attr:`~sn40l_sim.yamlio.Document.origins`), in whichever
file of a ``base:`` chain or node file wrote it, in the unit its name says, with a provenance note
(docs/validation.md, "Calibrated parameters").
"""
from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from sn40l_sim.errors import InputError
from sn40l_sim.hardware.loader import socket_document
from sn40l_sim.report.outputs import rewrite_text
from sn40l_sim.study.calibration import FitResult

#: one ``key: value  # comment`` line of a block mapping
_VALUE_LINE = re.compile(r"^(?P<head>\s*(?P<key>[A-Za-z_][\w-]*):[ \t]+)(?P<value>[^#\n{\[]*?)(?P<comment>\s*#.*)?$")


def write_back(hardware_path: Path, result: FitResult, note: str) -> list[Path]:
    """Rewrite the fitted values where they were read from, keeping every other line, and replace
    each value's comment with the provenance ``note``; returns the files changed.

    The line of each value is the one the loader recorded for its field path
    (:func:`~sn40l_sim.hardware.loader.socket_document`), so a key name that appears twice (an
    ``efficiency`` under two tiers) is no ambiguity, and a value inherited from a ``base:`` file, or
    set by a node file's ``socket_overrides``, is written in that file.

    Raises
    ------
    InputError
        As :func:`write_targets`.
    """
    values = dict(zip(result.names, result.fitted, strict=True))
    targets = write_targets(hardware_path, result.names)
    for file, by_line in targets.items():
        lines = file.read_text(encoding="utf-8").splitlines(keepends=True)
        for line, name in sorted(by_line.items()):
            text = lines[line - 1].rstrip("\n")
            match = _VALUE_LINE.match(text)
            assert match is not None   # write_targets checked the line
            new = f"{_format_value(name, values[name])}  # calibrated: {note}"
            lines[line - 1] = match["head"] + new + lines[line - 1][len(text):]
        # whole or not at all (a hardware file is never left half written), through a link, keeping its mode
        rewrite_text(file, "".join(lines))
    return list(targets)


def write_targets(hardware_path: Path, names: Sequence[str]) -> dict[Path, dict[int, str]]:
    """Where :func:`write_back` writes each of ``names``: file -> line -> dotted path. Checked before
    a fit (``calibrate --write``), so that a value it cannot write is refused before the passes are
    spent, not after them.

    Raises
    ------
    InputError
        When a value is not written in any file (it takes the schema's default), or its line is not
        a plain ``key: value`` line (flow style, a value on the next line).
    """
    doc = socket_document(hardware_path)
    targets: dict[Path, dict[int, str]] = {}
    for name in names:
        field = tuple(name.split("."))
        if field not in doc.origins:
            raise InputError(f"{name} is not written in {hardware_path} or the files it starts from (it takes "
                             "its default); write it there before calibrating it", file=hardware_path, field=name)
        file, line = doc.origins[field]
        targets.setdefault(Path(file), {})[line] = name
    for file, by_line in targets.items():
        lines = file.read_text(encoding="utf-8").splitlines()
        for line, name in sorted(by_line.items()):
            match = _VALUE_LINE.match(lines[line - 1])
            last = name.rsplit(".", 1)[-1]
            # the line's key is the field's (or, in an old-style file, e.g. hbm_efficiency)
            if match is None or not (match["key"] == last or match["key"].endswith("_" + last)):
                raise InputError(f"cannot rewrite {name}: its line is not a plain '{last}: value' line; write it "
                                 "on a line of its own", file=file, field=name, line=line)
    return targets


def check_writable(files: Iterable[Path]) -> None:
    """Refuse, before a fit, files ``--write`` could not replace: each is written whole into a
    temporary file beside it and renamed (:func:`~sn40l_sim.report.outputs.rewrite_text`), so its
    folder must take a new file (a read-only folder or file system, a folder of another user's), and
    a read-only file is refused too (the rename would replace it unasked).

    Raises
    ------
    InputError
        At ``--write``, naming the file and the system's reason.
    """
    for file in files:
        target = Path(file).resolve() if Path(file).is_symlink() else Path(file)   # where rewrite_text writes
        try:
            with tempfile.TemporaryFile(dir=target.parent):
                pass
            problem = "the file is read-only" if target.is_file() and not os.access(target, os.W_OK) else None
        except OSError as exc:
            problem = exc.strerror or str(exc)
        if problem is not None:
            raise InputError(f"cannot write {file}: {problem} (checked before the fit, which would "
                             "write it at its end)", field="--write")


def _format_value(name: str, value: float) -> str:
    """A calibrated value in the readable unit its name says (units in names, as everywhere).

    >>> _format_value("calibrated.sync_latency_s", 2.5e-6), _format_value("calibrated.config_load_bytes_per_s", 3.2e10)
    ('2.5 us', '32 GB/s')
    >>> _format_value("memory.hbm.efficiency", 0.91234)
    '0.9123'
    """
    if name.endswith("_bytes_per_s"):
        return f"{value / 1e9:.6g} GB/s"
    if name.endswith("_s"):
        return f"{value * 1e6:.6g} us"
    return f"{value:.4f}"
