"""sdpa over a packed batch of B sequences (flash-attn's flash_attn_varlen_func):

    sequence b: queries q[cq_b : cq_{b+1}], keys and values k, v[ck_b : ck_{b+1}]
    output[cq_b : cq_{b+1}, h] = sdpa(q_b[:, h], k_b[:, g(h)], v_b[:, g(h)], mask_b)

with cq = cu_seqlens_q, ck = cu_seqlens_k, g(h) = h // (H / H_kv) and mask_b the causal
mask of (T_b, S_b) aligned bottom-right (causal), the sliding window of that many keys
(window; itself causal), or none. window_left / window_right (flash-attn's window_size):
the local window p - left <= j <= p + right of masks.local_window_mask, met with causal
(right = 0) and window. A sequence with queries and no kept key gives zero rows.
"""

import numpy as np

from .core import mpa
from .masks import causal_mask, local_window_mask, sliding_window_mask
from .sdpa import sdpa, sdpa_vjp


def _spans(cu_seqlens_q, cu_seqlens_k):
    cq = [int(x) for x in np.asarray(cu_seqlens_q)]
    ck = [int(x) for x in np.asarray(cu_seqlens_k)]
    return list(zip(zip(cq, cq[1:]), zip(ck, ck[1:])))


def _band(left, right, causal, window):
    """flash-attn's window_size=(left, right) met with causal (right = 0) and window W
    (left <= W - 1, right = 0); None when neither side is given."""
    if left is None and right is None:
        return None
    if causal or window is not None:
        right = 0
    if window is not None:
        left = window - 1 if left is None else min(left, window - 1)
    return left, right


def _mask(t, s, causal, window, band=None):
    if band is not None:
        return local_window_mask(t, s, *band)["mask"]
    if window is not None:
        return sliding_window_mask(t, s, window)["mask"]
    return causal_mask(t, s)["mask"] if causal else None


def _heads_first(x):
    return np.transpose(x, (1, 0, 2))  # (T, H, K) <-> (H, T, K)


def _sequence_call(q, k, v, span_q, span_k, causal, window, band=None):
    (a, e), (c, d) = span_q, span_k
    h, h_kv = q.shape[1], k.shape[1]
    return {"q": _heads_first(q[a:e]), "k": _heads_first(k[c:d]), "v": _heads_first(v[c:d]),
            "mask": _mask(e - a, d - c, causal, window, band),
            "num_kv_heads": None if h == h_kv else h_kv}


def sdpa_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                scale=None, causal=False, window=None, window_left=None, window_right=None):
    q, k, v = mpa(q), mpa(k), mpa(v)
    band = _band(window_left, window_right, causal, window)
    output = np.empty((q.shape[0], q.shape[1], v.shape[2]), dtype=object)  # (total_q, H, V)
    for span_q, span_k in _spans(cu_seqlens_q, cu_seqlens_k):
        if span_q[1] == span_q[0]:
            continue
        call = _sequence_call(q, k, v, span_q, span_k, causal, window, band)
        if span_k[1] == span_k[0]:
            output[span_q[0]:span_q[1]] = mpa(np.zeros((span_q[1] - span_q[0],) + output.shape[1:]))
            continue
        output[span_q[0]:span_q[1]] = _heads_first(sdpa(**call, scale=scale)["output"])
    return {"output": output}


def sdpa_varlen_vjp(cot, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
                    max_seqlen_k=None, scale=None, causal=False, window=None, window_left=None,
                    window_right=None):
    """Each sequence's sdpa VJP, its gradients written into its own rows of dq, dk, dv
    (the sequences share no row, so nothing is summed across them)."""
    q, k, v = mpa(q), mpa(k), mpa(v)
    dO = mpa(cot["output"])
    band = _band(window_left, window_right, causal, window)
    grads = {name: mpa(np.zeros(x.shape)) for name, x in (("q", q), ("k", k), ("v", v))}
    for span_q, span_k in _spans(cu_seqlens_q, cu_seqlens_k):
        if span_q[1] == span_q[0] or span_k[1] == span_k[0]:
            continue  # no query or no key: no gradient flows
        call = _sequence_call(q, k, v, span_q, span_k, causal, window, band)
        g, _ = sdpa_vjp({"output": _heads_first(dO[span_q[0]:span_q[1]])}, **call, scale=scale)
        grads["q"][span_q[0]:span_q[1]] = _heads_first(g["q"])
        for name in ("k", "v"):
            grads[name][span_k[0]:span_k[1]] = _heads_first(g[name])
    return grads, {}


VJPS = {"sdpa_varlen": sdpa_varlen_vjp}
