"""Multi-head latent attention (DeepSeek-V2, DeepSeek-AI 2024; DeepSeek-V3; transformers'
DeepseekV3Attention), the naive (unabsorbed) form, x (B, T, D), H heads:

    q      = x W_q                                   (no query latent: q_lora_rank None)
           = RMSNorm(x W_q_a; q_norm.gamma) W_q_b    (a query latent of width R_q)
    q_h    = [q_nope_h (Dn) | q_pe_h (Dr)]           head h: columns h (Dn+Dr) : (h+1) (Dn+Dr)
    a      = x W_kv_a                                (B, T, R + Dr)
    c_kv   = RMSNorm(a[:, :, :R]; kv_norm.gamma)     the latent, (B, T, R)
    k_pe   = a[:, :, R:]                             ONE rope key shared by the H heads, (B, T, Dr)
    [k_nope_h (Dn) | v_h (Dv)] = (c_kv W_kv_b) columns h (Dn+Dv) : (h+1) (Dn+Dv)
    Q_h = [q_nope_h | RoPE(q_pe_h)],  K_h = [k_nope_h | RoPE(k_pe)],  V_h = v_h
    O_h = sdpa(Q_h, K_h, V_h, keep, scale = (Dn + Dr)^-1/2 m^2)
    m   = 0.1 mscale_all_dim ln(yarn_factor) + 1  if yarn_factor > 1 else 1   (yarn_get_mscale)
    y   = concat_h(O_h) W_o
keep = mask AND causal (j <= i); RoPE at positions offset + t, base rope_base, pairs
(2i, 2i+1) ("interleaved", DeepSeek's layout) or (i, i + Dr/2) ("half").
With rope_scaling (transformers' rope_parameters less rope_theta): both RoPEs are rope's with
scaling = rope_scaling (its frequencies and its attention factor on cos and sin), and m is
yarn_get_mscale(factor, mscale_all_dim) of rope_scaling when its rope_type is not "default"
and its mscale_all_dim is not 0, else 1 (transformers' yarn_apply_mscale); yarn_factor and
mscale_all_dim are then not read.
"""

import mpmath
import numpy as np

from .core import add, linear_vjp, matmul, mpa
from .llama import heads_of, keep_mask, merge_heads
from .rms_norm import rms_norm, rms_norm_vjp
from .rope import rope, rope_vjp
from .sdpa import sdpa, sdpa_vjp


def softmax_scale(qk_nope_head_dim, qk_rope_head_dim, yarn_factor=1.0, mscale_all_dim=0.0):
    """(Dn + Dr)^-1/2 m^2, m = yarn_get_mscale(yarn_factor, mscale_all_dim)."""
    m = mpmath.mpf(1)
    if yarn_factor > 1:
        m = mpmath.mpf("0.1") * mpmath.mpf(mscale_all_dim) * mpmath.log(mpmath.mpf(yarn_factor)) + 1
    return m * m / mpmath.sqrt(qk_nope_head_dim + qk_rope_head_dim)


def scale_of(dn, dr, yarn_factor, mscale_all_dim, rope_scaling):
    """The softmax scale, with rope_scaling: m from its factor and mscale_all_dim."""
    if rope_scaling is None:
        return softmax_scale(dn, dr, yarn_factor, mscale_all_dim)
    m_all = rope_scaling.get("mscale_all_dim") or 0
    if rope_scaling.get("rope_type", "default") == "default" or not m_all:
        return softmax_scale(dn, dr)
    return softmax_scale(dn, dr, rope_scaling["factor"], m_all)


def slice_last(x, lo, hi):
    return x[..., lo:hi]


def concat_last(a, b):
    return np.concatenate([a, b], axis=-1)


class _Forward:
    """Every intermediate of the naive form, kept for the backward pass."""

    def __init__(self, x, mask, num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, eps,
                 rope_base, rope_convention, yarn_factor, mscale_all_dim, offset, params,
                 rope_scaling=None):
        h, dn, dr, dv = int(num_heads), int(qk_nope_head_dim), int(qk_rope_head_dim), int(v_head_dim)
        self.h, self.dn, self.dr, self.dv, self.eps = h, dn, dr, dv, eps
        self.w = {k: mpa(v) for k, v in params.items()}
        self.rot = {"offset": offset, "base": rope_base, "convention": rope_convention}
        if rope_scaling is not None:
            self.rot["scaling"] = dict(rope_scaling)
        self.x = x = mpa(x)
        self.keep = keep_mask(x.shape[1], mask)
        self.scale = scale_of(dn, dr, yarn_factor, mscale_all_dim, rope_scaling)
        if "w_q_a" in self.w:
            self.qa = matmul(x, self.w["w_q_a"])  # (B, T, R_q)
            self.cq = rms_norm(self.qa, eps=eps, params={"gamma": self.w["q_norm.gamma"]})["y"]
            q = matmul(self.cq, self.w["w_q_b"])
        else:
            q = matmul(x, self.w["w_q"])  # (B, T, H (Dn + Dr))
        q = heads_of(q, h, dn + dr)  # (B, H, T, Dn + Dr)
        self.q_nope, self.q_pe = slice_last(q, 0, dn), slice_last(q, dn, dn + dr)
        a = matmul(x, self.w["w_kv_a"])  # (B, T, R + Dr)
        r = a.shape[-1] - dr
        self.a_c, self.k_pe = slice_last(a, 0, r), heads_of(slice_last(a, r, r + dr), 1, dr)
        self.c_kv = rms_norm(self.a_c, eps=eps, params={"gamma": self.w["kv_norm.gamma"]})["y"]
        kv = heads_of(matmul(self.c_kv, self.w["w_kv_b"]), h, dn + dv)  # (B, H, T, Dn + Dv)
        self.k_nope, self.v = slice_last(kv, 0, dn), slice_last(kv, dn, dn + dv)
        q_rot = rope(self.q_pe, **self.rot)["y"]  # (B, H, T, Dr)
        k_rot = rope(self.k_pe, **self.rot)["y"]  # (B, 1, T, Dr)
        self.qq = concat_last(self.q_nope, q_rot)
        self.kk = concat_last(self.k_nope, np.broadcast_to(k_rot, self.k_nope.shape[:-1] + (dr,)))
        r_ = sdpa(self.qq, self.kk, self.v, mask=self.keep, scale=self.scale)
        self.o = merge_heads(r_["output"])  # (B, T, H Dv)
        self.weights = r_["weights"]
        self.y = matmul(self.o, self.w["w_o"])  # (B, T, D)


