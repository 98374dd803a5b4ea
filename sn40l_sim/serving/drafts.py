"""The drafts each decode step accepts, per request: drawn one request at a time, or all at once.

With speculative decoding (:mod:`sn40l_sim.serving.speculation`) each sequence's accepted drafts
come from its own generator, ``numpy.random.default_rng([seed, request id])``
(:func:`request_draws`), one uniform per step, so a request's draws do not depend on what else is
served. :func:`tokens_per_step` turns one request's stream into its tokens per step.

Making a generator costs about 18 µs (numpy hashes the seed words with its ``SeedSequence``, then
seeds ``PCG64`` from four hashed words), more than all the rest a serve spends on a request.
:func:`drafted_tokens` does the same for every request of a serve at once: the ``SeedSequence``
hash of ``[seed, id]`` on arrays of ids (numpy's documented algorithm, the constants below, on
wrapping ``uint32`` arithmetic), PCG64's seeding on Python integers, then each request's uniforms
read into one array (per few hundred requests) by setting a single ``PCG64``'s state, and the
tokens per step derived by array operations on that array. The uniforms are the very numbers
``request_draws`` gives (a stream of doubles, one 64-bit output each, read the same whatever the
chunks), so the tokens are identical; numpy keeps ``SeedSequence`` and ``PCG64`` streams stable
across versions, and the tests check seed words, states and tokens against numpy's own; each bulk
draw also compares one request's starting state with numpy's generator and, should they differ
(another numpy), draws one request at a time: slower, never other numbers. A seed or id outside
``[0, 2**32)`` (hashed as several words) takes the one-request path too.

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

import numpy as np

from sn40l_sim.serving.speculation import Speculation

# numpy's SeedSequence (numpy/random/bit_generator.pyx): hash constants, pool of four words
_MASK32 = 0xFFFFFFFF
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_MULT_L, _MIX_MULT_R, _XSHIFT = 0xCA01F9DD, 0x4973F715, 16
_POOL_SIZE = 4
# PCG64's 128-bit LCG multiplier (numpy/random/src/pcg64/pcg64.h)
_PCG_MULT = (2549297995355413924 << 64) + 4865540595714422341
_MASK128 = (1 << 128) - 1


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


def pcg64_state(words: tuple[int, int, int, int]) -> tuple[int, int]:
    """The ``(state, inc)`` of ``PCG64`` seeded from four seed words (``pcg64_set_seed``: the
    first two the initial state, the last two the stream, high word first)."""
    initstate, initseq = (words[0] << 64) | words[1], (words[2] << 64) | words[3]
    inc = ((initseq << 1) | 1) & _MASK128
    state = (inc + initstate) & _MASK128          # one step from state 0, then the initial state added
    return (state * _PCG_MULT + inc) & _MASK128, inc


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
    words = list(zip(*(w.tolist() for w in seed_words(seed, np.array(ids, dtype=np.int64))), strict=True))
    if not _agrees_with_numpy(seed, ids[0], words[0]):
        return one_by_one()   # the numpy installed seeds otherwise than the algorithm above: slower, same numbers
    out: dict[int, np.ndarray] = {}
    for at in range(0, len(ids), _CHUNK):
        chunk = ids[at:at + _CHUNK]
        out.update(_drafted_chunk(spec, seed, chunk, [remaining[i] for i in chunk], words[at:at + _CHUNK]))
    return out


def _agrees_with_numpy(seed: int, request_id: int, words: tuple[int, int, int, int]) -> bool:
    """Whether the seeding reproduced here gives the state numpy's own generator of
    ``(seed, request_id)`` starts from (one generator made: a check at every bulk draw, so that a
    numpy whose seeding differed would cost speed, never change a result)."""
    own = request_draws(seed, request_id).bit_generator.state["state"]
    return pcg64_state(words) == (own["state"], own["inc"])


#: requests drawn together (their uniforms about 2 MB)
_CHUNK = 512


def _drafted_chunk(spec: Speculation, seed: int, ids: list[int], remaining: list[int],
                   words: list[tuple[int, int, int, int]]) -> dict[int, np.ndarray]:
    needed = np.array(remaining, dtype=np.int64)
    # more uniforms than tokens_per_step reads at first (the stream is the same): fewer re-reads
    counts = (needed / spec.tokens_per_step * 1.1).astype(np.int64) + 16
    ends = np.cumsum(counts)
    starts = ends - counts
    uniforms = np.empty(int(ends[-1]))
    bits = np.random.PCG64(0)   # (its state is set for each request)
    draw = np.random.Generator(bits)
    seeded = {"state": 0, "inc": 0}
    state = {"bit_generator": "PCG64", "state": seeded, "has_uint32": 0, "uinteger": 0}
    for words_of_id, a, b in zip(words, starts.tolist(), ends.tolist(), strict=True):
        seeded["state"], seeded["inc"] = pcg64_state(words_of_id)
        bits.state = state
        draw.random(out=uniforms[a:b])
    # tokens per step over all the requests' uniforms at once (small ints: k + 1 at most), and
    # their running total: each request's last step is the first whose total, less the request's
    # start, reaches what it needs
    per_step = _per_step(spec, uniforms, np.int8 if spec.drafts < 127 else np.int64).astype(np.int64)
    running = per_step.cumsum()
    bases = np.where(starts > 0, running[starts - 1], 0)
    lasts = running.searchsorted(bases + needed)
    read = lasts < ends
    lasts = lasts[read]
    per_step[lasts] -= running[lasts] - (bases + needed)[read]    # the last step gives only what is still needed
    out: dict[int, np.ndarray] = {}
    ends_read = iter((lasts + 1).tolist())
    for i, ok, a, need in zip(ids, read.tolist(), starts.tolist(), remaining, strict=True):
        # (too few uniforms read for one: its own generator, read on)
        out[i] = per_step[a:next(ends_read)] if ok else tokens_per_step(spec, request_draws(seed, i), need)[0]
    return out
