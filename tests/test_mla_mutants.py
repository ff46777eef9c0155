"""Planted bugs in multi-head latent attention (mla) that the vectors must catch at every
dtype: a NumPy sketch of the naive form with one mistake switched on at a time."""

import math
import types

import numpy as np
import pytest
from attnspec.backends.composite.mla import Mla
from attnspec.backends.numpy import attention, positional
from attnspec.conformance.suite import test_properties_mla as props

from .mutants import assert_rejected, composite_mutant, mutant, rejections

BUGS = {
    "rope-whole-key": "RoPE over the whole query/key head (Dn + Dr features), Llama-style",
    "rope-key-per-head": "the shared rope key repeated in a (B, T, H, Dr) layout and viewed as "
                         "(B, H, T, Dr) without the transpose: a different key per head",
    "half-layout": "rotate_half pairs (i, i + Dr/2) where DeepSeek's interleaved pairs are meant",
    "mscale-not-squared": "softmax scale m / sqrt(Dn + Dr) instead of m^2 / sqrt(Dn + Dr)",
    "kv-norm-skipped": "kv_a_layernorm skipped: c_kv = (x W_kv_a)[..., :R] unnormalised",
    "scale-nope-width": "softmax scale 1 / sqrt(Dn) (the nope width only)",
    # rope_scaling (YaRN as DeepSeek-V2/V3 configure it)
    "yarn-mscale-once": "with rope_scaling, its mscale applied once: m / sqrt(Dn + Dr)",
    "yarn-mscale-on-qk": "YaRN's m applied to q_pe and the rope key (cos/sin times m) as well "
                         "as squared on the softmax scale",
    "yarn-plain-rope": "rope_scaling read for the mscale only: plain RoPE frequencies (the "
                       "converter's old refusal, silently applied)",
    "yarn-no-mscale": "rope_scaling's frequencies applied, its mscale_all_dim not: scale "
                      "1 / sqrt(Dn + Dr)",
    "yarn-rope-factor-dropped": "rope's attention factor (cos/sin times mscale / mscale_all_dim "
                                "or attention_factor) dropped, the frequencies kept",
    "yarn-mscale-from-mscale": "m from rope_scaling's mscale instead of its mscale_all_dim",
}


def yarn_m(sc, key="mscale_all_dim"):
    """transformers' yarn_apply_mscale: m of rope_scaling sc (1 unless not default and key)."""
    m_all = sc.get(key) or 0.0
    if sc.get("rope_type", "default") == "default" or not m_all or sc["factor"] <= 1:
        return 1.0
    return 0.1 * m_all * math.log(sc["factor"]) + 1


def sketch(bug=None):
    def mla(x, mask=None, *, num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, eps=1e-6,
            rope_base=10000.0, rope_convention="interleaved", yarn_factor=1.0, mscale_all_dim=0.0,
            offset=0, rope_scaling=None, params):
        h, dn, dr, dv, p = num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, params
        sc = rope_scaling
        b, t, _ = x.shape
        conv = "half" if bug == "half-layout" else rope_convention

        def rms(z, g):
            return z / np.sqrt((z * z).mean(-1, keepdims=True) + eps) * g

        def heads(z, w):  # (B, T, H*w) -> (B, H, T, w)
            return z.reshape(b, t, h, w).transpose(0, 2, 1, 3)

        def rope(z):
            if sc is None or bug == "yarn-plain-rope":
                return positional.rope(z, offset=offset, base=rope_base, convention=conv)
            y = positional.rope(z, offset=offset, base=rope_base, convention=conv, scaling=sc)
            if bug == "yarn-rope-factor-dropped":
                one = positional.rope(np.ones_like(z[..., :1, :]) * 0 + np.eye(1, z.shape[-1]),
                                      offset=0, base=rope_base, convention=conv, scaling=sc)
                y = y / np.abs(one).max()  # cos(0) m = m: divided out
            if bug == "yarn-mscale-on-qk":
                y = y * yarn_m(sc)
            return y

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
        if sc is not None:
            m = yarn_m(sc, "mscale" if bug == "yarn-mscale-from-mscale" else "mscale_all_dim")
            m = 1.0 if bug == "yarn-no-mscale" else m
        once = bug in ("mscale-not-squared", "yarn-mscale-once")
        scale = (m if once else m * m) / math.sqrt(dn + dr)
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


# -- the latent cache and the absorbed form, judged by the properties ------------------------

def step_positions_not_offset(self, x, keep, cfg, offset, p, past=None):
    """A cached step rotates its new query and rope key at positions 0.. instead of n.."""
    return Mla.attend(self, x, keep, cfg, 0 if past is not None else offset, p, past)


def cache_rope_key_unrotated(self, x, keep, cfg, offset, p, past=None):
    """The cache keeps the rope key before RoPE, and each step rotates the whole cached key
    at the new rows' positions (old rows rotated at the wrong positions)."""
    y, (c_kv, k_rot) = Mla.attend(self, x, keep, cfg, offset, p, past)
    if past is not None and past[1].shape[2]:
        k_all = np.concatenate([past[1], self.latent(x, cfg, p)[1]], axis=2)
        k_rot = self.rope(k_all, cfg, offset)
        y = _attend_with(self, x, keep, cfg, offset, p, c_kv, k_rot)
        k_rot = k_all
    return y, (c_kv, k_rot)


