"""Every number a file gives is finite and inside a physical range declared once, with its unit, by
the field's type (``sn40l_sim.schema``); nothing is coerced silently.

The first test walks every spec model of the project (hardware, model, kernel template, experiment,
reference file) and finds the range of every number field, so a field added without one fails here.
"""
from __future__ import annotations

import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from sn40l_sim import schema
from sn40l_sim.commands import cli
from sn40l_sim.hardware.spec import NodeSpec, SocketSpec
from sn40l_sim.models.families import FAMILIES
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.models.template import KernelTemplates
from sn40l_sim.study.experiment import ExperimentSpec
from sn40l_sim.study.validation import ReferenceFile

REPO = Path(__file__).resolve().parents[1]
SPECS = (NodeSpec, SocketSpec, ModelSpec, KernelTemplates, ExperimentSpec, ReferenceFile,
         *FAMILIES.values())


def _ranges(metadata) -> list[schema.Range]:
    return [m.func for m in metadata if isinstance(getattr(m, "func", None), schema.Range)]


def unranged_numbers(annotation, where: str, metadata=(), seen=None) -> list[str]:
    """Dotted places of ``annotation`` where a number (int or float) has no :class:`Range`."""
    seen = set() if seen is None else seen
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return unranged_numbers(args[0], where, (*metadata, *annotation.__metadata__), seen)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return []
        seen.add(annotation)
        return [m for name, info in annotation.model_fields.items()
                for m in unranged_numbers(info.annotation, f"{annotation.__name__}.{name}", info.metadata, seen)]
    if annotation in (int, float):
        return [] if _ranges(metadata) else [where]
    if origin is dict:
        return unranged_numbers(args[1], f"{where}[value]", (), seen)
    if origin in (tuple, list, typing.Union) or str(origin) == "<class 'types.UnionType'>":
        return [m for arg in args if arg is not Ellipsis for m in unranged_numbers(arg, where, metadata, seen)]
    return []


def unchecked_flags(annotation, where: str, metadata=(), seen=None) -> list[str]:
    """Dotted places of ``annotation`` where a ``bool`` is not a :data:`schema.Flag` (pydantic would
    take ``yes``, ``off``, ``0`` or ``"no"`` for a boolean)."""
    seen = set() if seen is None else seen
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return unchecked_flags(args[0], where, (*metadata, *annotation.__metadata__), seen)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return []
        seen.add(annotation)
        return [m for name, info in annotation.model_fields.items()
                for m in unchecked_flags(info.annotation, f"{annotation.__name__}.{name}", info.metadata, seen)]
    if annotation is bool:
        return [] if any(getattr(m, "func", None) is schema.strict_flag for m in metadata) else [where]
    if origin in (dict, tuple, list, typing.Union) or str(origin) == "<class 'types.UnionType'>":
        return [m for arg in args if arg is not Ellipsis for m in unchecked_flags(arg, where, metadata, seen)]
    return []


def test_the_walk_finds_a_bool_that_is_not_a_flag():
    class Toy(schema.StrictModel):
        checked: schema.Flag = False
        bare: bool = False
        nested: dict[str, bool | None] | None = None

    assert unchecked_flags(Toy, "Toy") == ["Toy.bare", "Toy.nested"]


def test_every_on_off_field_is_a_flag():
    assert sorted({m for spec in SPECS for m in unchecked_flags(spec, spec.__name__)}) == []


@pytest.mark.parametrize("value", ["snap\nstream", "a\tb", "bell\x07", 5, None])
def test_a_name_is_text_on_one_line(value):
    # a line break in a policy's name split its rows, its point name and every one-line error naming it
    with pytest.raises(ValidationError, match="expected a name"):
        TypeAdapter(schema.Name).validate_python(value)
    assert TypeAdapter(schema.Name).validate_python("DeepSeek-R1 (FP8), 16 × SN40L") == "DeepSeek-R1 (FP8), 16 × SN40L"


