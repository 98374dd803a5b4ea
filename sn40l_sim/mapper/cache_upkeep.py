"""Keeping the disk cache's folder bounded (:mod:`.disk_cache`; docs/robustness.md, "The disk cache").

The cache grew without bound in two ways: every edit of the simulator starts a new generation
folder (named after a hash of the package's source) and the old ones, which no code can read again,
stayed on disk; and within a generation every new socket, model or option (a sweep over hardware
fields, each pass of ``calibrate``) adds entries that were never removed. So, once per process and
cache folder, :func:`upkeep`

- marks the running code's generation as just used and deletes all but the
  :data:`KEEP_GENERATIONS` most recently used generation folders (two checkouts of different
  versions sharing one folder keep each other's), and
- at most every :data:`SIZE_CHECK_INTERVAL_S`, sums the running generation's entries and, when they
  pass :data:`MAX_GENERATION_BYTES`, deletes the least recently used (:func:`~.disk_cache.load`
  touches an entry it reads) down to three quarters of it, and deletes the temporary files of
  writes killed before they completed.

Deleting is always safe: a missing entry is computed again. Only folders shaped like a generation
(a 20-hex-digit name holding namespace folders of two-hex-digit folders) are ever deleted, so a
cache variable pointed at a folder holding other things deletes none of them.

Examples
--------
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as folder:
...     root = Path(folder)
...     for age, name in enumerate(["a" * 20, "b" * 20, "c" * 20, "d" * 20]):
...         (root / name / "step" / "00").mkdir(parents=True)
...         os.utime(root / name, (1000.0 - age, 1000.0 - age))
...     (root / "notes").mkdir()
...     upkeep(root, "e" * 20, now=2000.0)
...     sorted(p.name for p in root.iterdir())
['aaaaaaaaaaaaaaaaaaaa', 'bbbbbbbbbbbbbbbbbbbb', 'eeeeeeeeeeeeeeeeeeee', 'notes']
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from pathlib import Path

#: generation folders kept: the running code's and the most recently used others
KEEP_GENERATIONS = 3
#: bytes of entries one generation may hold before the least recently used are deleted (a cold
#: run of experiments/deepseek_tp16.yaml writes about 1.6 MB)
MAX_GENERATION_BYTES = 2 * 2**30
#: seconds between two sums of a generation's size (a sum walks every entry)
SIZE_CHECK_INTERVAL_S = 3600.0
#: file in a generation folder whose modification time says when its size was last summed
SIZE_MARK = ".size_checked"

_GENERATION = re.compile(r"[0-9a-f]{20}")
_NAMESPACE = re.compile(r"[a-z_]+")
_SHARD = re.compile(r"[0-9a-f]{2}")


def upkeep(root: Path, generation: str, *, keep: int = KEEP_GENERATIONS,
           max_bytes: int = MAX_GENERATION_BYTES, now: float | None = None) -> None:
    """Mark ``root / generation`` as used now, delete the generations beyond the ``keep`` most
    recently used, and cap the running generation at ``max_bytes`` (never an error: a folder that
    cannot be read or written is left as it is)."""
    now = time.time() if now is None else now
    current = root / generation
    try:
        current.mkdir(parents=True, exist_ok=True)
        os.utime(current, (now, now))
    except OSError:
        return
    others = sorted(((mtime, path) for mtime, path in _generations(root) if path.name != generation), reverse=True)
    for _, path in others[max(keep - 1, 0):]:
        shutil.rmtree(path, ignore_errors=True)
    _cap(current, max_bytes, now)


def _generations(root: Path) -> list[tuple[float, Path]]:
    found = []
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            if _GENERATION.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    if _looks_like_generation(Path(entry.path)):
                        found.append((entry.stat(follow_symlinks=False).st_mtime, Path(entry.path)))
    return found


def _looks_like_generation(path: Path) -> bool:
    """Whether every entry of ``path`` is a namespace folder of shard folders (what
    :func:`~.disk_cache.store` makes): only such a folder is ever deleted whole."""
    for namespace in path.iterdir():
        if namespace.name == SIZE_MARK and namespace.is_file():
            continue
        if not (_NAMESPACE.fullmatch(namespace.name) and namespace.is_dir() and not namespace.is_symlink()):
            return False
        if any(not (_SHARD.fullmatch(shard.name) and shard.is_dir()) for shard in namespace.iterdir()):
            return False
    return True


def _cap(current: Path, max_bytes: int, now: float) -> None:
    mark = current / SIZE_MARK
    try:
        if now - mark.stat().st_mtime < SIZE_CHECK_INTERVAL_S:
            return
    except FileNotFoundError:
        pass
    except OSError:
        return
    try:
        mark.touch()
        os.utime(mark, (now, now))
    except OSError:
        return
    # a write killed between its temporary file and the rename (``disk_cache.store``) leaves a
    # ``.tmp-`` file that nothing reads or deletes; a write takes milliseconds, so one older than
    # the check interval is such an orphan, and was never counted against the cap either
    for path in current.glob("*/*/.tmp-*"):
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime >= SIZE_CHECK_INTERVAL_S:
                path.unlink()
    entries = []
    for path in current.glob("*/*/*.pkl"):
        with contextlib.suppress(OSError):
            stat = path.stat()
            entries.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in entries)
    if total <= max_bytes:
        return
    for _, size, path in sorted(entries, key=lambda e: (e[0], str(e[2]))):
        if total <= max_bytes * 3 // 4:
            break
        with contextlib.suppress(OSError):
            path.unlink()
            total -= size
