"""Shared helpers of the hardware tests: where the YAML lives and how to edit a copy of it."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

HW = Path(__file__).resolve().parents[2] / "hw_configs"


def set_value(text: str, key: str, value: str, occurrence: int = 0) -> tuple[str, int]:
    """Replace the value of the ``occurrence``-th ``key:`` line; return the text and its 1-based line."""
    lines = text.splitlines()
    pattern = re.compile(rf"^(\s*){re.escape(key)}:")
    hits = [i for i, line in enumerate(lines) if pattern.match(line)]
    i = hits[occurrence]
    indent = pattern.match(lines[i]).group(1)
    lines[i] = f"{indent}{key}: {value}"
    return "\n".join(lines) + "\n", i + 1


def delete_key(text: str, key: str) -> str:
    """Drop the first ``key:`` line (a scalar field)."""
    lines = text.splitlines()
    pattern = re.compile(rf"^\s*{re.escape(key)}:")
    i = next(i for i, line in enumerate(lines) if pattern.match(line))
    return "\n".join(lines[:i] + lines[i + 1:]) + "\n"


def copy_configs(folder: Path) -> Path:
    """Copy every hardware file into ``folder`` (so relative references keep working); return it."""
    for source in HW.glob("*.yaml"):
        shutil.copy(source, folder / source.name)
    return folder
