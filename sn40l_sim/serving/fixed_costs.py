"""A :class:`~sn40l_sim.serving.step_costs.StepCosts` with fixed, hand-checkable costs.

Shipped with the package (as httpx ships its mock transport) so that serving studies and tests can
pin the serving logic to known numbers without building, mapping or simulating any graph:

* a prefill of ``L`` tokens costs ``cycles_per_token[kind] x L`` cycles for each kernel kind; a
  chunk of ``L`` tokens after ``S`` cached ones adds ``prefill_cycles_per_earlier_pair x L x S``;
* a decode step costs ``decode_base_cycles + decode_cycles_per_cached_token x batch x kv_len``,
  plus ``decode_cycles_per_draft x batch x drafts`` when it verifies speculative drafts;
* every graph's activations take ``activation_bytes``;
* where the memory placement put the tensors does not change the costs (it is kept in
  :attr:`FixedStepCosts.memory` for tests to look at).

Examples
--------
>>> costs = FixedStepCosts(prefill_cycles_per_token={"mha": 700, "moe_ffn": 300}, decode_base_cycles=1000,
...                        decode_cycles_per_cached_token=2)
>>> costs.prefill(4).cycles, costs.prefill(4).kernel_cycles
(4000, {'mha': 2800, 'moe_ffn': 1200})
>>> costs.decode_step(batch=2, kv_len=10).cycles, costs.calls
(1040, [('prefill', 4), ('prefill', 4), ('decode', 2, 10)])
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sn40l_sim.engine.phase import PhaseTiming


def fixed_timing(phase: str, kernel_cycles: dict[str, int], *, batch: int = 1, length: int = 1,
                 clock_hz: float = 1.6e9) -> PhaseTiming:
    """A :class:`PhaseTiming` of the given cycles per kernel kind (one representative layer holding
    all of them; half the cycles computing, all of them streaming HBM)."""
    cycles = sum(kernel_cycles.values())
    return PhaseTiming(phase, batch, length if phase == "prefill" else 0, length if phase == "decode" else 0,
                       cycles, cycles / clock_hz, dict(kernel_cycles), dict(kernel_cycles), 3, dict(kernel_cycles),
                       {"compute": cycles // 2, "hbm": cycles}, {"hbm": 0}, {}, (), ())


@dataclass
class FixedStepCosts:
    """Step costs from fixed rates (see the module docstring).

    Attributes
    ----------
    prefill_cycles_per_token : dict
        Kernel kind -> cycles per prompt token.
    prefill_cycles_per_earlier_pair : int
        A later chunk's attention over the earlier chunks' keys: cycles per (query, earlier key)
        pair (kernel kind ``earlier_keys``).
    decode_base_cycles : int
        Cycles of a decode step whatever its batch and cache.
    decode_cycles_per_cached_token : int
        Cycles per cached token read (``batch x kv_len`` of them per step).
    activation_bytes : int
        Activation bytes of every graph.
    clock_hz : float
        Clock for the timings' seconds.
    decode_cycles_per_draft : int
        Cycles per draft token verified (``batch x drafts`` of them per step).
    calls : list
        ``("prefill", L)`` (``("prefill", L, S)`` for a chunk after ``S`` cached tokens) and
        ``("decode", batch, kv_len)`` (``("decode", batch, kv_len, drafts)``
        with drafts) in call order.
    memory : dict
        ``"prefill"`` / ``"decode"`` -> the memory placement of the last such call (or None).
    """

    prefill_cycles_per_token: dict[str, int] = field(default_factory=lambda: {"mha": 700, "moe_ffn": 300})
    prefill_cycles_per_earlier_pair: int = 1
    decode_base_cycles: int = 40_000_000
    decode_cycles_per_cached_token: int = 10
    decode_cycles_per_draft: int = 0
    activation_bytes: int = 0
    clock_hz: float = 1.6e9
    calls: list = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)

    def prefill(self, prompt_len: int, memory: Any = None, earlier: int = 0) -> PhaseTiming:
        """Cycles per token of every kernel kind, times ``prompt_len``; a chunk after ``earlier``
        cached tokens adds :attr:`prefill_cycles_per_earlier_pair` per (query, earlier key) pair."""
        self.calls.append(("prefill", prompt_len) + ((earlier,) if earlier else ()))
        self.memory["prefill"] = memory
        kinds = {kind: rate * prompt_len for kind, rate in self.prefill_cycles_per_token.items()}
        if earlier:
            kinds["earlier_keys"] = self.prefill_cycles_per_earlier_pair * prompt_len * earlier
        return fixed_timing("prefill", kinds, length=prompt_len, clock_hz=self.clock_hz)

    def decode_step(self, batch: int, kv_len: int, drafts: int = 0, memory: Any = None) -> PhaseTiming:
        """The base cycles plus the cycles per cached token read and per draft verified."""
        self.calls.append(("decode", batch, kv_len) + ((drafts,) if drafts else ()))
        self.memory["decode"] = memory
        cycles = (self.decode_base_cycles + self.decode_cycles_per_cached_token * batch * kv_len
                  + self.decode_cycles_per_draft * batch * drafts)
        return fixed_timing("decode", {"work": cycles}, batch=batch, length=kv_len, clock_hz=self.clock_hz)

    def prefill_activation_bytes(self, prompt_len: int) -> int:
        """:attr:`activation_bytes`."""
        return self.activation_bytes

    def decode_activation_bytes(self, batch: int, kv_len: int, drafts: int = 0) -> int:
        """:attr:`activation_bytes`."""
        return self.activation_bytes
