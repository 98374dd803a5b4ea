"""The schema of a reference file (``kind: reference``, ``experiments/reference/``): its
measurements, their tolerances, and which results fields a measurement can name
(:func:`check_quantity`). :mod:`~sn40l_sim.study.validation` loads the files and compares them with
the simulator."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import ValidationInfo, field_validator, model_validator

from sn40l_sim.errors import InputError, shown
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.records import SERVED_FIELDS, SERVED_GROUPS
from sn40l_sim.schema import Flag, Name, Range, StrictModel, ranged

#: a measured quantity: every results field a measurement names is a count, a fraction, a time or a
#: rate, never negative
Measured = ranged(Range("measured value", 0, 1e15, "0", "1e15 (in the field's unit)"))
#: a relative tolerance
Relative = ranged(Range("relative tolerance", 0, 10, "0", "10 (1000%)"))


class Tolerance(StrictModel):
    """Acceptance band: absolute, relative, or an explicit range of accepted simulated values."""

    abs: Measured | None = None
    rel: Relative | None = None
    range: tuple[Measured, Measured] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Tolerance:
        if sum(v is not None for v in (self.abs, self.rel, self.range)) != 1:
            raise ValueError("give exactly one of abs, rel or range")
        if self.range is not None and self.range[0] > self.range[1]:
            raise ValueError(f"range: the low end ({self.range[0]:g}) is above the high end ({self.range[1]:g})")
        return self

    def accepts(self, measured: float, simulated: float) -> bool:
        if self.range is not None:
            return self.range[0] <= simulated <= self.range[1]
        if self.abs is not None:
            return abs(simulated - measured) <= self.abs + 1e-12
        return abs(simulated - measured) <= self.rel * abs(measured) + 1e-12


class Measurement(StrictModel):
    """One measurement (or held-back prediction when ``value`` is absent)."""

    id: Name
    quantity: str
    key: str | None = None
    value: Measured | None = None
    tolerance: Tolerance | None = None
    source: str
    experiment: str
    point: str
    #: another record of the same experiment: the measurement is the ratio of the two records'
    #: quantities (e.g. a step with kernel looping off over the same step with it on)
    relative_to: str | None = None
    calibration: Flag

    @field_validator("source", "key")
    @classmethod
    def _not_blank(cls, given: str | None, info: ValidationInfo) -> str | None:
        # an empty source passed check, validate and calibrate: a measurement citing nothing; an
        # empty key passed check and was refused by validate only after its simulations
        if given is not None and not given.strip():
            what = ("where the measurement comes from (a publication and its table or figure)"
                    if info.field_name == "source" else "the key of the value measured")
            raise ValueError(f"expected {what}, got {shown(given)}")
        return given

    @field_validator("value", "tolerance", mode="before")
    @classmethod
    def _a_number_in_the_fields_unit(cls, given: Any, info: ValidationInfo) -> Any:
        # a value or an absolute band with a unit ('88.5 ms') was 'expected a number', which did not
        # say in what unit to give it
        quantity = info.data.get("quantity")
        unit = RESULTS[quantity].unit if quantity in RESULTS else ""
        number = given
        if info.field_name == "tolerance":
            if not isinstance(given, dict):
                return given
            if isinstance(given.get("rel"), str):
                raise ValueError(f"expected a fraction, without % (0.05 for 5%), got {shown(given['rel'])}")
            number = given.get("abs")
        if isinstance(number, str) and unit == "1":
            raise ValueError(f"expected a fraction, without % (0.05 for 5%), got {shown(number)}")
        if isinstance(number, str) and unit:
            raise ValueError(f"expected a number in {quantity}'s unit, {unit}, without the unit (e.g. 88.5 ms as "
                             f"0.0885 for a field in s), got {shown(number)}")
        return given

    @property
    def label(self) -> str:
        """The quantity as tables show it: ``prefill_kernel_share[mha]``; a ratio of two records says
        so (``decode_step_s ratio``), so that a measured 1.6 does not read as seconds."""
        return self.quantity + (f"[{self.key}]" if self.key else "") + (" ratio" if self.relative_to else "")


class ReferenceFile(StrictModel):
    """A ``kind: reference`` file of ``experiments/reference/``: its measurements."""

    kind: Literal["reference"]
    measurements: tuple[Measurement, ...]


def check_quantity(m: Measurement, error: Callable[[tuple, str], InputError] | None = None) -> None:
    """A measurement names a results field holding a number (``quantity``), or a mapping of numbers
    by one key (``quantity`` and ``key``, e.g. ``prefill_kernel_share`` and ``mha``).

    >>> check_quantity(Measurement(id="m", quantity="decode_tokens_per_s", key="x", source="s",
    ...                            experiment="e.yaml", point="p", calibration=True))
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: key: decode_tokens_per_s holds one number: remove key (or name a mapping field)

    Raises
    ------
    InputError
        Located with ``error(field, message)`` (field under the measurement), else naming the field.
    """
    def fail(field: str, message: str) -> InputError:
        return error((field,), message) if error else InputError(message, field=field)

    declared = RESULTS[m.quantity] if m.quantity in RESULTS else None
    if declared is None:
        raise fail("quantity", f"unknown results field {m.quantity!r}; expected a field of docs/results.md")
    if declared.parts or declared.is_list or declared.unit == "" or len(declared.keys) > 1:
        raise fail("quantity", f"{m.quantity} is not a number or a mapping of numbers by one key; expected a field "
                   "such as decode_tokens_per_s or prefill_kernel_share (docs/results.md)")
    if m.quantity in SERVED_FIELDS or declared.group in SERVED_GROUPS:   # else refused after the simulations
        raise fail("quantity", f"{m.quantity} is a figure of the served workload, which validate and calibrate do "
                   "not simulate (memory and one prefill and decode step only); expected a step figure such as "
                   "decode_step_s or prefill_s (docs/results.md)")
    if declared.keys and m.key is None:
        raise fail("key", f"{m.quantity} is a mapping by {declared.keys[0]}: give the key of the value measured")
    if not declared.keys and m.key is not None:
        raise fail("key", f"{m.quantity} holds one number: remove key (or name a mapping field)")
