"""Top-k attention: softmax over the top_k largest scaled scores of each query.

    scores[..., i, j] = scale * sum_k q[..., i, k] k[..., j, k]     scale None -> 1/sqrt(K)
    kept[..., i, :]   = the top_k keys j with mask[..., i, j] True, ranked by score
                        descending, equal scores ranked by key index ascending
                        (fewer than top_k unmasked keys: all of them);
                        ties="keep_all": every unmasked key whose score is >= the
                        top_k-th largest unmasked score (the Explicit Sparse Transformer
                        code's rule, so more than top_k keys on a tie)
                        A NaN among the unmasked scores of a row: every unmasked weight NaN.
    weights[..., i, :] = softmax over the kept keys, 0 elsewhere (nothing kept -> all 0)
    output[..., i, :]  = sum_j weights[..., i, j] v[..., j, :]   over the j with weight != 0
"""

import mpmath
import numpy as np

from .core import mpa, softmax_row, weighted_sum, zeros
from .sdpa import batch_shape, scores_of, sdpa_vjp


def topk_attention(q, k, v, mask=None, top_k=1, scale=None, ties="lower_index"):
    q, k, v = mpa(q), mpa(k), mpa(v)
    scores = scores_of(q, k, scale)  # (..., T, S)
    full = batch_shape(q, k, v) + scores.shape[-2:]
    scores = np.broadcast_to(scores, full)
    allowed = (np.ones(full, dtype=bool) if mask is None
               else np.broadcast_to(np.asarray(mask, dtype=bool), full))
    weights = zeros(full)
    for idx in np.ndindex(full[:-1]):
        row, ok = list(scores[idx]), list(allowed[idx])
        if any(ok[j] and mpmath.isnan(row[j]) for j in range(len(row))):
            weights[idx] = [mpmath.mpf("nan") if ok[j] else mpmath.mpf(0) for j in range(len(row))]
            continue
        ranked = sorted((j for j in range(len(row)) if ok[j]), key=lambda j: (-row[j], j))
        chosen = set(ranked[:int(top_k)])
        if ties == "keep_all" and ranked:
            kth = row[ranked[min(int(top_k), len(ranked)) - 1]]
            chosen = {j for j in ranked if row[j] >= kth}
        weights[idx] = softmax_row(row, [j in chosen for j in range(len(row))])
    output = weighted_sum(weights, v)  # (..., T, V)
    return {"output": output, "weights": weights}


def topk_attention_vjp(cot, q, k, v, mask=None, top_k=1, scale=None, ties="lower_index"):
    """The kept set is piecewise constant in the scores, so it is held fixed at the one the
    forward pass chose (ties and the selection are not differentiated): within it this is
    sdpa's backward pass with the kept set as the mask. A row with nothing kept: no gradient."""
    w = topk_attention(q, k, v, mask=mask, top_k=top_k, scale=scale, ties=ties)["weights"]
    kept = np.vectorize(lambda e: e != 0, otypes=[bool])(w)  # (..., T, S)
    return sdpa_vjp(cot, q, k, v, mask=kept, scale=scale)


VJPS = {"topk_attention": topk_attention_vjp}