def mla(x, mask=None, num_heads=1, qk_nope_head_dim=1, qk_rope_head_dim=2, v_head_dim=1,
        eps=1e-6, rope_base=10000.0, rope_convention="interleaved", yarn_factor=1.0,
        mscale_all_dim=0.0, offset=0, rope_scaling=None, params=None):
    f = _Forward(x, mask, num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, eps,
                 rope_base, rope_convention, yarn_factor, mscale_all_dim, offset, params,
                 rope_scaling)
    return {"y": f.y}


def mla_vjp(cot, x, mask=None, num_heads=1, qk_nope_head_dim=1, qk_rope_head_dim=2,
            v_head_dim=1, eps=1e-6, rope_base=10000.0, rope_convention="interleaved",
            yarn_factor=1.0, mscale_all_dim=0.0, offset=0, rope_scaling=None, params=None):
    """Backward of the naive form, from y back to x:
        dW_o = o^T dy,  dO = heads(dy W_o^T),  (dQ, dK, dV) = sdpa^T dO (scale s),
        dq_pe = RoPE^T dQ[..., Dn:],  dk_pe = sum_h RoPE^T dK_h[..., Dn:] (the shared key),
        d(c_kv W_kv_b) = merge_h [dK_h[..., :Dn] | dV_h],  dW_kv_b = c_kv^T (.),
        dc_kv = (.) W_kv_b^T,  da = [RMSNorm^T dc_kv | dk_pe],  dW_kv_a = x^T da,
        dq = merge_h [dQ[..., :Dn] | dq_pe] into W_q (or W_q_b, RMSNorm^T, W_q_a),
        dx = da W_kv_a^T + (dq W_q^T or dqa W_q_a^T).
    The mask and the positions get no gradient (rope_vjp carries rope_scaling's factor m)."""
    f = _Forward(x, mask, num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, eps,
                 rope_base, rope_convention, yarn_factor, mscale_all_dim, offset, params,
                 rope_scaling)
    dn, dr, dv, w, g = f.dn, f.dr, f.dv, f.w, {}
    d_o, g["w_o"], _ = linear_vjp(f.o, w["w_o"], mpa(cot["y"]))  # (B, T, H Dv)
    gi, _ = sdpa_vjp({"output": heads_of(d_o, f.h, dv)}, f.qq, f.kk, f.v, mask=f.keep,
                     scale=f.scale)
    dq_pe = rope_vjp({"y": slice_last(gi["q"], dn, dn + dr)}, f.q_pe, **f.rot)[0]["x"]
    dk_rot = gi["k"][..., dn:dn + dr].sum(axis=1, keepdims=True)  # (B, 1, T, Dr)
    dk_pe = rope_vjp({"y": dk_rot}, f.k_pe, **f.rot)[0]["x"]
    d_kv = merge_heads(concat_last(slice_last(gi["k"], 0, dn), gi["v"]))  # (B, T, H (Dn+Dv))
    dc, g["w_kv_b"], _ = linear_vjp(f.c_kv, w["w_kv_b"], d_kv)
    gn, pn = rms_norm_vjp({"y": dc}, f.a_c, eps=eps, params={"gamma": w["kv_norm.gamma"]})
    g["kv_norm.gamma"] = pn["gamma"]
    da = concat_last(gn["x"], merge_heads(dk_pe))  # (B, T, R + Dr)
    dx, g["w_kv_a"], _ = linear_vjp(f.x, w["w_kv_a"], da)
    dq = merge_heads(concat_last(slice_last(gi["q"], 0, dn), dq_pe))  # (B, T, H (Dn+Dr))
    if "w_q_a" in w:
        dcq, g["w_q_b"], _ = linear_vjp(f.cq, w["w_q_b"], dq)
        gq, pq = rms_norm_vjp({"y": dcq}, f.qa, eps=eps, params={"gamma": w["q_norm.gamma"]})
        g["q_norm.gamma"] = pq["gamma"]
        dxq, g["w_q_a"], _ = linear_vjp(f.x, w["w_q_a"], gq["x"])
    else:
        dxq, g["w_q"], _ = linear_vjp(f.x, w["w_q"], dq)
    return {"x": add(dx, dxq)}, g


VJPS = {"mla": mla_vjp}
