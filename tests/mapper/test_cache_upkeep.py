"""The disk cache stays bounded (docs/robustness.md, "The disk cache"): the generations of older
code and, past a size, the least recently used entries are deleted; nothing else in the folder is."""
from __future__ import annotations

import os

from sn40l_sim.mapper import cache_upkeep, disk_cache


def _generation(root, name, mtime_s, entries=1, size_bytes=100):
    """A generation folder as ``disk_cache.store`` lays it out, last used at ``mtime_s``."""
    shard = root / name / "mapped_kernel" / "ab"
    shard.mkdir(parents=True)
    for i in range(entries):
        (shard / f"{i:04d}.pkl").write_bytes(b"x" * size_bytes)
    os.utime(root / name, (mtime_s, mtime_s))
    return root / name


def test_older_generations_are_deleted_at_a_process_first_use(tmp_path):
    # every edit of the simulator started a new generation and the old ones, which no code can read
    # again, stayed: a developer's cache grew by a full set of entries per edit
    old = [_generation(tmp_path, f"{i:020x}", 1000.0 + i) for i in range(4)]   # old[3] most recent
    foreign = tmp_path / ("f" * 20)             # a 20-hex-digit name, but not laid out as a generation
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("mine")
    (tmp_path / "notes.txt").write_text("mine too")
    with disk_cache.cache_in(tmp_path):
        disk_cache.store("t", "key", 1)
        assert disk_cache.load("t", "key") == 1
    current = tmp_path / disk_cache.code_version()
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == sorted([current.name, old[3].name, old[2].name, foreign.name, "notes.txt"])
    assert (foreign / "thesis.tex").read_text() == "mine"
    assert len(kept) - 2 == cache_upkeep.KEEP_GENERATIONS


def test_a_generation_past_the_size_cap_loses_its_least_recently_used_entries(tmp_path):
    generation = _generation(tmp_path, "a" * 20, 1000.0, entries=10, size_bytes=100)
    entries = sorted(generation.rglob("*.pkl"))
    for age, path in enumerate(entries):        # entries[0] used last
        os.utime(path, (900.0 - age, 900.0 - age))
    cache_upkeep.upkeep(tmp_path, "a" * 20, max_bytes=600, now=2000.0)
    left = sorted(generation.rglob("*.pkl"))
    assert left == entries[:4]                  # 1,000 bytes down to no more than 450: the 4 most recent
    # within the check interval the size is not summed again, whatever it is
    for i in range(10, 20):
        (entries[0].parent / f"{i:04d}.pkl").write_bytes(b"x" * 100)
    cache_upkeep.upkeep(tmp_path, "a" * 20, max_bytes=600, now=2000.0 + cache_upkeep.SIZE_CHECK_INTERVAL_S / 2)
    assert len(list(generation.rglob("*.pkl"))) == 14
    cache_upkeep.upkeep(tmp_path, "a" * 20, max_bytes=600, now=2000.0 + cache_upkeep.SIZE_CHECK_INTERVAL_S)
    assert len(list(generation.rglob("*.pkl"))) == 4


def test_the_temporary_file_of_a_killed_write_is_deleted_once_it_is_old(tmp_path):
    # a write killed between its temporary file and the rename left a file that nothing read,
    # counted or deleted: a sweep killed mid-run could leave gigabytes beside the capped entries
    generation = _generation(tmp_path, "a" * 20, 1000.0, entries=2, size_bytes=100)
    shard = generation / "mapped_kernel" / "ab"
    orphan, writing = shard / ".tmp-killed", shard / ".tmp-in-progress"
    orphan.write_bytes(b"x" * 10_000)
    writing.write_bytes(b"x" * 10_000)
    now = 10_000.0
    old = now - cache_upkeep.SIZE_CHECK_INTERVAL_S
    os.utime(orphan, (old, old))
    os.utime(writing, (now - 1, now - 1))   # a write still going on in another process
    cache_upkeep.upkeep(tmp_path, "a" * 20, max_bytes=600, now=now)
    assert not orphan.exists()
    assert writing.exists()
    assert len(list(generation.rglob("*.pkl"))) == 2


def test_a_hit_marks_its_entry_recently_used(tmp_path):
    with disk_cache.cache_in(tmp_path):
        disk_cache.store("t", "key", 1)
        (entry,) = tmp_path.rglob("*.pkl")
        os.utime(entry, (1000.0, 1000.0))
        assert disk_cache.load("t", "key") == 1
        assert entry.stat().st_mtime > 1000.0
        assert disk_cache.load("t", "other") is None


def test_upkeep_of_a_folder_that_is_a_file_or_missing_is_nothing(tmp_path):
    root = tmp_path / "cache"
    root.write_text("not a folder")
    cache_upkeep.upkeep(root, "a" * 20, now=2000.0)
    assert root.read_text() == "not a folder"
    cache_upkeep.upkeep(tmp_path / "new" / "cache", "a" * 20, now=2000.0)
    assert (tmp_path / "new" / "cache" / ("a" * 20)).is_dir()


def test_upkeep_of_a_folder_it_cannot_write_deletes_nothing(tmp_path, monkeypatch):
    # a read-only folder (root ignores the mode, hence the error raised where the write meets it)
    old = [_generation(tmp_path, f"{i:020x}", 1000.0 + i) for i in range(4)]

    def refuse(*args, **kwargs):
        raise PermissionError(args[0])
    monkeypatch.setattr(cache_upkeep.os, "utime", refuse)
    cache_upkeep.upkeep(tmp_path, old[0].name, keep=1, max_bytes=0, now=2000.0)
    assert all(g.is_dir() for g in old) and len(list(tmp_path.rglob("*.pkl"))) == 4
