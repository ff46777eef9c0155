"""sdpa on float8 inputs with descales (flash-attn 3's q_descale, k_descale, v_descale):

    q^[b, h] = q[b, h] * dq[b, g(h)],  k^[b, j] = k[b, j] * dk[b, j],  v^[b, j] = v[b, j] * dv[b, j]
    output   = sdpa(q^, k^, v^; scale, causal mask (bottom-right), num_kv_heads, softcap)

q (B, H, T, K), k (B, H_kv, S, K), v (B, H_kv, S, V) hold values of the float8 format
(e4m3fn or e5m2), exact as reals; g(h) = h // (H / H_kv). A descale is absent (1), a scalar
(per tensor) or (B, H_kv) (per batch entry and kv head: query head h takes its kv head's).
The products are exact here (mpf), so the expected values are sdpa's on the dequantised
inputs.

Gradients (VJP): with dq^, dk^, dv^ sdpa's gradients w.r.t. the dequantised inputs,
    dq = dq^ * dq_descale (broadcast as above), d(q_descale) = sum of dq^ * q over the
elements each descale entry multiplies (all of them per tensor; batch b and the heads of
group g per (B, H_kv)); the same for k and v.
"""

import numpy as np

from .core import fsum_axes, mpa
from .masks import causal_mask
from .sdpa import sdpa, sdpa_vjp


def _per_head(descale, b: int, h: int, h_kv: int):
    """A descale broadcast to (B, H, 1, 1) (object array), or a scalar; None stays None."""
    if descale is None:
        return None
    d = mpa(descale)
    if d.shape == ():
        return d[()]
    group = h // h_kv
    return np.array([[d[i, j // group] for j in range(h)] for i in range(b)],
                    dtype=object).reshape(b, h, 1, 1)


def _scales(q, k, q_descale, k_descale, v_descale):
    b, h, h_kv = q.shape[0], q.shape[1], k.shape[1]
    return (_per_head(q_descale, b, h, h_kv), _per_head(k_descale, b, h_kv, h_kv),
            _per_head(v_descale, b, h_kv, h_kv))


def _call(q, k, v, q_descale, k_descale, v_descale, causal):
    q, k, v = mpa(q), mpa(k), mpa(v)
    scales = _scales(q, k, q_descale, k_descale, v_descale)
    hat = [x if d is None else x * d for x, d in zip((q, k, v), scales)]
    mask = causal_mask(q.shape[2], k.shape[2])["mask"] if causal else None
    return (q, k, v), scales, hat, mask


def sdpa_fp8(q, k, v, q_descale=None, k_descale=None, v_descale=None, fp8_format="e4m3fn",
             scale=None, causal=False, num_kv_heads=None, softcap=None):
    _, _, (qh, kh, vh), mask = _call(q, k, v, q_descale, k_descale, v_descale, causal)
    out = sdpa(qh, kh, vh, mask=mask, scale=scale, num_kv_heads=num_kv_heads, softcap=softcap)
    return {"output": out["output"]}  # (B, H, T, V)


def _descale_grad(g, x, descale, h_kv: int):
    """d(descale) = sum of g * x over the elements the descale entry multiplies."""
    gx = g * x  # (B, heads, ., .)
    if np.shape(descale) == ():
        return fsum_axes(gx, (0, 1, 2, 3))
    per = fsum_axes(gx, (2, 3))  # (B, heads)
    group = per.shape[1] // h_kv
    return fsum_axes(per.reshape(per.shape[0], h_kv, group), (2,))  # (B, H_kv)


def sdpa_fp8_vjp(cot, q, k, v, q_descale=None, k_descale=None, v_descale=None,
                 fp8_format="e4m3fn", scale=None, causal=False, num_kv_heads=None, softcap=None):
    (q, k, v), scales, hat, mask = _call(q, k, v, q_descale, k_descale, v_descale, causal)
    g, _ = sdpa_vjp(cot, *hat, mask=mask, scale=scale, num_kv_heads=num_kv_heads,
                    softcap=softcap)
    grads = {}
    for name, x, d, given in zip("qkv", (q, k, v), scales, (q_descale, k_descale, v_descale)):
        grads[name] = g[name] if d is None else g[name] * d
        if given is not None:
            grads[f"{name}_descale"] = _descale_grad(g[name], x, given, k.shape[1])
    return grads, {}


VJPS = {"sdpa_fp8": sdpa_fp8_vjp}
