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

from .core import mp, mpa, zeros


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
        per[idx] = -mp.fsum(qc * lp for qc, lp in zip(q, log_softmax_row(list(z[idx]))))
    if reduction == "none":
        return {"loss": per}
    total = mp.fsum(per.ravel())
    if reduction == "sum":
        return {"loss": np.array(total, dtype=object)}
    return {"loss": np.array(total / n if n else mpmath.mpf("nan"), dtype=object)}
