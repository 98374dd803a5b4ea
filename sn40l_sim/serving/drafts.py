"""The drafts each decode step accepts, per request: drawn one request at a time, or all at once.

With speculative decoding (:mod:`sn40l_sim.serving.speculation`) each sequence's accepted drafts
come from its own generator, ``numpy.random.default_rng([seed, request id])``
(:func:`request_draws`), one uniform per step, so a request's draws do not depend on what else is
served. :func:`tokens_per_step` turns one request's stream into its tokens per step.

Making a generator costs about 18 µs (numpy hashes the seed words with its ``SeedSequence``, then
seeds ``PCG64`` from four hashed words), more than all the rest a serve spends on a request.
:func:`drafted_tokens` does the same for every request of a serve at once: the ``SeedSequence``
hash of ``[seed, id]`` on arrays of ids (numpy's documented algorithm, the constants below, on
wrapping ``uint32`` arithmetic), PCG64's seeding on arrays too (128-bit integers as pairs of
``uint64`` words), then each request's uniforms read into one array (per few hundred requests)
by setting a single ``PCG64``'s state (copied into the object where this numpy keeps it:
:func:`state_setter`), and the tokens per step derived by array operations on that array. The
uniforms are the very numbers ``request_draws`` gives (a stream of doubles, one 64-bit output
each, read the same whatever the chunks), so the tokens are identical; numpy keeps
``SeedSequence`` and ``PCG64`` streams stable across versions, and the tests check seed words,
states and tokens against numpy's own; each bulk draw also compares one request's starting state
with numpy's generator and, should they differ (another numpy), draws one request at a time:
slower, never other numbers. A seed or id outside ``[0, 2**32)`` (hashed as several words) takes
the one-request path too.

Examples
--------
>>> [a.tolist() for a in tokens_per_step(Speculation(), None, 4)]
[[1, 1, 1, 1], [1, 2, 3, 4]]
>>> [a.tolist() for a in tokens_per_step(Speculation(2, 1.0), np.random.default_rng(0), 7)]
[[3, 3, 1], [3, 6, 7]]
>>> spec = Speculation(2, 0.8)
>>> one = tokens_per_step(spec, request_draws(3, 7), 20)
>>> bulk = drafted_tokens(spec, 3, {7: 20, 8: 5})
>>> one[0].tolist() == bulk[7].tolist(), int(bulk[8].sum())
(True, 5)
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from sn40l_sim.serving.speculation import Speculation

# numpy's SeedSequence (numpy/random/bit_generator.pyx): hash constants, pool of four words
_MASK32 = 0xFFFFFFFF
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_MULT_L, _MIX_MULT_R, _XSHIFT = 0xCA01F9DD, 0x4973F715, 16
_POOL_SIZE = 4
# PCG64's 128-bit LCG multiplier (numpy/random/src/pcg64/pcg64.h)
_PCG_MULT = (2549297995355413924 << 64) + 4865540595714422341
_MASK64 = (1 << 64) - 1


def request_draws(seed: int, request_id: int) -> np.random.Generator:
    """The generator of one request's accepted drafts: seeded by ``(seed, request id)``, so a
    request's draws do not depend on what else is served."""
    return np.random.default_rng([seed, request_id])


def _per_step(spec: Speculation, uniforms: np.ndarray, dtype: type = np.int64) -> np.ndarray:
    """``1 + A`` for each uniform ``u``: ``A`` counts the ``j`` in ``1 .. k`` with ``u < a ** j``,
    as :meth:`Speculation.accepted` does."""
    tokens = np.ones(len(uniforms), dtype=dtype)
    for j in range(1, spec.drafts + 1):
        tokens += uniforms < spec.acceptance ** j
    return tokens


def _draw_count(spec: Speculation, remaining: int) -> int:
    """Uniforms to read for a sequence that needs ``remaining`` tokens: about the steps needed at
    the expected rate and a few more (rarely too few)."""
    return int(remaining / spec.tokens_per_step) + 16


