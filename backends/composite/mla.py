"""Multi-head latent attention (DeepSeek-V2/V3), written once for every backend: the latent
query (optional) and key/value projections with their RMSNorms, the decoupled RoPE key
shared by the heads, the softmax scale with YaRN's mscale squared (spec/components/mla.md);
its latent cache (``mla_init_cache`` / ``mla_step``, module ``decoding``):
    "length":  n, the number of rows already processed (int)
    "keep":    (B, n) bool, False where a row is padding (masked as a key)
    "c_kv":    (B, n, R) the normed latent of each row
    "k_rope":  (B, 1, n, Dr) its shared rope key, already rotated at its own position
``mla_step`` never modifies the cache it is given; it returns a new one."""

from __future__ import annotations

from attnspec.spec.errors import ParameterError, ShapeError

from .. import _checks as check
from . import Composite
from .layers import Layers

CONVENTIONS = ("interleaved", "half")


class Mla(Composite):
    EXPORTS = ("mla", "mla_init_cache", "mla_step")

    def mla(self, x, mask=None, *, num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
            eps=1e-6, rope_base=10000.0, rope_convention="interleaved", yarn_factor=1.0,
            mscale_all_dim=0.0, offset=0, rope_scaling=None, params):
        """y = concat_h softmax(s [q_nope_h | RoPE(q_pe_h)] [k_nope_h | RoPE(k_pe)]^T) v_h W_o,
        causal (ANDed with mask), s = m^2 / sqrt(Dn + Dr). rope_scaling (transformers'
        rope_parameters less rope_theta, as llama_layer takes it) goes to both RoPEs, and
        then m comes from it (its factor and mscale_all_dim, as transformers'
        yarn_apply_mscale), not from yarn_factor / mscale_all_dim."""
        x = self.ops.floating("x", x)
        b, t, _ = check.rank("x", x, min_rank=3, max_rank=3)
        cfg = self.config(num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, eps,
                          rope_base, rope_convention, yarn_factor, mscale_all_dim, rope_scaling)
        offset = check.integer("offset", offset, lo=0)
        keep = Layers.llama_keep(self, mask, b, t, t, None, x)  # (B?, 1, T, T)
        p = check.params_of(params)
        y, _ = self.attend(x, keep, cfg, offset, p)
        return y

    # -- the latent cache ---------------------------------------------------------------

    def mla_init_cache(self, *, batch_size, params):
        """An empty cache (length 0) for ``batch_size`` rows, in the dtype of w_kv_a; R is
        kv_norm.gamma's length, Dr = w_kv_a.shape[1] - R."""
        ops = self.ops
        b = check.integer("batch_size", batch_size, lo=1)
        p = check.params_of(params)
        r = check.shape(p.require("kv_norm.gamma", (None,)))[0]
        w = ops.floating(p.path("w_kv_a"), p.require("w_kv_a", (None, None)))
        dr = check.shape(w)[1] - r
        if dr < 2:
            raise ParameterError(f"{p.path('w_kv_a')!r} of shape {check.shape(w)} leaves "
                                 f"{dr} rope features after R={r} latent ones (need >= 2)")
        return {"length": 0, "keep": ops.falses((b, 0), like=w), "c_kv": ops.zeros((b, 0, r), like=w),
                "k_rope": ops.zeros((b, 1, 0, dr), like=w)}

    def mla_step(self, x, cache, mask=None, *, num_heads, qk_nope_head_dim, qk_rope_head_dim,
                 v_head_dim, eps=1e-6, rope_base=10000.0, rope_convention="interleaved",
                 yarn_factor=1.0, mscale_all_dim=0.0, rope_scaling=None, params):
        """(y (B, t, D), new cache) for the t new rows x (B, t, D) at positions n..n+t-1,
        n = cache["length"]; mask (B, t) bool marks the real rows (None: all): equal to
        mla(all rows so far, mask=keep[:, None, None, :])[:, n:]. With rope_scaling the new
        rows' frequencies are those of seq_len = n + t (llama_step's rule): equal to the
        forward for every rule whose frequencies do not depend on seq_len (yarn among them)."""
        ops = self.ops
        x = self.ops.floating("x", x)
        b, t, _ = check.rank("x", x, min_rank=3, max_rank=3)
        cfg = self.config(num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, eps,
                          rope_base, rope_convention, yarn_factor, mscale_all_dim, rope_scaling)
        n = int(cache["length"])
        check.same("batch size", **{"x.shape[0]": b, "cache['keep'].shape[0]": cache["keep"].shape[0]})
        new = ops.full((b, t), 1, like=x) == 1 if mask is None else mask  # (B, t)
        check.broadcastable("mask", new, (b, t))
        keep = ops.concat([cache["keep"], new], axis=1)  # (B, n + t)
        attn_mask = Layers.llama_keep(self, keep[:, None, None, :], b, t, n + t, None, keep)
        y, (c_kv, k_rot) = self.attend(x, attn_mask, cfg, n, check.params_of(params),
                                       past=(cache["c_kv"], cache["k_rope"]))
        return y, {"length": n + t, "keep": keep, "c_kv": c_kv, "k_rope": k_rot}

    # -- the attributes --------------------------------------------------------------------

    @staticmethod
    def config(num_heads, dn, dr, dv, eps, rope_base, rope_convention, yarn_factor,
               mscale_all_dim, rope_scaling=None) -> dict:
        """The checked attributes, with the softmax scale s = m^2 / sqrt(Dn + Dr); with
        rope_scaling, rope's scaling (Layers.llama_rope's checks) and m from it."""
        heads = check.integer("num_heads", num_heads, lo=1)
        dn = check.integer("qk_nope_head_dim", dn, lo=1)
        dr = check.integer("qk_rope_head_dim", dr, lo=2)
        if dr % 2:
            raise ShapeError(f"RoPE needs an even width: qk_rope_head_dim={dr}")
        dv = check.integer("v_head_dim", dv, lo=1)
        rot = {"base": rope_base,
               "convention": check.choice("rope_convention", rope_convention, CONVENTIONS)}
        if rope_scaling is not None:
            rot.update(Layers.llama_rope(rope_scaling, None))
            yarn_factor, mscale_all_dim = check.mla_mscale_of(rope_scaling, yarn_factor,
                                                              mscale_all_dim)
        return {"h": heads, "dn": dn, "dr": dr, "dv": dv, "eps": check.eps(eps), "rot": rot,
                "scale": check.mla_scale(dn, dr, yarn_factor, mscale_all_dim)}

    # -- the projections ----------------------------------------------------------------

    def project(self, h, p, name: str, d_out=None):
        """h W over the last axis, W = p[name] of shape (h's width, d_out); no bias."""
        w = self.ops.floating(p.path(name), p.require(name, (h.shape[-1], d_out)), like=h)
        return self.ops.matmul(h, w)

    def norm(self, z, p, name: str, eps):
        p.require(f"{name}.gamma", (z.shape[-1],))
        return self.k.rms_norm(z, eps=eps, params=p.scope(name))

    def queries(self, x, cfg, p):
        """(q_nope (B, H, T, Dn), q_pe (B, H, T, Dr)) from w_q or the query latent."""
        h, dn, dr = cfg["h"], cfg["dn"], cfg["dr"]
        if "w_q_a" in p:
            if "w_q" in p:
                raise ParameterError(f"both {p.path('w_q')!r} and {p.path('w_q_a')!r} given: "
                                     f"the query is w_q or the latent w_q_a, q_norm, w_q_b")
            c_q = self.norm(self.project(x, p, "w_q_a"), p, "q_norm", cfg["eps"])  # (B, T, R_q)
            q = self.project(c_q, p, "w_q_b", h * (dn + dr))
        else:
            q = self.project(x, p, "w_q", h * (dn + dr))  # (B, T, H (Dn + Dr))
        q = self.ops.split_heads(q, h)  # (B, H, T, Dn + Dr)
        return q[..., :dn], q[..., dn:]

    def latent(self, x, cfg, p):
        """(c_kv (B, T, R) normed, k_pe (B, 1, T, Dr) not rotated) from w_kv_a."""
        dr = cfg["dr"]
        r = check.shape(p.require("kv_norm.gamma", (None,)))[0]
        a = self.project(x, p, "w_kv_a", r + dr)  # (B, T, R + Dr)
        c_kv = self.norm(a[..., :r], p, "kv_norm", cfg["eps"])
        return c_kv, self.ops.split_heads(a[..., r:], 1)

    def rope(self, z, cfg, offset: int):
        return self.k.rope(z, offset=offset, **cfg["rot"])

    def attend(self, x, keep, cfg, offset: int, p, past=None):
        """y (B, t, D) for the rows x at positions offset.., over the cached latent rows
        past = (c_kv (B, n, R), k_rot (B, 1, n, Dr)) and the new ones; returns (y, (c_kv,
        k_rot)) of all n + t rows."""
        ops, h, dn, dv = self.ops, cfg["h"], cfg["dn"], cfg["dv"]
        q_nope, q_pe = self.queries(x, cfg, p)
        c_kv, k_pe = self.latent(x, cfg, p)
        k_rot = self.rope(k_pe, cfg, offset)  # (B, 1, t, Dr)
        if past is not None:
            c_kv = ops.concat([past[0], c_kv], axis=1)  # (B, n + t, R)
            k_rot = ops.concat([past[1], k_rot], axis=2)  # (B, 1, n + t, Dr)
        kv = ops.split_heads(self.project(c_kv, p, "w_kv_b", h * (dn + dv)), h)  # (B, H, S, Dn+Dv)
        k_nope, v = kv[..., :dn], kv[..., dn:]
        q = ops.concat([q_nope, self.rope(q_pe, cfg, offset)], axis=-1)  # (B, H, t, Dn + Dr)
        k = ops.concat([k_nope, ops.concat([k_rot] * h, axis=1)], axis=-1)  # (B, H, S, Dn + Dr)
        out, _ = self.k.sdpa(q, k, v, keep, scale=cfg["scale"])  # (B, H, t, Dv)
        y = self.project(ops.merge_heads(out), p, "w_o", x.shape[-1])  # (B, t, D)
        return y, (c_kv, k_rot)
