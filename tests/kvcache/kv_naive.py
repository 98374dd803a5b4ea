"""Deliberately plain re-implementations (loops, argsort) that the kvcache tests
compare the reference against; nothing here shares code with sn40l_sim.reference.snapstream."""
import numpy as np


def naive_scores(q, k, prompt_len, sink, recent, window, scale):
    """[H, E]: per head, softmax-over-the-middle attention of the window queries, summed over rows."""
    heads, groups = q.shape[0], k.shape[0]
    middle = list(range(sink, prompt_len - recent))
    out = np.zeros((heads, len(middle)))
    for h in range(heads):
        g = h // (heads // groups)
        for qp in range(max(prompt_len - window, 0), prompt_len):
            seen = [j for j, kp in enumerate(middle) if kp <= qp]
            if not seen:
                continue
            logits = np.array([q[h, qp] @ k[g, middle[j]] * scale for j in seen])
            w = np.exp(logits - logits.max())
            out[h, seen] += w / w.sum()
    return out


def naive_pool(scores_row, pool_kernel):
    """Centred mean over ``pool_kernel`` positions, positions outside the row counting as 0."""
    half, n = pool_kernel // 2, len(scores_row)
    return np.array([sum(scores_row[j] for j in range(i - half, i + half + 1) if 0 <= j < n)
                     / pool_kernel for i in range(n)])


def naive_select(scores_row, pool_kernel, topk, sink):
    order = np.argsort(-naive_pool(scores_row, pool_kernel), kind="stable")[:topk]
    return sorted(int(i) + sink for i in order)


def assert_is_top_k(selected, scores_row, pool_kernel, topk, sink, tol=1e-9):
    """``selected`` is the top-K of the pooled scores: exactly the naive choice when the K-th and
    (K+1)-th scores are apart, else any choice whose scores are within ``tol`` of the naive one's
    (different summation orders may break an exact tie either way)."""
    pooled = naive_pool(scores_row, pool_kernel)
    ranked = np.sort(pooled)[::-1]
    count = min(topk, pooled.size)
    assert len(selected) == count == len(set(selected))
    if count < pooled.size and ranked[count - 1] - ranked[count] <= tol:
        chosen = pooled[[p - sink for p in selected]]
        rest = np.delete(pooled, [p - sink for p in selected])
        assert chosen.min() >= rest.max() - tol
    else:
        assert sorted(selected) == naive_select(scores_row, pool_kernel, topk, sink)


def naive_attention(q_h, keys, values, scale):
    """One head's attention over explicit key/value rows."""
    logits = np.array([kr @ q_h * scale for kr in keys])
    w = np.exp(logits - logits.max())
    return (w[:, None] * values).sum(axis=0) / w.sum()
