"""Each script of scripts/ that uses the package imports this checkout's, whatever sn40l_sim is
installed: Python puts scripts/ on the path, not the checkout, so a script without the path line
rendered or judged this checkout's files with another checkout's code (docs/results.md, the
figures' sweeps)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
USERS = sorted(p for p in (REPO / "scripts").glob("*.py") if "from sn40l_sim" in p.read_text(encoding="utf-8"))


@pytest.mark.parametrize("script", USERS, ids=lambda p: p.stem)
def test_the_script_imports_this_checkouts_package(script, tmp_path):
    decoy = tmp_path / "sn40l_sim"   # another checkout's package, ahead of this one on the path
    decoy.mkdir()
    (decoy / "__init__.py").write_text("")
    probe = ("import runpy, sys\n"
             f"runpy.run_path({str(script)!r}, run_name='imported')\n"
             "import sn40l_sim\n"
             "print(sn40l_sim.__file__)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert Path(done.stdout.strip().splitlines()[-1]).resolve().is_relative_to(REPO / "sn40l_sim"), done.stderr[-800:]
