"""What an IR object keeps beside its fields (its hash, a kernel's signature) must follow its fields:
a copy with a field changed works them out again, and a pickle carries none of them."""
import pickle

from sn40l_sim.frozen import copied
from sn40l_sim.ir import Collective, FusedKernel, Operator


def _kernel(m: int = 64, name: str = "L0.attn", layer: int | None = 0) -> FusedKernel:
    ops = (Operator("qk", "gemm", flops=2 * m * 128 * 64, m=m, n=128, k=64),
           Operator("sm", "softmax", elements=m * 128))
    return FusedKernel(name, "attn", "decode", ops, (Collective("all_reduce", 4096, 8),), layer=layer)


def test_a_copy_with_a_field_changed_hashes_as_one_built_anew():
    op = _kernel().operators[0]
    hash(op)
    twin = copied(op, m=128, flops=2 * 128 * 128 * 64)
    fresh = Operator("qk", "gemm", flops=2 * 128 * 128 * 64, m=128, n=128, k=64)
    assert twin == fresh and hash(twin) == hash(fresh) and twin != op
    assert hash(copied(op)) == hash(op)      # nothing changed: the kept hash still holds


def test_a_kernels_signature_is_kept_and_a_changed_copy_gets_its_own():
    kernel = _kernel()
    signature = kernel.signature()
    assert signature is kernel.signature()   # worked out once
    assert signature == _kernel(name="", layer=None) and hash(signature) == hash(_kernel(name="", layer=None))
    other = copied(kernel, operators=_kernel(m=256).operators)
    assert other.signature() == _kernel(m=256, name="", layer=None) != signature
    renamed = copied(kernel, name="L1.attn", layer=1)
    assert renamed.signature() == signature and hash(renamed.signature()) == hash(signature)


def test_a_pickle_keeps_the_fields_only():
    kernel = _kernel()
    hash(kernel.signature())
    hash(kernel)
    back = pickle.loads(pickle.dumps(kernel))
    assert back == kernel and set(back.__dict__) == {f for f in kernel.__dataclass_fields__}
    assert hash(back) == hash(kernel) and back.signature() == kernel.signature()