def _attend_with(self, x, keep, cfg, offset, p, c_kv, k_rot):
    ops, h, dn, dv = self.ops, cfg["h"], cfg["dn"], cfg["dv"]
    q_nope, q_pe = self.queries(x, cfg, p)
    kv = ops.split_heads(self.project(c_kv, p, "w_kv_b", h * (dn + dv)), h)
    q = ops.concat([q_nope, self.rope(q_pe, cfg, offset)], axis=-1)
    k = ops.concat([kv[..., :dn], ops.concat([k_rot] * h, axis=1)], axis=-1)
    out, _ = self.k.sdpa(q, k, kv[..., dn:], keep, scale=cfg["scale"])
    return self.project(ops.merge_heads(out), p, "w_o", x.shape[-1])


STEP_BUGS = {"step-positions-not-offset": step_positions_not_offset,
             "cache-rope-key-unrotated": cache_rope_key_unrotated}


class _Data:
    def draw(self, _):
        return [2, 3]


def _ops(backend):
    from attnspec.conformance.ops import Ops
    from attnspec.spec.vectors import default_spec

    return Ops(backend, default_spec(), "cpu", "float64")


def _incremental(backend, seed):
    """The incremental property's body on a fixed example: H = 2, a query latent, T = 6 in
    chunks of 2, 1, 3, DeepSeek-V3's mscale."""
    session = types.SimpleNamespace(property_dtype="float64")
    props.test_mla_incremental_decoding_with_latent_cache_equals_full_forward.hypothesis.inner_test(
        backend=backend, device="cpu", attnspec_session=session, ops=_ops(backend), seed=seed,
        shape=(8, 2, 4, 2, 2, 4, 6), t=6, data=_Data())


@pytest.mark.parametrize("name", sorted(STEP_BUGS))
@pytest.mark.parametrize("seed", [0, 1])
def test_mla_step_bug_is_caught_by_the_incremental_property(name, seed):
    with pytest.raises(AssertionError):
        _incremental(composite_mutant(Mla, methods={"attend": STEP_BUGS[name]}), seed)


@pytest.mark.parametrize("seed", [0, 1])
def test_incremental_property_passes_the_correct_backend(seed):
    _incremental(composite_mutant(Mla), seed)


def _absorbed(backend, seed, convention="interleaved"):
    props.test_mla_absorbed_weights_equal_naive_form.hypothesis.inner_test(
        ops=_ops(backend), seed=seed, shape=(16, 4, 2, 4, 2, 8, 8), convention=convention,
        yarn=(40.0, 1.0), t=5, offset=2)


@pytest.mark.parametrize("name", ["half-layout", "mscale-not-squared", "kv-norm-skipped",
                                  "rope-key-per-head"])
def test_mla_bug_is_caught_by_the_absorbed_form_property(name):
    with pytest.raises(AssertionError):
        _absorbed(mutant(mla=sketch(name)), 0)


@pytest.mark.parametrize("convention", ["interleaved", "half"])
def test_absorbed_form_property_passes_the_correct_backend(convention):
    _absorbed(composite_mutant(Mla), 0, convention)


# -- rope_scaling, judged by the properties --------------------------------------------------

def step_drops_rope_scaling(self, x, cache, mask=None, *, rope_scaling=None, **kw):
    """mla_step ignoring rope_scaling: the cached steps rotate with plain RoPE and m = 1."""
    return Mla.mla_step(self, x, cache, mask, **kw)


def _incremental_yarn(backend, seed):
    props.test_mla_incremental_decoding_under_yarn_rope_scaling_equals_full_forward.hypothesis.inner_test(
        backend=backend, device="cpu", attnspec_session=types.SimpleNamespace(
            property_dtype="float64"), ops=_ops(backend), seed=seed,
        shape=(8, 2, 2, 4, 4, 6, None), yarn=(40.0, 1.0, 1.0, None), t=5, cut=2)


def test_mla_step_dropping_rope_scaling_is_caught_by_the_yarn_incremental_property():
    with pytest.raises(AssertionError):
        _incremental_yarn(composite_mutant(Mla, methods={"mla_step": step_drops_rope_scaling}), 0)


def test_yarn_incremental_property_passes_the_correct_backend():
    _incremental_yarn(composite_mutant(Mla), 0)


def _absorbed_yarn(backend, yarn):
    props.test_mla_absorbed_weights_equal_naive_form_under_yarn_rope_scaling.hypothesis.inner_test(
        ops=_ops(backend), seed=0, shape=(8, 2, 2, 4, 4, 6, None), convention="interleaved",
        yarn=yarn, t=5, offset=2)


@pytest.mark.parametrize("name", ["yarn-mscale-once", "yarn-mscale-on-qk", "yarn-plain-rope",
                                  "yarn-no-mscale", "yarn-rope-factor-dropped"])
def test_mla_yarn_bug_is_caught_by_the_absorbed_yarn_property(name):
    yarn = (40.0, 1.0, None, None) if name == "yarn-rope-factor-dropped" else (40.0, 1.0, 1.0, None)
    with pytest.raises(AssertionError):
        _absorbed_yarn(mutant(mla=sketch(name)), yarn)


@pytest.mark.parametrize("yarn", [(40.0, 1.0, 1.0, None), (4.0, None, 1.0, 0.75)])
def test_absorbed_yarn_property_passes_the_correct_backend(yarn):
    _absorbed_yarn(composite_mutant(Mla), yarn)
