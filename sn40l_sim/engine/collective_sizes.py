"""What each member of a collective sends, step by step, for the algorithms of
:mod:`.collectives` (ring, recursive doubling, direct): byte counts only, no timing."""
from __future__ import annotations

from sn40l_sim.errors import InputError


def split_bytes(total: int, parts: int) -> list[int]:
    """``total`` bytes in ``parts`` integer chunks that differ by at most one byte.

    >>> split_bytes(10, 4), sum(split_bytes(10, 4))
    ([2, 3, 2, 3], 10)
    """
    return [total * (j + 1) // parts - total * j // parts for j in range(parts)]


def ring_sizes(kind: str, chunk: list[int], n_bytes: int, p: int) -> list[list[int]]:
    """Bytes member ``i`` (in ring position) sends at each step."""
    if kind == "all_to_all":
        block = split_bytes(n_bytes, p - 1)   # per-destination blocks of what a member sends
        # at step k a member forwards the blocks still travelling: those for distances k+1 .. p-1
        return [[sum(block[k:]) for k in range(p - 1)] for _ in range(p)]
    # reduce-scatter step k: member i sends chunk (i - k) mod p; all-gather continues the rotation
    steps = {"all_reduce": 2 * (p - 1), "reduce_scatter": p - 1, "all_gather": p - 1}[kind]
    return [[chunk[(i - k) % p] for k in range(steps)] for i in range(p)]


def tree_sizes(kind: str, n_bytes: int, p: int) -> list[int]:
    """Bytes every member sends its partner in each round of recursive doubling (halving),
    rounded up: a share smaller than a byte is still a byte, so every round runs (and pays its
    set-up and synchronisation) and no byte of a message shorter than the group is lost.

    >>> tree_sizes("all_gather", 1, 16), tree_sizes("all_gather", 17, 16)
    ([1, 1, 1, 1], [2, 3, 5, 9])

    Raises
    ------
    InputError
        At ``collective_algorithm`` for a group that is not a power of two (its partners ``2^r``
        away: a group of 6 indexed past its last member) or an all-to-all (which has no doubling:
        it was timed as a reduce-scatter), which an experiment's ``tree`` then asks of it.
    """
    if kind == "all_to_all" or p & (p - 1):
        raise InputError(f"the tree algorithm (recursive doubling) needs a power-of-two group and no all-to-all; "
                         f"the plan has a collective ({kind}) among {p} sockets "
                         "(expected auto, ring or direct)", field="collective_algorithm")
    rounds = p.bit_length() - 1
    if kind == "all_reduce":
        return [n_bytes] * rounds
    if n_bytes <= 0:
        return [0] * rounds
    if kind == "all_gather":
        return [-(-n_bytes * 2**r // p) for r in range(rounds)]
    return [-(-n_bytes // 2 ** (r + 1)) for r in range(rounds)]   # reduce-scatter


def direct_sizes(kind: str, chunk: list[int], n_bytes: int, p: int):
    """Bytes member ``i`` sends to member ``j`` in the first round, and in the second (or None)."""
    if kind == "all_to_all":
        block = split_bytes(n_bytes, p - 1)
        return [[0 if i == j else block[(j - i) % p - 1] for j in range(p)] for i in range(p)], None
    scatter = [[0 if i == j else chunk[j] for j in range(p)] for i in range(p)]
    gather = [[0 if i == j else chunk[i] for j in range(p)] for i in range(p)]
    if kind == "reduce_scatter":
        return scatter, None
    if kind == "all_gather":
        return gather, None
    return scatter, gather


def most_sent(kind: str, n_bytes: int, p: int) -> int:
    """The most bytes any member sends in the collective under any algorithm that applies (ring,
    direct and, for a power-of-two group, recursive doubling): a bound on what socket 0 stages when
    which algorithm is the fastest is not known (``engine/staging.py``).

    >>> most_sent("all_reduce", 1000, 4), most_sent("all_gather", 1000, 4)   # the tree's whole vector twice
    (2000, 750)
    """
    if p < 2 or n_bytes <= 0:
        return 0
    chunk = split_bytes(n_bytes, p)
    sizes, then = direct_sizes(kind, chunk, n_bytes, p)
    sent = [sum(row) for row in ring_sizes(kind, chunk, n_bytes, p)]
    sent += [sum(sizes[i]) + (sum(then[i]) if then is not None else 0) for i in range(p)]
    if kind != "all_to_all" and p & (p - 1) == 0:
        sent.append(sum(tree_sizes(kind, n_bytes, p)))
    return max(sent)
