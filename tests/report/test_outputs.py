"""Output files: written whole under a temporary name, then given the mode a new file gets."""
from __future__ import annotations

import os

import pytest

from sn40l_sim.report.outputs import write_text


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_an_output_gets_the_mode_of_a_new_file_under_the_umask_not_mkstemps_0600(tmp_path, umask):
    previous = os.umask(umask)
    try:
        path = write_text(tmp_path / "results.json", "[]\n")
        with open(tmp_path / "plain.txt", "w", encoding="utf-8") as handle:
            handle.write("x")
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == (tmp_path / "plain.txt").stat().st_mode & 0o777 == 0o666 & ~umask
