"""The decode-step table reads as the list of StepLog tuples it replaces, in 64 bytes a step."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from sn40l_sim.serving.serving_log import StepLog
from sn40l_sim.serving.step_table import StepTable

STEPS = [StepLog(0, 0, 10, 2, 2, 700, 2), StepLog(1, 3, 13, 1, 4, 2**40, 3, 5), StepLog(0, 10, 21, 1, 2, 350, 1)]


def test_it_reads_as_the_list_of_its_steps():
    table = StepTable(STEPS[:1])
    table.extend(STEPS[1:])
    assert len(table) == 3 and bool(table) and not StepTable()
    assert list(table) == STEPS and table == STEPS and table == StepTable(STEPS)
    assert table != STEPS[:2] and table != StepTable(STEPS[:2])
    assert table[0] == STEPS[0] and table[-1] == STEPS[-1] and table[1:] == STEPS[1:]
    assert type(table[0]) is StepLog and table[1].kv_bytes == 2**40 and table[1].kv_bytes_saved == 5
    with pytest.raises(IndexError):
        table[3]
    with pytest.raises(IndexError):
        table[-4]


def test_a_column_is_one_field_of_every_step():
    table = StepTable(STEPS)
    assert table.column("end").tolist() == [10, 13, 21] and table.column("end").dtype == np.int64
    assert (table.column("end") - table.column("start")).tolist() == [10, 10, 11]
    # a copy: the table keeps growing while a column is held
    ends = table.column("end")
    table.append(STEPS[0])
    assert ends.tolist() == [10, 13, 21] and len(table) == 4


def test_a_step_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError, match="8 fields"):
        StepTable().append((0, 1, 2))


def test_a_step_costs_64_bytes():
    table = StepTable(STEPS * 10_000)
    assert sys.getsizeof(table._flat) < 64 * len(table) * 1.15


def test_steps_appended_between_reads_read_back_in_order():
    # appends are packed into the array a few hundred steps at a time; any read sees every step
    rng, table, steps = np.random.default_rng(4), StepTable(), []
    for i in range(3000):
        step = StepLog(i % 4, i, i + 10, int(rng.integers(0, 1024)), 1024, int(rng.integers(0, 2**62)), 3, i)
        table.append(step)
        steps.append(step)
        if rng.random() < 0.01:
            assert len(table) == len(steps) and table[-1] == step
    assert table == steps and table.column("kv_bytes").tolist() == [s.kv_bytes for s in steps]
    table.reorder(np.arange(len(steps))[::-1])
    table.append(steps[0])
    assert list(table) == steps[::-1] + steps[:1]


@pytest.mark.parametrize("field", [2**63, -(2**63) - 1, 1.5, "7"])
def test_a_field_that_is_no_64_bit_integer_is_refused(field):
    table = StepTable(STEPS)
    with pytest.raises((OverflowError, TypeError)):
        table.append(StepLog(0, 0, 10, 1, 1, field, 1))
        len(table)
