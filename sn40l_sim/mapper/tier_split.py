"""Where a kernel's tensors live: for weights, KV, offloaded KV and activations, the fraction
held in each memory tier (:class:`TierSplit`), and the bytes an operator moves to and from each.
The memory placement (:mod:`~sn40l_sim.mapper.memory`) decides the split; the stages of a section
(:mod:`~sn40l_sim.mapper.stages`) stream each tier's bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from sn40l_sim.ir import Operator

#: a memory tier's name (a key of ``SocketSpec.memory``)
Tier = str
#: (tier, fraction) pairs in placement order; the first tier takes what rounding leaves
Shares = tuple[tuple[Tier, float], ...]

USES = ("weights", "kv", "activations", "kv_offload")


@dataclass(frozen=True)
class TierSplit:
    """Where a kernel's tensors live: for weights and for KV, the fraction held in each tier.

    The memory placement spills the same fraction of every layer (see
    :func:`sn40l_sim.mapper.memory.place_memory`), so identical layers stay identical. Tiers are
    listed in placement order; only tiers that hold a share appear. ``kv_offload`` is where a KV
    policy's store lives (the whole cache of DDR offload with recall); empty when there is none,
    and then store traffic, if any, goes with the KV.
    """

    weights: Shares
    kv: Shares
    #: tier of the activations handed between kernels (the one holding most of them when they
    #: span several: collectives stage through it)
    activations: Tier
    kv_offload: Shares = ()
    #: the fraction of the activations in each tier when they span several (the placement spills
    #: the same fraction of every kernel's, so a kernel streams each share from its tier); empty
    #: when they all live in ``activations``
    activation_shares: Shares = ()

    @classmethod
    def all_in(cls, tier: Tier) -> TierSplit:
        """Everything in one tier.

        >>> TierSplit.all_in("hbm")
        TierSplit(weights=(('hbm', 1.0),), kv=(('hbm', 1.0),), activations='hbm', kv_offload=(), activation_shares=())
        """
        return cls(((tier, 1.0),), ((tier, 1.0),), tier)

    def tiers(self) -> tuple[Tier, ...]:
        """Every tier this split puts bytes in, in placement order."""
        got = self.__dict__.get("_tiers")
        if got is None:
            # kept on the instance (not a field: equality, hashing and repr ignore it): the mapper
            # asks for every operator of every section it plans
            got = tuple(dict.fromkeys([t for t, _ in self.weights] + [t for t, _ in self.kv] + [self.activations]
                                      + [t for t, _ in self.activation_shares] + [t for t, _ in self.kv_offload]))
            object.__setattr__(self, "_tiers", got)
        return got

    def split(self, op: Operator, spill_bytes: int = 0) -> dict[Tier, int]:
        """Bytes ``op`` moves to and from each tier (plus ``spill_bytes`` of activations).

        >>> op = Operator("w", "gemm", m=1, k=1, n=1, weight_bytes=1000, kv_read_bytes=10, act_in_bytes=4)
        >>> TierSplit((("hbm", 0.75), ("ddr", 0.25)), (("hbm", 1.0),), "hbm").split(op)
        {'hbm': 764, 'ddr': 250}
        """
        return self.split_bytes(op.weight_bytes, op.kv_read_bytes + op.kv_write_bytes,
                                op.kv_offload_read_bytes + op.kv_offload_write_bytes,
                                op.act_in_bytes + op.act_out_bytes + spill_bytes)

    def split_bytes(self, weight_bytes: int, kv_bytes: int, kv_offload_bytes: int,
                    activation_bytes: int) -> dict[Tier, int]:
        """Bytes to and from each tier of that many bytes of weights, KV, offloaded KV and
        activations (:meth:`split` of an operator moving them).

        >>> TierSplit((("hbm", 0.75), ("ddr", 0.25)), (("hbm", 1.0),), "hbm").split_bytes(1000, 10, 0, 4)
        {'hbm': 764, 'ddr': 250}
        >>> TierSplit((("hbm", 1.0),), (("hbm", 1.0),), "ddr", activation_shares=(("hbm", 0.4), ("ddr", 0.6))
        ...           ).split_bytes(1000, 10, 0, 100)
        {'hbm': 1050, 'ddr': 60}
        """
        out: dict[Tier, int] = dict.fromkeys(self.tiers(), 0)
        for shares, n_bytes in ((self.weights, weight_bytes), (self.kv, kv_bytes),
                                (self.kv_offload or self.kv, kv_offload_bytes),
                                (self.activation_shares or ((self.activations, 1.0),), activation_bytes)):
            if len(shares) == 1:   # one tier takes it all (what _apportion gives, without the dicts)
                out[shares[0][0]] += n_bytes
                continue
            for tier, n in _apportion(shares, n_bytes).items():
                out[tier] += n
        return out


def _apportion(shares: Shares, n_bytes: int) -> dict[Tier, int]:
    """``n_bytes`` over the tiers of ``shares``: every tier after the first gets its rounded share,
    the first what is left (so the parts add up to ``n_bytes`` exactly)."""
    rest = {tier: round(n_bytes * fraction) for tier, fraction in shares[1:]}
    return {shares[0][0]: n_bytes - sum(rest.values()), **rest}
