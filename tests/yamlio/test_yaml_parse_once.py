"""A process parses each YAML text once (``sn40l_sim.yamlio.reading``): what a reader gets back is
what a fresh parse gives, data and lines alike; an edited file is parsed again even when its size
and modification time are unchanged; no caller sees what another changed in its data; origins name
the file as each caller gave it; a text that does not parse is refused the same way every time."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.yamlio import load_document, parse_yaml, read_mapping_file, reading

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def parses(monkeypatch) -> list[str]:
    """The files :func:`parse_yaml` is called for from now on (the process's kept texts emptied first)."""
    monkeypatch.setattr(reading, "_PARSED", type(reading._PARSED)())
    calls: list[str] = []

    def counted(text: str, file: str):
        calls.append(file)
        return parse_yaml(text, file)

    monkeypatch.setattr(reading, "parse_yaml", counted)
    return calls


@pytest.mark.parametrize("name", ["hw_configs/sn40l.yaml", "experiments/deepseek_tp16.yaml",
                                  "experiments/reference/snapstream_paper.yaml"])
def test_a_text_read_again_is_what_a_fresh_parse_gives(name, parses):
    path = REPO / name
    fresh = parse_yaml(path.read_text(encoding="utf-8"), str(path))
    first, again = read_mapping_file(path), read_mapping_file(path)
    assert first == fresh and again == fresh
    assert parses == [str(path)]                 # parsed once; the second read is the kept one
    assert again[0] is not first[0]


def test_an_edited_file_is_parsed_again_whatever_its_size_and_time(tmp_path, parses):
    path = tmp_path / "x.yaml"
    path.write_text("a: 1\nb: [2, 3]\n")
    stamp = path.stat()
    assert read_mapping_file(path)[0] == {"a": 1, "b": [2, 3]}
    path.write_text("a: 7\nb: [2, 3]\n")         # same size, and the time put back
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert path.stat().st_size == stamp.st_size and path.stat().st_mtime_ns == stamp.st_mtime_ns
    assert read_mapping_file(path)[0] == {"a": 7, "b": [2, 3]}
    assert len(parses) == 2


def test_what_a_caller_changes_no_other_caller_sees(tmp_path, parses):
    path = tmp_path / "x.yaml"
    path.write_text("top: {inner: [1, {deep: 2}]}\nother: 3\n")
    data, origins = read_mapping_file(path)
    data["top"]["inner"][1]["deep"] = 99
    data["top"]["inner"].append(4)
    data["new"] = 5
    origins[("top",)] = ("elsewhere.yaml", 42)
    assert read_mapping_file(path) == ({"top": {"inner": [1, {"deep": 2}]}, "other": 3},
                                       parse_yaml(path.read_text(), str(path))[1])
    doc = load_document(path)                    # a document is its reader's too
    doc.data["other"] = -1
    assert load_document(path).data["other"] == 3 and len(parses) == 1


def test_origins_name_the_file_as_each_caller_gave_it(tmp_path, parses, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.yaml").write_text("a:\n  b: 1\n")
    (tmp_path / "y.yaml").write_text("a:\n  b: 1\n")   # the same text in another file
    monkeypatch.chdir(tmp_path)
    for given in ("sub/x.yaml", "sub/../sub/x.yaml", str(tmp_path / "y.yaml")):
        doc = load_document(given)
        shown = os.path.normpath(given)
        assert doc.where(("a", "b")) == (shown, 2)
        assert str(doc.error(("a", "b"), "expected more")) == f"{shown}:2: a.b: expected more"
    assert len(parses) == 1


def test_an_overlay_and_its_base_keep_their_own_lines(tmp_path, parses):
    (tmp_path / "base.yaml").write_text("x: 1\ny: {p: 2, q: 3}\n")
    (tmp_path / "over.yaml").write_text("base: base.yaml\n\ny: {q: 30}\n")
    for _ in range(2):
        doc = load_document(tmp_path / "over.yaml")
        assert doc.data == {"x": 1, "y": {"p": 2, "q": 30}}
        assert doc.where(("y", "q")) == (str(tmp_path / "over.yaml"), 3)
        assert doc.where(("x",)) == (str(tmp_path / "base.yaml"), 1)
    assert len(parses) == 2                      # each file once


def test_a_text_that_does_not_parse_is_refused_every_time(tmp_path, parses):
    path = tmp_path / "bad.yaml"
    path.write_text("a: 1\nb: [2\n")
    messages = []
    for _ in range(2):
        with pytest.raises(InputError) as caught:
            read_mapping_file(path)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and messages[0].startswith(f"{path}:3: YAML syntax error")
    assert len(parses) == 2


def test_an_upgrade_that_rewrites_a_file_in_place_leaves_the_kept_text_alone(parses):
    """The hardware loader converts old memory-tier keys in the document it was handed; loading the
    same files again must start from what the files say."""
    first = load_hardware(REPO / "hw_configs" / "sn40l_node16.yaml")
    again = load_hardware(REPO / "hw_configs" / "sn40l_node16.yaml")
    assert again == first and parses.count(str(REPO / "hw_configs" / "sn40l.yaml")) == 1


def test_the_process_keeps_a_bounded_number_of_texts(tmp_path, parses, monkeypatch):
    monkeypatch.setattr(reading, "PARSED_TEXTS_KEPT", 3)
    paths = []
    for i in range(5):
        paths.append(tmp_path / f"f{i}.yaml")
        paths[-1].write_text(f"i: {i}\n")
        read_mapping_file(paths[-1])
    assert len(reading._PARSED) == 3
    read_mapping_file(paths[-1])                 # kept
    read_mapping_file(paths[0])                  # dropped long ago: parsed again
    assert len(parses) == 6
