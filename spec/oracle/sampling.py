"""Sampling filters and the deterministic draw (spec/components/sampling.md).

    z = x / temperature                                         # (N, V)
    m-th largest z: z_(m), m = min_tokens_to_keep               # always kept: z_j >= z_(m)
    top_k:  keep_j = z_j >= z_(max(k, m))                        # ties at the k-th value all kept
    top_p:  q = softmax of z over the kept; with q sorted descending (q_(1) >= q_(2) >= ...),
            r = #{ r : sum_{i < r} q_(i) < p };  keep_j &= q_j >= q_(r) or z_j >= z_(m)
    min_p:  q = softmax of z over the kept;  keep_j &= q_j >= min_p max_i q_i or z_j >= z_(m)
    probs = softmax of z over the kept (0 elsewhere)

    sample: F_j = sum_{i <= j} probs_i (id order);  id = min { j : F_j > u },
            or the last id with probs_j > 0 when no F_j exceeds u.
"""

import mpmath
import numpy as np

from .core import mpa, softmax_row


def _top_p(z, keep, top_p, floor):
    q = softmax_row(z, keep)
    mass, threshold = mpmath.mpf(0), None
    for qr in sorted(q, reverse=True):
        if mass >= top_p:
            break
        threshold, mass = qr, mass + qr
    return [k and (qj >= threshold or zj >= floor) for k, qj, zj in zip(keep, q, z)]


def _min_p(z, keep, min_p, floor):
    q = softmax_row(z, keep)
    cut = mpmath.mpf(min_p) * max(q)
    return [k and (qj >= cut or zj >= floor) for k, qj, zj in zip(keep, q, z)]


def filtered_row(row, temperature, top_k, top_p, min_p, min_tokens_to_keep):
    """(probabilities, kept) of one row of logits."""
    z = [v / mpmath.mpf(temperature) for v in row]
    desc = sorted(z, reverse=True)
    v = len(z)
    floor = desc[min(min_tokens_to_keep, v) - 1]
    keep = [True] * v
    if top_k is not None and max(top_k, min_tokens_to_keep) < v:
        t = desc[max(top_k, min_tokens_to_keep) - 1]
        keep = [zj >= t for zj in z]
    if top_p < 1:
        keep = _top_p(z, keep, mpmath.mpf(top_p), floor)
    if min_p > 0:
        keep = _min_p(z, keep, min_p, floor)
    return softmax_row(z, keep), keep


def sampling_filter(logits, *, temperature=1.0, top_k=None, top_p=1.0, min_p=0.0,
                    min_tokens_to_keep=1):
    x = mpa(logits)
    probs = np.empty(x.shape, dtype=object)
    for n in range(x.shape[0]):
        probs[n], _ = filtered_row(list(x[n]), temperature, top_k, top_p, min_p,
                                   min_tokens_to_keep)
    return {"probs": probs}


def draw(q, u):
    """min { j : F_j > u }, else the last j with q_j > 0."""
    total = mpmath.mpf(0)
    for j, qj in enumerate(q):
        total += qj
        if total > u:
            return j
    return max(j for j, qj in enumerate(q) if qj > 0)


def sample(logits, u, *, temperature=1.0, top_k=None, top_p=1.0, min_p=0.0,
           min_tokens_to_keep=1):
    probs = sampling_filter(logits, temperature=temperature, top_k=top_k, top_p=top_p,
                            min_p=min_p, min_tokens_to_keep=min_tokens_to_keep)["probs"]
    u = mpa(u)
    ids = np.array([draw(list(probs[n]), u[n]) for n in range(probs.shape[0])], dtype=np.int64)
    return {"ids": ids}
