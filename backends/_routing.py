"""Expert selection on the host (spec/components/moe_router.md), shared by the NumPy and MLX
backends: which experts a token gets is integer logic on the selection scores (ties to
the lowest id, a group scored by the sum of its top two or by its largest), not differentiated, so it is
written once here in NumPy, as ``_checks.t5_buckets`` and ``_rope`` are."""

from __future__ import annotations

import numpy as np


def ranked(s):
    """(N, M) -> ids by s descending, ties by the lowest id (a stable sort of -s)."""
    return np.argsort(-s, axis=-1, kind="stable")


def select(s, top_k, n_group, topk_group, group_score="sum_top2"):
    n, e = s.shape
    if n_group > 1:
        grouped = np.sort(s.reshape(n, n_group, e // n_group), axis=-1)   # (N, G, E/G)
        g = grouped[..., -1]                                               # (N, G): "max"
        if group_score == "sum_top2":
            g = g + grouped[..., -2]
        chosen = ranked(g)[:, :topk_group]                                # (N, topk_group)
        allowed = np.zeros((n, n_group), dtype=bool)
        np.put_along_axis(allowed, chosen, True, axis=-1)
        s = np.where(np.repeat(allowed, e // n_group, axis=-1), s, -np.inf)
    return ranked(s)[:, :top_k]                                           # (N, k)
