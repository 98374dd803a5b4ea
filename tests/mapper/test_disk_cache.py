"""A damaged disk-cache entry is a miss and is rewritten, never trusted (docs/robustness.md, "The disk
cache"): an entry that unpickles is not proof that it holds what was stored."""
from __future__ import annotations

import errno
import io
import os
import pickle
import random
from pathlib import Path

import pytest

from sn40l_sim.mapper import cache_upkeep, disk_cache

VALUE = {"cycles": 132508, "cycles_per_tile": 425.953125, "tier_bytes": {"hbm": 26843040, "ddr": 0}}


def _entry(tmp_path):
    (entry,) = tmp_path.rglob("*.pkl")
    return entry


def _stored(tmp_path):
    disk_cache.store("t", "key", VALUE)
    return _entry(tmp_path)


@pytest.mark.parametrize("damage", ["empty", "truncated", "random bytes", "a pickle of another shape",
                                    "the bare pickled pair", "a pickle under the right digest of a wrong pair"])
def test_a_damaged_entry_is_a_miss_and_is_rewritten(tmp_path, damage):
    with disk_cache.cache_in(tmp_path):
        entry = _stored(tmp_path)
        whole = entry.read_bytes()
        damaged = {
            "empty": b"",
            "truncated": whole[: len(whole) // 2],
            "random bytes": random.Random(5).randbytes(len(whole)),
            "a pickle of another shape": pickle.dumps(["key", VALUE, 3]),
            # the format before the digest: what an older build left is not read as this one's
            "the bare pickled pair": pickle.dumps(("key", VALUE)),
            "a pickle under the right digest of a wrong pair": whole[:len(whole) - len(pickle.dumps(("key", VALUE),
                                                                     protocol=pickle.HIGHEST_PROTOCOL))]
                                                                + pickle.dumps(("key", 7)),
        }[damage]
        entry.write_bytes(damaged)
        assert disk_cache.load("t", "key") is None
        disk_cache.store("t", "key", VALUE)            # what the caller does on a miss
        assert disk_cache.load("t", "key") == VALUE
        assert entry.read_bytes() == whole


def test_no_single_bit_flip_of_an_entry_is_read_back(tmp_path):
    # before the digest, 525 of 2,000 single-bit flips of real mapped-kernel and step entries
    # unpickled under the right key into another value, and a run used them with exit status 0
    rng = random.Random(11)
    with disk_cache.cache_in(tmp_path):
        entry = _stored(tmp_path)
        whole = entry.read_bytes()
        for _ in range(300):
            flipped = bytearray(whole)
            flipped[rng.randrange(len(whole))] ^= 1 << rng.randrange(8)
            entry.write_bytes(bytes(flipped))
            assert disk_cache.load("t", "key") is None
        entry.write_bytes(whole)
        assert disk_cache.load("t", "key") == VALUE


def test_a_cache_folder_that_is_a_file_is_no_cache(tmp_path):
    root = tmp_path / "cache"
    root.write_text("not a folder")
    with disk_cache.cache_in(root):
        disk_cache.store("t", "key", VALUE)            # nothing written, no error
        assert disk_cache.load("t", "key") is None
    assert root.read_text() == "not a folder"


@pytest.mark.parametrize("error", [errno.EACCES, errno.ENOSPC])
def test_a_cache_folder_that_cannot_be_written_is_no_cache(tmp_path, monkeypatch, error):
    # a read-only folder, a full disk (the test may run as root, whom no mode stops: the error is
    # raised where the write would meet it)
    class Refusing(io.BytesIO):
        def write(self, data):
            raise OSError(error, os.strerror(error))

    monkeypatch.setattr(disk_cache.os, "fdopen", lambda fd, mode: (os.close(fd), Refusing())[1])
    with disk_cache.cache_in(tmp_path):
        disk_cache.store("t", "key", VALUE)
        assert disk_cache.load("t", "key") is None
    # no temporary file left behind (the size mark is the upkeep's, docs/robustness.md)
    assert [p for p in tmp_path.rglob("*") if p.is_file() and p.name != cache_upkeep.SIZE_MARK] == []


def _cache_root_from(monkeypatch, **env):
    monkeypatch.setattr(disk_cache, "_override", [])
    monkeypatch.delitem(disk_cache.sys.modules, "pytest", raising=False)   # as in a command's process
    for name in (disk_cache.CACHE_ENV, "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return disk_cache.cache_root()


def test_no_home_folder_known_is_no_disk_cache_not_a_traceback(monkeypatch):
    # a CI container run as a uid with no passwd entry and no HOME: Path.home() raises RuntimeError,
    # which stopped the first simulation of a run with a traceback
    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")
    monkeypatch.setattr("pwd.getpwuid", no_entry)
    assert _cache_root_from(monkeypatch) is None
    assert _cache_root_from(monkeypatch, HOME="/home/ci") == Path("/home/ci/.cache/sn40l_sim")


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    assert _cache_root_from(monkeypatch, SN40L_SIM_CACHE=str(tmp_path)) == tmp_path
    assert _cache_root_from(monkeypatch, SN40L_SIM_CACHE="off") is None
    assert _cache_root_from(monkeypatch, SN40L_SIM_CACHE="") is None
    assert _cache_root_from(monkeypatch, SN40L_SIM_CACHE="rel/cache") == Path("rel/cache")
    # a "~" no shell expanded (quoted, or from an env file) is the home folder, not a folder named "~"
    assert _cache_root_from(monkeypatch, SN40L_SIM_CACHE="~/sim", HOME="/home/ci") == Path("/home/ci/sim")
    assert _cache_root_from(monkeypatch, XDG_CACHE_HOME=str(tmp_path)) == tmp_path / "sn40l_sim"
    # a relative XDG_CACHE_HOME is to be ignored (XDG Base Directory spec): not a folder that moves with the cwd
    assert _cache_root_from(monkeypatch, XDG_CACHE_HOME="rel", HOME="/home/ci") == Path("/home/ci/.cache/sn40l_sim")


def test_an_upgraded_library_starts_an_empty_cache(tmp_path, monkeypatch):
    # the code version hashed the package's source only: entries a run computed under one numpy
    # (or simpy, pydantic, ...) were read back under another, which may compute otherwise
    real = disk_cache.metadata.version
    monkeypatch.setattr(disk_cache, "_kept_up", set())
    disk_cache.code_version.cache_clear()
    try:
        with disk_cache.cache_in(tmp_path):
            disk_cache.store("t", "key", VALUE)
            before = disk_cache.code_version()
            monkeypatch.setattr(disk_cache.metadata, "version",
                                lambda name: "99.0" if name == "simpy" else real(name))
            disk_cache.code_version.cache_clear()
            assert disk_cache.code_version() != before
            assert disk_cache.load("t", "key") is None
            monkeypatch.setattr(disk_cache.metadata, "version", real)
            disk_cache.code_version.cache_clear()
            assert disk_cache.code_version() == before
            assert disk_cache.load("t", "key") == VALUE
    finally:
        disk_cache.code_version.cache_clear()


def test_an_entry_that_cannot_be_read_is_a_miss(tmp_path, monkeypatch):
    # chmod 000 (which root ignores, hence the error raised where the read would meet it), or an
    # entry's name taken by a folder
    with disk_cache.cache_in(tmp_path):
        entry = _stored(tmp_path)
        with monkeypatch.context() as patched:
            patched.setattr(disk_cache.Path, "read_bytes", lambda self: (_ for _ in ()).throw(PermissionError(self)))
            assert disk_cache.load("t", "key") is None
        assert disk_cache.load("t", "key") == VALUE
        entry.unlink()
        entry.mkdir()
        assert disk_cache.load("t", "key") is None
        disk_cache.store("t", "key", VALUE)            # cannot replace the folder: nothing, no error
        assert disk_cache.load("t", "key") is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_an_entry_that_is_a_named_pipe_or_a_device_is_a_miss_not_a_hang(tmp_path):
    # a named pipe in an entry's place blocked the run's read for ever (a device would be read
    # until memory ran out): whatever is in the cache, a run computes what it cannot read
    import threading

    with disk_cache.cache_in(tmp_path):
        entry = _stored(tmp_path)
        entry.unlink()
        os.mkfifo(entry)
        found = []
        reader = threading.Thread(target=lambda: found.append(disk_cache.load("t", "key")), daemon=True)
        reader.start()
        reader.join(timeout=10)
        if reader.is_alive():   # let the blocked read go before failing
            os.close(os.open(entry, os.O_WRONLY | os.O_NONBLOCK))
            reader.join(timeout=10)
            pytest.fail("load waited on a named pipe")
        assert found == [None]
        entry.unlink()
        entry.symlink_to(os.devnull)
        assert disk_cache.load("t", "key") is None