@pytest.mark.parametrize("value", ["yes", "off", "no", "true", 0, 1, 1.0, None])
def test_a_flag_takes_only_true_or_false(value):
    with pytest.raises(ValidationError, match="expected true or false"):
        TypeAdapter(schema.Flag).validate_python(value)


def test_the_walk_finds_a_number_without_a_range():
    class Toy(schema.StrictModel):
        ranged: schema.PositiveInt
        bare: float
        nested: dict[str, tuple[int, ...]] | None = None

    assert unranged_numbers(Toy, "Toy") == ["Toy.bare", "Toy.nested[value]"]


def test_every_number_field_declares_its_range():
    missing = sorted({m for spec in SPECS for m in unranged_numbers(spec, spec.__name__)})
    assert missing == []


@pytest.mark.parametrize("type_name, value, words", [
    ("BytesPerSecond", 2.5, "from 1 MB/s to 1 PB/s, got 2.5 B/s"),
    ("BytesPerSecond", "2.5 B/s", "got 2.5 B/s"),
    ("BytesPerSecond", 1e30, "got 1e+30 B/s"),
    ("BytesPerSecond", float("inf"), "finite bandwidth"),
    ("Hertz", "1.6 THz", None),          # not a unit of frequency the parser knows
    ("Hertz", 200e9, "from 1 MHz to 100 GHz"),
    ("Seconds", float("nan"), "finite time"),
    ("Seconds", -1e-9, "from 0 s"),
    ("Bytes", 0, "from 1 B to 1 PiB"),
    ("Bytes", 1e-300, "from 1 B to 1 PiB, got 1e-300 B"),   # a configuration of no size mapped and ran
    ("Bytes", "2 PiB", "to 1 PiB, got 2.2518e+15 B"),
    ("PositiveInt", 2**31, "from 1 to 2147483647"),
    ("PositiveInt", 1e30, "from 1 to 2147483647"),
    # a count written as a float too large to be an exact integer was quoted as the integer the
    # float converts to, 300 digits the file never held (1e300: "got 100...0525047602...")
    ("PositiveInt", 1e30, "(2**31 - 1), got 1e+30"),
    ("PositiveInt", -1e300, "(2**31 - 1), got -1e+300"),
    ("PositiveInt", 1e10, "(2**31 - 1), got 10000000000"),
    ("PositiveInt", float("nan"), "expected an integer"),
    ("PositiveInt", "8", "expected an integer, got '8'"),
    ("PositiveInt", True, "expected an integer, got True"),
    ("NonNegativeInt", -1, "from 0 to"),
    ("Fraction", 1.5, "greater than 0 and at most 1"),
    ("Fraction", "0.5", "expected a number, got '0.5'"),
    ("RatePerCycle", 0, "from 1/1024 to 1024 per cycle, got 0"),
    # a MAC or transcendental rate of 1e-12 per cycle passed, and run stopped with an OverflowError
    # traceback from the serving loop's clock
    ("RatePerCycle", 1e-12, "from 1/1024 to 1024 per cycle, got 1e-12"),
    # an integer past a float's range (a YAML value of 400 digits) stopped with OverflowError
    pytest.param("PositiveInt", 10**400, "(2**31 - 1), got 1000000000", id="PositiveInt-401-digits"),
    pytest.param("Hertz", 10**400, "expected a finite frequency quantity", id="Hertz-401-digits"),
    pytest.param("Bytes", -10**400, "expected a finite bytes quantity", id="Bytes-minus-401-digits"),
])
def test_out_of_range_values_are_refused(type_name, value, words):
    with pytest.raises(ValidationError) as info:
        TypeAdapter(getattr(schema, type_name)).validate_python(value)
    if words:
        assert words in str(info.value)


