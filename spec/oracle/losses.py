"""Cross-entropy over the last axis with an ignore index and label smoothing.

    p = softmax(logits)                       over the classes (last axis, L of them)
    q = (1 - eps) onehot(t) + eps / L         (label smoothing, Szegedy et al. 2016;
                                               Vaswani et al. 2017 use eps = 0.1)
    loss_i = -sum_c q_c log p_c               for a token whose target t != ignore_index
    mean: sum_i loss_i / N over the N counted tokens (NaN when N = 0, as torch);
    sum:  sum_i loss_i;  none: loss_i per token, 0 where the target is ignored
"""

import mpmath
import numpy as np

from .core import mp, mpa, softmax, zeros


def smoothed_target(t: int, n: int, eps) -> list:
    eps = mpmath.mpf(eps)
    return [(1 - eps) * (c == t) + eps / n for c in range(n)]


def log_softmax_row(row) -> list:
    m = max(row)
    lse = m + mpmath.log(mp.fsum(mpmath.exp(v - m) for v in row))
    return [v - lse for v in row]


def cross_entropy(logits, targets, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    z = mpa(logits)
    t = np.asarray(targets)
    per = zeros(t.shape)
    n = 0
    for idx in np.ndindex(t.shape):
        if t[idx] == ignore_index:
            continue
        n += 1
        q = smoothed_target(int(t[idx]), z.shape[-1], label_smoothing)
        per[idx] = -mp.fdot(q, log_softmax_row(list(z[idx])))
    if reduction == "none":
        return {"loss": per}
    total = mp.fsum(per.ravel())
    if reduction == "sum":
        return {"loss": np.array(total, dtype=object)}
    return {"loss": np.array(total / n if n else mpmath.mpf("nan"), dtype=object)}


def cross_entropy_vjp(cot, logits, targets, ignore_index=-100, label_smoothing=0.0,
                      reduction="mean"):
    """p = softmax(logits), q = (1 - eps) onehot(t) + eps / L:
        dlogits_i = g_i (p_i - q_i) for a counted token, 0 for an ignored one, where
        g_i = dloss / N (mean over the N counted tokens), dloss (sum), dloss_i (none)
    """
    z = mpa(logits)
    t = np.asarray(targets)
    dl = mpa(cot["loss"])
    counted = t != ignore_index
    n = int(counted.sum())
    p = softmax(z, axis=-1)
    out = zeros(z.shape)
    for idx in np.ndindex(t.shape):
        if not counted[idx]:
            continue
        g = dl[idx] if reduction == "none" else (dl[()] / n if reduction == "mean" else dl[()])
        q = smoothed_target(int(t[idx]), z.shape[-1], label_smoothing)
        out[idx] = [g * (p[idx][j] - q[j]) for j in range(z.shape[-1])]
    return {"logits": out}, {}


VJPS = {"cross_entropy": cross_entropy_vjp}
