"""A request trace is told apart by its header, whatever its suffix, in ``check`` and ``describe`` as
in ``run``: a trace workload reads any file but a .jsonl as CSV, so ``run`` served ``trace.txt``
while ``check`` and ``describe`` read it as YAML and said "expected a YAML mapping at the top level,
got str"."""
from __future__ import annotations

import pytest

from sn40l_sim.commands.check import check_file
from sn40l_sim.commands.cli import main
from sn40l_sim.errors import InputError

SIMULATOR = "arrival_s,prompt_len,output_len\n0,100,10\n2.5,300,20\n"
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:15:46.5000000,374,44\n2023-11-16 18:15:48.2500000,396,109\n")


@pytest.mark.parametrize("name", ["trace.txt", "trace.tsv", "trace", "trace.dat"])
@pytest.mark.parametrize("text, span", [(SIMULATOR, "2.5 s"), (AZURE, "1.75 s")])
def test_a_trace_of_any_suffix_checks_and_describes_as_a_trace(tmp_path, capsys, name, text, span):
    path = tmp_path / name
    path.write_text(text)
    assert check_file(path) == f"trace (2 requests over {span})"
    assert main(["describe", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"trace {path}: 2 requests over {span}"), out


def test_a_bad_row_of_such_a_trace_is_its_line_not_a_yaml_error(tmp_path):
    path = tmp_path / "trace.txt"
    path.write_text("arrival_s,prompt_len,output_len\n0,100,10\n1,abc,10\n")
    with pytest.raises(InputError) as info:
        check_file(path)
    assert str(info.value) == f"{path}:3: prompt_len: expected an integer, got 'abc'"


@pytest.mark.parametrize("name", ["notes.txt", "exp.yml"])
def test_a_file_without_a_trace_header_is_still_read_as_yaml(tmp_path, name):
    path = tmp_path / name
    path.write_text("just some text\n")
    with pytest.raises(InputError, match="expected a YAML mapping at the top level, got str"):
        check_file(path)
