"""The KV-policy registry's contract (sn40l_sim/kvcache/base.py, ``register``), checked when a policy
is registered: a plug-in that breaks it is refused at its import with a message naming the class,
and no class can take a name another holds (it would silently replace a shipped policy)."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from sn40l_sim.kvcache import POLICIES, KVPolicy, make_policy, register
from sn40l_sim.kvcache.policies import SnapStream


@dataclass(frozen=True)
class Kept(KVPolicy):
    """A minimal valid policy: the last ``window`` tokens."""

    name = "kept_for_test"
    window: int = 16

    def cache_len(self, prompt_len: int, generated: int) -> int:
        return min(prompt_len + generated, self.window)

    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        return self.window

    def prefill_kernels(self, model, prompt_len, tp):
        return []


@pytest.fixture(autouse=True)
def restore():
    before = dict(POLICIES)
    yield
    POLICIES.clear()
    POLICIES.update(before)


def test_a_valid_policy_registers_and_registers_again_as_itself():
    assert register(Kept) is Kept and register(Kept) is Kept
    assert make_policy("kept_for_test", {"window": 8}).static_cache_len(100, 4) == 8


def test_a_second_class_under_a_taken_name_is_refused():
    @dataclass(frozen=True)
    class Impostor(SnapStream):
        """Calls itself snapstream."""

        name = "snapstream"

    with pytest.raises(TypeError, match="KV policy name 'snapstream' of .*Impostor .* is already registered by "
                                        r"SnapStream \(sn40l_sim.kvcache.policies.snapstream\)"):
        register(Impostor)
    assert POLICIES["snapstream"] is SnapStream


def test_a_class_breaking_the_contract_is_refused_naming_what_it_lacks():
    class NotADataclass(KVPolicy):
        """No fields for from_params."""

        name = "plain_for_test"

    @dataclass(frozen=True)
    class NoOwnName(Kept):
        """Inherits Kept's name."""

    @dataclass(frozen=True)
    class BlankName(Kept):
        """A name no experiment can write."""

        name = " "

    with pytest.raises(TypeError, match="NotADataclass .* must be a dataclass of its parameters"):
        register(NotADataclass)
    with pytest.raises(TypeError, match="NoOwnName .* must set its own class attribute name"):
        register(NoOwnName)
    with pytest.raises(TypeError, match="BlankName .* must set its own class attribute name"):
        register(BlankName)
    with pytest.raises(TypeError, match="is not a subclass of sn40l_sim.kvcache.KVPolicy"):
        register(dict)   # type: ignore[arg-type]
    assert {"plain_for_test", " "} & set(POLICIES) == set()


@pytest.mark.parametrize("method", ["decode_read_tokens", "bytes_per_sequence"])
def test_overriding_a_figure_the_simulation_never_calls_is_refused(method):
    # a Quest-style policy that reads a quarter of its slot by overriding decode_read_tokens ran to
    # exit status 0 with the bytes of the whole slot: nothing in the simulation calls it
    def quarter(self, *args):
        return 1

    Reader = dataclass(frozen=True)(type("Reader", (Kept,), {"name": "reader_for_test", method: quarter,
                                                            "__doc__": "Overrides a derived figure."}))
    with pytest.raises(TypeError, match=f"Reader .* overrides {method}, which the simulation never calls"):
        register(Reader)
    assert "reader_for_test" not in POLICIES


@pytest.mark.parametrize(("method", "expected"), [
    # before: a traceback, "Can't instantiate abstract class ...", at the first point built
    ("cache_length", "cache_length is not a KVPolicy method (did you mean cache_len?); it does not define cache_len"),
    # before: silently ignored, the policy simulated without its decode kernels
    ("decode_kernel", "decode_kernel is not a KVPolicy method (did you mean decode_kernels?); the methods a policy "
                      "defines are cache_len, static_cache_len, prefill_kernels, context_prefill_kernels, "
                      "decode_kernels, budget_tokens, memory_tiers, footprint, prefill_state_bytes (kvcache/base.py)"),
])
def test_a_misspelt_method_is_refused_naming_the_one_meant(method, expected):
    body = {"name": "misspelt_for_test", method: lambda self, *args: [], "__doc__": "A typo.",
            "static_cache_len": Kept.static_cache_len, "prefill_kernels": Kept.prefill_kernels}
    if method != "cache_length":
        body["cache_len"] = Kept.cache_len
    Typo = dataclass(frozen=True)(type("Typo", (KVPolicy,), body))
    with pytest.raises(TypeError) as info:
        register(Typo)
    assert expected in str(info.value)
    assert "misspelt_for_test" not in POLICIES