@pytest.mark.parametrize("type_name, value, expected", [
    ("BytesPerSecond", "1.6 TB/s", 1.6e12), ("Hertz", "1.6 GHz", 1.6e9), ("Seconds", "150 ns", 150e-9),
    ("Bytes", "64 GiB", 64 * 2**30), ("PositiveInt", 4.0, 4), ("Fraction", 1, 1.0),
    ("RatePerCycle", 1 / 1024, 1 / 1024), ("RatePerCycle", 0.25, 0.25),
])
def test_in_range_values_are_read(type_name, value, expected):
    assert TypeAdapter(getattr(schema, type_name)).validate_python(value) == pytest.approx(expected)


@pytest.mark.parametrize("name, words", [
    ("x" * 101, "at most 100 characters"), (" full", "without spaces at its start or end"),
    ("full\t", "without control characters"), ("", "got an empty one"),
])
def test_names_are_one_short_visible_line(name, words):
    assert TypeAdapter(schema.Name).validate_python("x" * 100) == "x" * 100
    with pytest.raises(ValidationError, match=words):
        TypeAdapter(schema.Name).validate_python(name)


@pytest.mark.parametrize("name", ["../../x", "/abs/x", "a/b", "..", ".hidden", "-rf", "", "x" * 101, "a b"])
def test_experiment_names_are_plain(name):
    with pytest.raises(ValidationError, match="plain name"):
        TypeAdapter(schema.PlainName).validate_python(name)


@pytest.mark.parametrize("edit, field, words", [
    (("seed: 7", "seed: 7\n  speculative: {drafts: 99, acceptance: 0.8}"), "serving.speculative.drafts",
     "from 0 to 15"),
    (("seed: 7", "seed: 7\n  speculative: {drafts: 2, acceptance: 1.5}"), "serving.speculative.acceptance",
     "from 0 to 1"),
    (("rate_per_s: 4", "rate_per_s: .inf"), "workload.rate_per_s", "finite positive request rate"),
    (("rate_per_s: 4", "rate_per_s: '4'"), "workload.rate_per_s", "expected a number, got '4'"),
    (("seed: 7", "seed: 2147483648"), "serving.seed", "from 0 to 2147483647"),
    (("high: 512", "high: 1e30"), "workload.output_len.high", "from 1 to 2147483647 (2**31 - 1), got 1e+30"),
    (("name: llama8b_node8", "name: ../../escaped"), "name", "plain name"),
    (("budget: 0.25", "budget: 30"), "policies[1].prompt_fraction.budget", "at most 1"),
    # a negative time was answered with the range of every time (0 to 1e6 s), not the field's own
    (("seed: 7", "seed: 7\nslo: {ttft: {max_s: -1 s, percentile: 90}}"), "slo.ttft.max_s",
     "expected a latency bound greater than 0 s and at most 86400 s (a day), got -1 s"),
    # YAML 1.2 reads off as text, which pydantic took for false: kernel looping went off unsaid
    (("seed: 7", "seed: 7\nexecution: {kernel_looping: off}"), "execution.kernel_looping",
     "expected true or false, got 'off'"),
    (("seed: 7", "seed: 7\n  prefix_cache: 0"), "serving.prefix_cache", "expected true or false, got 0"),
    (("{name: snapstream, policy", '{name: "snap\\nstream", policy'), "policies[1].name",
     "expected a name on one line, without control characters (a line break, a tab), got 'snap\\nstream'"),
    # 'snapstream ' was shown as 'snapstream' in every table, and map --policy snapstream did not find it
    (("{name: snapstream, policy", '{name: "snapstream ", policy'), "policies[1].name",
     "expected a name without spaces at its start or end (tables show it without them), got 'snapstream '"),
])
def test_experiment_values_out_of_range_are_one_line(tmp_path, capsys, edit, field, words):
    text = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")
    assert edit[0] in text
    path = tmp_path / "e.yaml"
    path.write_text(text.replace(edit[0], edit[1]))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f": {field}: " in err and words in err, err


def test_docs_list_every_declared_range():
    text = (REPO / "docs" / "robustness.md").read_text()
    missing = [name for name, r in schema.RANGES.items() if f"| `{name}` | {r.what} | {r.text()} |" not in text]
    assert missing == []
