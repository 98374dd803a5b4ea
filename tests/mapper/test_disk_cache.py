"""A damaged disk-cache entry is a miss and is rewritten, never trusted (docs/robustness.md, "The disk
cache"): an entry that unpickles is not proof that it holds what was stored."""
from __future__ import annotations

import errno
import io
import os
import pickle
import random

import pytest

from sn40l_sim.mapper import disk_cache

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
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []   # no temporary file left behind
