"""Planted bugs in multi-head latent attention (mla) that the vectors must catch at every
dtype: a NumPy sketch of the naive form with one mistake switched on at a time."""

import math

import numpy as np
import pytest
from attnspec.backends.numpy import attention, positional

from .mutants import assert_rejected, mutant, rejections

BUGS = {
    "rope-whole-key": "RoPE over the whole query/key head (Dn + Dr features), Llama-style",
    "rope-key-per-head": "the shared rope key repeated in a (B, T, H, Dr) layout and viewed as "
                         "(B, H, T, Dr) without the transpose: a different key per head",
    "half-layout": "rotate_half pairs (i, i + Dr/2) where DeepSeek's interleaved pairs are meant",
    "mscale-not-squared": "softmax scale m / sqrt(Dn + Dr) instead of m^2 / sqrt(Dn + Dr)",
    "kv-norm-skipped": "kv_a_layernorm skipped: c_kv = (x W_kv_a)[..., :R] unnormalised",
    "scale-nope-width": "softmax scale 1 / sqrt(Dn) (the nope width only)",
}


def sketch(bug=None):
    def mla(x, mask=None, *, num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, eps=1e-6,
            rope_base=10000.0, rope_convention="interleaved", yarn_factor=1.0, mscale_all_dim=0.0,
            offset=0, params):
        h, dn, dr, dv, p = num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, params
        b, t, _ = x.shape
        conv = "half" if bug == "half-layout" else rope_convention

        def rms(z, g):
            return z / np.sqrt((z * z).mean(-1, keepdims=True) + eps) * g

        def heads(z, w):  # (B, T, H*w) -> (B, H, T, w)
            return z.reshape(b, t, h, w).transpose(0, 2, 1, 3)

        def rope(z):
            return positional.rope(z, offset=offset, base=rope_base, convention=conv)

        q = (x @ p["w_q"] if "w_q" in p else rms(x @ p["w_q_a"], p["q_norm.gamma"]) @ p["w_q_b"])
        q = heads(q, dn + dr)  # (B, H, T, Dn + Dr)
        a = x @ p["w_kv_a"]  # (B, T, R + Dr)
        r = a.shape[-1] - dr
        c_kv = a[..., :r] if bug == "kv-norm-skipped" else rms(a[..., :r], p["kv_norm.gamma"])
        kv = heads(c_kv @ p["w_kv_b"], dn + dv)
        k_nope, v = kv[..., :dn], kv[..., dn:]
        k_pe = a[:, None, :, r:]  # (B, 1, T, Dr)
        if bug == "rope-whole-key":
            qq = rope(q)
            kk = rope(np.concatenate([k_nope, np.broadcast_to(k_pe, (b, h, t, dr))], -1))
        else:
            k_rot = rope(k_pe)
            if bug == "rope-key-per-head":
                k_rep = np.repeat(k_rot[:, 0, :, None, :], h, axis=2).reshape(b, h, t, dr)
            else:
                k_rep = np.broadcast_to(k_rot, (b, h, t, dr))
            qq = np.concatenate([q[..., :dn], rope(q[..., dn:])], -1)
            kk = np.concatenate([k_nope, k_rep], -1)
        m = 0.1 * mscale_all_dim * math.log(yarn_factor) + 1 if yarn_factor > 1 else 1.0
        scale = (m if bug == "mscale-not-squared" else m * m) / math.sqrt(dn + dr)
        if bug == "scale-nope-width":
            scale = 1 / math.sqrt(dn)
        keep = np.tril(np.ones((t, t), dtype=bool))
        keep = keep if mask is None else keep & mask
        out, _ = attention.sdpa(qq, kk, v, keep, scale=scale)  # (B, H, T, Dv)
        return out.transpose(0, 2, 1, 3).reshape(b, t, h * dv) @ p["w_o"]
    return mla


def test_correct_mla_sketch_is_not_rejected():
    """The harness itself: the sketch without a bug passes every value vector."""
    assert set(rejections(mutant(mla=sketch()), "mla").values()) == {0}


@pytest.mark.parametrize("name", sorted(BUGS))
def test_mla_mutant_is_rejected(name):
    assert_rejected(mutant(mla=sketch(name)), "mla")