def tokens_per_step(spec: Speculation, rng: np.random.Generator | None, remaining: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens each decode step gives a sequence that needs ``remaining`` more, and the running
    total after each step (the sequence's generated tokens less the first).

    A step gives ``1 + A`` tokens (``A`` the drafts it accepts, one uniform draw per step as
    :meth:`Speculation.accepted` reads it), the last one capped at what is still needed; one token
    per step without drafts (nothing drawn).
    """
    if not spec.drafts:
        return np.ones(remaining, dtype=np.int64), np.arange(1, remaining + 1, dtype=np.int64)
    assert rng is not None
    draws = _draw_count(spec, remaining)
    per_step = _per_step(spec, rng.random(draws))
    total = per_step.cumsum()
    while total[-1] < remaining:
        per_step = np.concatenate([per_step, _per_step(spec, rng.random(draws))])
        total = per_step.cumsum()
    steps = int(total.searchsorted(remaining)) + 1
    per_step, total = per_step[:steps], total[:steps]
    per_step[-1] -= int(total[-1]) - remaining
    total[-1] = remaining
    return per_step, total


def seed_words(seed: int, ids: np.ndarray) -> list[np.ndarray]:
    """``SeedSequence([seed, id]).generate_state(4, numpy.uint64)`` for every id, as four arrays
    (word ``k`` of every id in ``words[k]``); ``seed`` and the ids in ``[0, 2**32)``."""
    hash_const = _INIT_A

    def hashmix(value: np.ndarray) -> np.ndarray:
        nonlocal hash_const
        value = value ^ np.uint32(hash_const)
        hash_const = (hash_const * _MULT_A) & _MASK32
        value = value * np.uint32(hash_const)
        return value ^ (value >> np.uint32(_XSHIFT))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        result = np.uint32(_MIX_MULT_L) * x - np.uint32(_MIX_MULT_R) * y
        return result ^ (result >> np.uint32(_XSHIFT))

    ids = np.asarray(ids, dtype=np.uint32)
    entropy = [np.full(ids.shape, seed, dtype=np.uint32), ids]
    entropy += [np.zeros(ids.shape, dtype=np.uint32)] * (_POOL_SIZE - len(entropy))
    pool = [hashmix(word) for word in entropy]
    for src in range(_POOL_SIZE):
        for dst in range(_POOL_SIZE):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    hash_const, state = _INIT_B, []
    for i in range(8):   # eight 32-bit words, read as four little-endian 64-bit ones
        value = pool[i % _POOL_SIZE] ^ np.uint32(hash_const)
        hash_const = (hash_const * _MULT_B) & _MASK32
        value = value * np.uint32(hash_const)
        state.append((value ^ (value >> np.uint32(_XSHIFT))).astype(np.uint64))
    return [state[2 * k] | (state[2 * k + 1] << np.uint64(32)) for k in range(4)]


def pcg64_states(words: list[np.ndarray]) -> np.ndarray:
    """The state and increment of ``PCG64`` seeded from each lane of :func:`seed_words`' four
    arrays (``pcg64_set_seed``: the first two words the initial state, the last two the stream,
    high word first; one step from state 0, then the initial state added), as one row per lane:
    the state's low and high 64-bit words, then the increment's (128-bit sums and products as
    pairs of ``uint64`` words, wrapping)."""
    w0, w1, w2, w3 = (np.asarray(w, dtype=np.uint64) for w in words)
    one, shift = np.uint64(1), np.uint64(63)
    inc_lo, inc_hi = (w3 << one) | one, (w2 << one) | (w3 >> shift)
    lo = inc_lo + w1                                    # inc + initstate
    hi = inc_hi + w0 + (lo < w1)
    mult_lo, mult_hi = np.uint64(_PCG_MULT & _MASK64), np.uint64(_PCG_MULT >> 64)
    prod_lo, carry = _mul_64x64(lo, mult_lo)            # (inc + initstate) * multiplier + inc
    prod_hi = carry + lo * mult_hi + hi * mult_lo
    state_lo = prod_lo + inc_lo
    state_hi = prod_hi + inc_hi + (state_lo < inc_lo)
    return np.stack([state_lo, state_hi, inc_lo, inc_hi], axis=1)


def _mul_64x64(a: np.ndarray, b: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """The low and high 64-bit words of each ``a * b`` (full 128-bit products, by 32-bit halves)."""
    half, low32 = np.uint64(32), np.uint64(_MASK32)
    a0, a1, b0, b1 = a & low32, a >> half, b & low32, b >> half
    low, cross1, cross2 = a0 * b0, a0 * b1, a1 * b0
    middle = (low >> half) + (cross1 & low32) + (cross2 & low32)
    return (middle << half) | (low & low32), a1 * b1 + (cross1 >> half) + (cross2 >> half) + (middle >> half)


def drafted_tokens(spec: Speculation, seed: int, remaining: dict[int, int]) -> dict[int, np.ndarray]:
    """The tokens per step of :func:`tokens_per_step` for every request id in ``remaining`` (id ->
    tokens it still needs), from the same per-request streams, computed for all of them at once
    (a few hundred requests at a time: arrays that stay in the processor's cache)."""
    ids = list(remaining)

    def one_by_one() -> dict[int, np.ndarray]:
        return {i: tokens_per_step(spec, request_draws(seed, i), remaining[i])[0] for i in ids}

    if not spec.drafts or not ids or not 0 <= seed <= _MASK32 or not all(0 <= i <= _MASK32 for i in ids) \
            or min(remaining.values()) < 1:
        return one_by_one()
    states = pcg64_states(seed_words(seed, np.array(ids, dtype=np.int64)))
    own = request_draws(seed, ids[0]).bit_generator.state["state"]
    if _as_ints(states[0]) != (own["state"], own["inc"]):
        return one_by_one()   # the numpy installed seeds otherwise than the algorithm above: slower, same numbers
    bits = np.random.PCG64(0)   # (its state is set for each request)
    setter = state_setter(bits)
    out: dict[int, np.ndarray] = {}
    for at in range(0, len(ids), _CHUNK):
        chunk = ids[at:at + _CHUNK]
        out.update(_drafted_chunk(spec, seed, chunk, [remaining[i] for i in chunk], states[at:at + _CHUNK],
                                  bits, setter))
    return out


def _as_ints(row: np.ndarray) -> tuple[int, int]:
    """A row of :func:`pcg64_states` as the ``(state, inc)`` integers of ``PCG64.state``."""
    lo, hi, inc_lo, inc_hi = row.tolist()
    return (hi << 64) | lo, (inc_hi << 64) | inc_lo


def documented_setter(bits: np.random.PCG64) -> Callable[[np.ndarray], None]:
    """A function that sets ``bits``' state and increment to a row of :func:`pcg64_states`
    through ``PCG64.state`` (numpy's documented way)."""
    state = {"bit_generator": "PCG64", "state": {"state": 0, "inc": 0}, "has_uint32": 0, "uinteger": 0}

    def documented(row: np.ndarray) -> None:
        state["state"]["state"], state["state"]["inc"] = _as_ints(row)
        bits.state = state

    return documented


def state_setter(bits: np.random.PCG64) -> Callable[[np.ndarray], None]:
    """A faster :func:`documented_setter`, where this numpy keeps ``PCG64``'s state as expected.

    ``bits.state = {...}`` takes about 1.5 µs (a dict read, four Python integers split into
    words), half of what drawing a request's uniforms costs. numpy keeps a ``PCG64``'s state as
    two 128-bit integers inside the object, reached through the pointer at the address its
    ``ctypes`` interface gives (numpy/random/_pcg64.pyx, src/pcg64/pcg64.h), so a row is copied
    into them, in 0.3 µs. That layout is numpy's own, not its API: it is used only after a state
    set the documented way reads back, at that place, as the four words expected (the 32 bytes
    read lying inside the object); any other numpy gets the documented setter: slower, never
    other numbers.
    """
    documented = documented_setter(bits)
    documented(_PROBE)
    address = _pcg_address(bits)
    if address is None or not id(bits) <= address <= id(bits) + type(bits).__basicsize__ - _PROBE.nbytes:
        return documented
    words = np.ctypeslib.as_array((ctypes.c_uint64 * len(_PROBE)).from_address(address))
    if not np.array_equal(words, _PROBE):
        return documented
    return StateCopy(bits, words)


class StateCopy:
    """Sets a ``PCG64``'s state and increment by copying a row of :func:`pcg64_states` into the
    words where it keeps them (:func:`state_setter` found them); it holds the generator, so that
    the memory written stays the generator's for as long as this can write it."""

    __slots__ = ("bits", "words")

    def __init__(self, bits: np.random.PCG64, words: np.ndarray) -> None:
        self.bits, self.words = bits, words

    def __call__(self, row: np.ndarray) -> None:
        self.words[:] = row


#: a state and increment that read back as four distinct words in the layout expected
_PROBE = np.array([0x0123456789ABCDEF, 0x1111111111111111, 0x2222222222222223, 0x0FEDCBA987654321], np.uint64)


def _pcg_address(bits: np.random.PCG64) -> int | None:
    """Where ``bits``' state would be: the pointer at the start of the structure its ``ctypes``
    interface points to (None if it has none)."""
    try:
        return ctypes.c_void_p.from_address(bits.ctypes.state_address).value
    except (AttributeError, TypeError, ValueError):
        return None


#: requests drawn together (their uniforms about 2 MB)
_CHUNK = 512


def _drafted_chunk(spec: Speculation, seed: int, ids: list[int], remaining: list[int], states: np.ndarray,
                   bits: np.random.PCG64, set_state: Callable[[np.ndarray], None]) -> dict[int, np.ndarray]:
    needed = np.array(remaining, dtype=np.int64)
    # more uniforms than tokens_per_step reads at first (the stream is the same): fewer re-reads
    counts = (needed / spec.tokens_per_step * 1.1).astype(np.int64) + 16
    ends = np.cumsum(counts)
    starts = ends - counts
    uniforms = np.empty(int(ends[-1]))
    draw = np.random.Generator(bits).random
    for row, a, b in zip(states, starts.tolist(), ends.tolist(), strict=True):
        set_state(row)
        draw(out=uniforms[a:b])
    # tokens per step over all the requests' uniforms at once (small ints: k + 1 at most), and
    # their running total (in 32 bits while it fits: half the memory traffic); each request's
    # last step is the first whose total, less the request's start, reaches what it needs
    small = _per_step(spec, uniforms, np.int8 if spec.drafts < 127 else np.int64)
    wide = len(uniforms) * (spec.drafts + 1) + int(needed.max()) >= 2**31
    running = small.cumsum(dtype=np.int64 if wide else np.int32)
    per_step = small.astype(np.int64)
    bases = np.where(starts > 0, running[starts - 1], 0)
    # (the totals sought in the running totals' type: searchsorted would otherwise widen a copy of them)
    lasts = running.searchsorted((bases + needed).astype(running.dtype))
    read = lasts < ends
    lasts = lasts[read]
    per_step[lasts] -= running[lasts] - (bases + needed)[read]    # the last step gives only what is still needed
    out: dict[int, np.ndarray] = {}
    ends_read = iter((lasts + 1).tolist())
    for i, ok, a, need in zip(ids, read.tolist(), starts.tolist(), remaining, strict=True):
        # (too few uniforms read for one: its own generator, read on)
        out[i] = per_step[a:next(ends_read)] if ok else tokens_per_step(spec, request_draws(seed, i), need)[0]
    return out
