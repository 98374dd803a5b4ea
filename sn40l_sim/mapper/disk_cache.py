"""Results of pure computations kept on disk between processes: the mapped kernels a run, a sweep
worker or a test process would otherwise map again (docs/architecture.md, "Speed").

An entry is found by the SHA-256 of its key text, which must spell out *every* input of the
computation (the caller's job: a socket's JSON, a kernel signature's ``repr``, ...), under a folder
named after the **code version**, a hash of every source file of the package and of the
interpreter's and the libraries' versions: any edit to the simulator, or upgrade, starts an empty
cache, so an entry can only be read back by the code that wrote it. The file holds the key text beside the value and a read checks it, so even a hash collision cannot
return another computation's answer. Writes go to a temporary file renamed into place (parallel
sweep workers may write the same entry; each write is whole). The file starts with a tag and the
SHA-256 of the pickled pair, checked before anything is unpickled: a pickle survives most damage
(a quarter of single-bit flips in a mapped kernel's entry still unpickled, under the right key,
into a different value, which ran to exit status 0 with other numbers), so without the digest a
damaged entry was trusted. An entry that is unreadable, damaged, truncated or of another format is
a miss, and is computed again and rewritten (docs/robustness.md, "The disk cache").

The folder is ``$SN40L_SIM_CACHE`` if set, else ``$XDG_CACHE_HOME/sn40l_sim`` (an absolute one),
else ``~/.cache/sn40l_sim``, and none (the disk cache off) when no home folder is known either;
``SN40L_SIM_CACHE=off`` (or empty, ``0``, ``no``, ``false``) turns the disk cache off; a relative
path is taken from the working folder, a leading ``~`` as the home folder. Deleting the folder at
any time is safe. It stays bounded: the generations of older code and, past a size, the least
recently used entries are deleted (:mod:`.cache_upkeep`).

The code version sees the source files, not functions replaced while a process runs: inside a
pytest process (whose tests patch unit models to see the goldens move) the disk cache is off
whatever the environment says (only :func:`cache_in` turns it on there), so a patched model neither
reads nor writes an entry. The commands the tests start as subprocesses run unpatched code and use
it.

Examples
--------
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as folder, cache_in(folder):
...     missing = load("demo", "2 + 2")
...     store("demo", "2 + 2", 4)
...     missing, load("demo", "2 + 2"), load("demo", "2 + 3")
(None, 4, None)
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import stat
import sys
import tempfile
from collections.abc import Iterator
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from sn40l_sim.mapper.cache_upkeep import upkeep

#: environment variable naming the cache folder (``off`` disables the disk cache)
CACHE_ENV = "SN40L_SIM_CACHE"
#: first bytes of an entry, then the SHA-256 of the pickle that follows (:func:`load` checks both)
_MAGIC = b"sn40l_sim cache 1\n"
_DIGEST_BYTES = hashlib.sha256().digest_size
_PACKAGE = Path(__file__).resolve().parents[1]
_override: list[Path | None] = []
#: cache folders this process has kept bounded (:func:`~.cache_upkeep.upkeep`, once per folder)
_kept_up: set[Path] = set()


#: the distributions whose code computes what the cache keeps, beside the package's own
#: (``pyproject.toml``'s dependencies that parse the inputs, map, simulate or do the arithmetic)
RUNTIME_DISTRIBUTIONS = ("numpy", "simpy", "networkx", "pydantic", "PyYAML")


def runtime() -> str:
    """The interpreter's and :data:`RUNTIME_DISTRIBUTIONS`' versions, part of the code version: an
    upgraded library may compute otherwise, and entries kept under the old one must not be read."""
    versions = [sys.version]
    for name in RUNTIME_DISTRIBUTIONS:
        try:
            versions.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} absent")
    return "\n".join(versions)


@lru_cache(maxsize=1)
def code_version() -> str:
    """Hash of every ``.py`` file of the package (path and bytes) and of :func:`runtime`: the
    cache's generation."""
    digest = hashlib.sha256(runtime().encode() + b"\0")
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(_PACKAGE)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:20]


def cache_root() -> Path | None:
    """The cache folder in use (None: the disk cache is off)."""
    if _override:
        return _override[-1]
    if "pytest" in sys.modules:
        return None
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        if env.strip().lower() in ("", "0", "off", "no", "false"):
            return None
        # a ``~`` the shell did not expand (quoted, or from an env file) made a folder named ``~``
        # in the working folder; the home folder is what it says
        with contextlib.suppress(RuntimeError, KeyError, OSError):
            return Path(env).expanduser()
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):   # the XDG spec: a relative path is to be ignored (it would follow the cwd)
        return Path(xdg) / "sn40l_sim"
    try:
        return Path.home() / ".cache" / "sn40l_sim"
    except (RuntimeError, KeyError, OSError):
        # no HOME and no passwd entry (a CI container run as an arbitrary uid): Path.home() raised
        # in the middle of the first simulation, a traceback; the cache is a speed-up, so none
        return None


@contextlib.contextmanager
def cache_in(folder: str | Path | None) -> Iterator[None]:
    """Use ``folder`` as the cache folder inside the ``with`` block (None: no disk cache), whatever
    the environment says; tests use it to compare a cold computation with a cached one."""
    _override.append(None if folder is None else Path(folder))
    try:
        yield
    finally:
        _override.pop()


def _entry(namespace: str, key: str) -> Path | None:
    root = cache_root()
    if root is None:
        return None
    if root not in _kept_up:
        _kept_up.add(root)
        upkeep(root, code_version())
    name = hashlib.sha256(key.encode()).hexdigest()
    return root / code_version() / namespace / name[:2] / f"{name}.pkl"


def load(namespace: str, key: str) -> Any | None:
    """The value stored under ``key`` by this code version, or None."""
    path = _entry(namespace, key)
    if path is None:
        return None
    try:
        # a regular file only: a named pipe in the entry's place blocked the run for ever, and a
        # link to a device (/dev/zero) would be read until memory ran out
        if not stat.S_ISREG(path.stat().st_mode):
            return None
        data = path.read_bytes()
    except OSError:
        return None
    head = len(_MAGIC) + _DIGEST_BYTES
    payload = data[head:]
    if data[:len(_MAGIC)] != _MAGIC or data[len(_MAGIC):head] != hashlib.sha256(payload).digest():
        return None
    try:
        stored_key, value = pickle.loads(payload)
    except Exception:   # whole yet unloadable (written by hand, say): a miss, never an error
        return None
    if stored_key != key:
        return None
    with contextlib.suppress(OSError):
        os.utime(path)   # recently used: the last the size cap deletes (:mod:`.cache_upkeep`)
    return value


def store(namespace: str, key: str, value: Any) -> None:
    """Keep ``value`` under ``key`` (silently nothing when the folder cannot be written)."""
    path = _entry(namespace, key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            payload = pickle.dumps((key, value), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        return
