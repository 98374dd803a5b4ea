"""The promise under fuzzing, at a size CI affords: mutants of every shipped YAML file (keys deleted,
renamed or retyped; NaN, infinite, huge, negative values; bad units, dates, non-text keys; truncated,
invalid or binary text; alias bombs, self-referencing aliases, deep nesting) go through ``check`` in
this process, each under a time limit. A mutant is refused with exit status 2 and one line (no
traceback, no hang), or it is a valid file; one that can never be valid is always refused.

``benchmarks/fuzz.py`` runs the same mutations 10,000 times (docs/robustness.md has its table).
"""
from __future__ import annotations

import importlib.util
import random
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("sn40l_fuzz", REPO / "benchmarks" / "fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["sn40l_fuzz"] = fuzz   # its dataclasses look their module up
_spec.loader.exec_module(fuzz)

_SANDBOX: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def sandbox():
    _SANDBOX.append(fuzz.sandbox())
    yield
    shutil.rmtree(_SANDBOX.pop(), ignore_errors=True)


def test_every_shipped_file_and_mutation_is_covered():
    assert len(fuzz.SHIPPED) == 30 and set(fuzz.ALWAYS_INVALID) < set(fuzz.MUTATIONS)


@settings(max_examples=45, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(file=st.sampled_from(fuzz.SHIPPED), mutation=st.sampled_from(list(fuzz.MUTATIONS)),
       seed=st.integers(0, 2**31 - 1))
def test_a_mutant_is_refused_in_one_line_or_valid(file, mutation, seed):
    result = fuzz.run_case(_SANDBOX[-1], fuzz.Case(file, mutation, seed), timeout_s=20)
    if result is None:   # the mutation does not apply to this file (no quantity to change, say)
        return
    assert result.outcome in ("exit 2, one line", "accepted (may be valid)"), (result.outcome, result.detail)


@pytest.mark.parametrize("mutation", sorted(fuzz.ALWAYS_INVALID))
def test_mutations_that_cannot_be_valid_are_refused_in_every_file_kind(mutation):
    for file in ("hw_configs/sn40l.yaml", "hw_configs/sn40l_node8.yaml", "graphs/llama3_1_8b.yaml",
                 "graphs/kernels_llama.yaml", "experiments/llama8b_node8.yaml",
                 "experiments/reference/snapstream_paper.yaml"):
        result = fuzz.run_case(_SANDBOX[-1], fuzz.Case(file, mutation, 5), timeout_s=20)
        assert result is None or result.outcome == "exit 2, one line", (file, result)


@pytest.mark.parametrize("mutation", ["inf", "huge", "rename_key", "binary"])
def test_a_mutant_comes_from_its_seed_alone_and_leaves_the_global_generator_alone(mutation):
    # the number's value and every other draw come from the case's own generators: whatever the
    # module's generator did before, a seed gives one mutant, and the module's sequence goes on
    case = fuzz.Case("hw_configs/sn40l.yaml", mutation, 11)
    random.seed(3)
    first = fuzz.make_mutant(case)
    expected_next = random.Random(3).random()
    assert random.random() == expected_next
    random.seed(4)
    random.random()
    assert fuzz.make_mutant(case) == first and first is not None
