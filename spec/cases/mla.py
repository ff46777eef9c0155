"""mla: multi-head latent attention (DeepSeek-V2/V3), the naive form: latent query (optional)
and key/value projections with their RMSNorms, one RoPE key shared by the heads, query/key
width Dn + Dr different from the value width Dv, YaRN's mscale squared on the softmax scale."""

import numpy as np

from ..oracle.mla import mla as oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .encoder_layer import tiny, tolerances

REQUIRED = ["num_heads", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"]
ATTRS = {"eps": 1e-6, "rope_base": 10000.0, "rope_convention": "interleaved", "yarn_factor": 1.0,
         "mscale_all_dim": 0.0, "offset": 0}

COMPONENT = Component("mla", {
    "mla": Fn(module="layers", inputs=["x", "mask"], optional=["mask"], returns=["y"],
              required=REQUIRED, attributes=dict(ATTRS), added={"rope_scaling": None},
              params=True, oracle=oracle),
}, tolerances=tolerances("layer"))


def mla_params(rng, d, h, dn, dr, dv, r, r_q=None, scale=0.5):
    """w_q (D, H (Dn+Dr)) or w_q_a (D, R_q), q_norm.gamma (R_q,), w_q_b (R_q, H (Dn+Dr));
    w_kv_a (D, R + Dr), kv_norm.gamma (R,), w_kv_b (R, H (Dn+Dv)), w_o (H Dv, D); norm gains
    in [0.5, 1.5] (not all 1, so a missing gamma shows)."""
    p = {}
    if r_q is None:
        p["w_q"] = rng.weights((d, h * (dn + dr)), scale)
    else:
        p.update({"w_q_a": rng.weights((d, r_q), scale), "q_norm.gamma": 1 + rng.weights((r_q,), 0.5),
                  "w_q_b": rng.weights((r_q, h * (dn + dr)), scale)})
    p.update({"w_kv_a": rng.weights((d, r + dr), scale), "kv_norm.gamma": 1 + rng.weights((r,), 0.5),
              "w_kv_b": rng.weights((r, h * (dn + dv)), scale), "w_o": rng.weights((h * dv, d), scale)})
    return p


def dims(h, dn, dr, dv):
    return {"num_heads": h, "qk_nope_head_dim": dn, "qk_rope_head_dim": dr, "v_head_dim": dv}


def cases(rng):
    yield from value_cases(Rng(f"{COMPONENT.id}/value"))
    yield from error_cases(Rng(f"{COMPONENT.id}/error"))
    yield from defaults_cases(Rng(f"{COMPONENT.id}/defaults"))
    yield from yarn_cases(Rng(f"{COMPONENT.id}/yarn"))


def value_cases(r):
    a = dims(2, 4, 4, 6)
    yield value("mla/basic-001", "mla",
                "No query latent (w_q), H = 2, Dn = 4, Dr = 4 (query/key width 8), Dv = 6, "
                "latent R = 6, D = 8, B = 2, T = 5, causal: the shared rope key rotated "
                "interleaved (pairs (2i, 2i+1)), scale 8^-1/2.",
                inputs={"x": r.uniform((2, 5, 8))}, attributes=a,
                params=mla_params(r, 8, 2, 4, 4, 6, 6), flags=["basic", "causal", "k-ne-v", "interleaved"])
    a = dims(2, 2, 4, 4)
    yield value("mla/q-lora-001", "mla",
                "A query latent (DeepSeek-V2/V3's q_lora_rank): w_q_a (16, 6), q_norm, w_q_b; "
                "H = 2, Dn = 2, Dr = 4, Dv = 4, R = 8, D = 16, T = 4.",
                inputs={"x": r.uniform((2, 4, 16))}, attributes=a,
                params=mla_params(r, 16, 2, 2, 4, 4, 8, r_q=6), flags=["projection-order", "gamma-beta"])
    a = dims(2, 4, 4, 4)
    yield value("mla/mscale-001", "mla",
                "YaRN's mscale as DeepSeek-V3 configures it (factor 40, mscale_all_dim 1): "
                "m = 0.1 ln 40 + 1 = 1.369, scale = m^2 / sqrt(8) = 0.663 (m once: 0.484).",
                inputs={"x": r.uniform((2, 5, 8))},
                attributes={**a, "yarn_factor": 40.0, "mscale_all_dim": 1.0},
                params=mla_params(r, 8, 2, 4, 4, 4, 6, r_q=6), flags=["scale"])
    yield value("mla/offset-001", "mla",
                "offset = 5 (positions 5..8), rope_base = 100, T = 4, H = 2, Dn = 2, Dr = 4: "
                "the scores depend on i - j only, so y equals offset 0's when q and k are "
                "rotated alike; one of them rotated at 0.. fails.",
                inputs={"x": r.uniform((2, 4, 8))},
                attributes={**dims(2, 2, 4, 4), "offset": 5, "rope_base": 100.0},
                params=mla_params(r, 8, 2, 2, 4, 4, 6), flags=["offset", "base"])
    yield value("mla/half-001", "mla",
                "rope_convention = 'half' (transformers' rope_interleave = False: rotate_half "
                "pairs (i, i + Dr/2)), Dr = 8, T = 6, rope_base = 10, eps = 0.25.",
                inputs={"x": r.uniform((1, 6, 8))},
                attributes={**dims(2, 2, 8, 4), "rope_convention": "half", "rope_base": 10.0,
                            "eps": 0.25},
                params=mla_params(r, 8, 2, 2, 8, 4, 6), flags=["half", "base", "eps"])
    mask = np.ones((2, 1, 1, 5), dtype=bool)
    mask[0, 0, 0, 2] = False
    mask[1, 0, 0, 0] = False
    yield value("mla/padding-001", "mla",
                "A padding mask (2, 1, 1, 5) ANDed with the causal mask: row 0 hides key 2, "
                "row 1 key 0, so row 1's query 0 sees no key (zero output, no NaN).",
                inputs={"x": r.uniform((2, 5, 8)), "mask": mask}, attributes=dims(2, 4, 4, 2),
                params=mla_params(r, 8, 2, 4, 4, 2, 6, r_q=4),
                flags=["padding", "interior-padding", "fully-masked"])
    yield value("mla/heads-001", "mla",
                "H = 4 heads (Dn = 2, Dr = 2, Dv = 2) over one latent R = 4 and one shared "
                "rope key, D = 8, T = 4: a rope key per head (or the rope applied to the whole "
                "key) fails.",
                inputs={"x": r.uniform((2, 4, 8))}, attributes=dims(4, 2, 2, 2),
                params=mla_params(r, 8, 4, 2, 2, 2, 4), flags=["heads", "mqa"])
    yield value("mla/single-001", "mla",
                "T = 1: position 0 (RoPE the identity), the query sees itself only: y = v W_o "
                "for the one row.",
                inputs={"x": r.uniform((2, 1, 8))}, attributes=dims(2, 2, 2, 4),
                params=mla_params(r, 8, 2, 2, 2, 4, 4), flags=["single-query", "single-key"])


def error_cases(r):
    a = dims(2, 2, 4, 4)
    p = mla_params(r, 8, 2, 2, 4, 4, 6)
    x = r.uniform((1, 3, 8))
    yield error("mla/odd-rope-001", "mla",
                "qk_rope_head_dim = 3: RoPE needs an even width.",
                inputs={"x": x}, attributes={**dims(2, 3, 3, 4)}, params=p,
                error="ShapeError", mentions=["qk_rope_head_dim", "3"])
    yield error("mla/bad-param-001", "mla",
                "w_kv_b has shape (6, 10) where H = 2 heads of Dn + Dv = 6 need (6, 12).",
                inputs={"x": x}, attributes=a, params={**p, "w_kv_b": r.weights((6, 10))},
                error="ParameterError", mentions=["w_kv_b", "(6, 10)"])
    yield error("mla/offset-negative-001", "mla",
                "offset = -1.",
                inputs={"x": x}, attributes={**a, "offset": -1}, params=p,
                error="ConfigError", mentions=["offset", "-1"])
    yield error("mla/convention-001", "mla",
                "rope_convention = 'neox' (the spec's names are 'interleaved' and 'half').",
                inputs={"x": x}, attributes={**a, "rope_convention": "neox"}, params=p,
                error="ConfigError", mentions=["rope_convention", "neox"])
    yield error("mla/kv-norm-missing-001", "mla",
                "kv_norm.gamma is missing.",
                inputs={"x": x}, attributes=a,
                params={k: v for k, v in p.items() if k != "kv_norm.gamma"},
                error="ParameterError", mentions=["kv_norm.gamma"])
    yield error("mla/bad-x-001", "mla",
                "x of rank 2 (T, D).",
                inputs={"x": r.uniform((3, 8))}, attributes=a, params=p,
                error="ShapeError", mentions=["x", "(3, 8)"])


def defaults_cases(r):
    yield value("mla/defaults-001", "mla",
                "eps, rope_base, rope_convention, yarn_factor, mscale_all_dim and offset left "
                "out: a tiny x (the latents' mean square ~1e-6), so the RMSNorms' eps 1e-5 "
                "fails; H = 2, Dn = 4, Dr = 4, Dv = 4, a query latent.",
                inputs={"x": tiny(r, (2, 4, 8))}, attributes=dims(2, 4, 4, 4),
                params=mla_params(r, 8, 2, 4, 4, 4, 6, r_q=6),
                flags=["defaults", "default-eps"], omit_defaults=True)
    yield value("mla/defaults-002", "mla",
                "The same attributes left out on x in [-2, 2], T = 8, Dr = 8: positions up to "
                "7 where 'half' pairs or base 500000 give other scores. (A wrong offset is "
                "invisible: the scores depend on i - j only; yarn_factor and mscale_all_dim "
                "change the scale only together.)",
                inputs={"x": r.uniform((2, 8, 8))}, attributes=dims(2, 2, 8, 4),
                params=mla_params(r, 8, 2, 2, 8, 4, 6, scale=1.0), flags=["defaults"],
                omit_defaults=True)


# -- gradients: mla/grad-*, their own stream (Rng("mla/grad")) --------------------------------

def grad_cases(r):
    yield gradient("mla/grad-001", "mla",
                   "No query latent, H = 2, Dn = 2, Dr = 4, Dv = 4, R = 4, D = 8, T = 4: dx and "
                   "every parameter; the shared rope key's gradient is the sum over the heads.",
                   inputs={"x": r.uniform((2, 4, 8))}, attributes=dims(2, 2, 4, 4),
                   params=mla_params(r, 8, 2, 2, 4, 4, 4), cotangents={"y": r.uniform((2, 4, 8))},
                   flags=["gradient", "basic", "k-ne-v"])
    yield gradient("mla/grad-002", "mla",
                   "A query latent (R_q = 4) with mscale (factor 40, mscale_all_dim 1), offset 3, "
                   "H = 2, Dn = 2, Dr = 2, Dv = 2: q_norm.gamma and w_q_a get gradients.",
                   inputs={"x": r.uniform((1, 4, 8))},
                   attributes={**dims(2, 2, 2, 2), "yarn_factor": 40.0, "mscale_all_dim": 1.0,
                               "offset": 3},
                   params=mla_params(r, 8, 2, 2, 2, 2, 4, r_q=4),
                   cotangents={"y": r.uniform((1, 4, 8))}, flags=["gradient", "scale", "offset"])
    mask = np.ones((2, 1, 1, 4), dtype=bool)
    mask[1, 0, 0, 0] = False
    yield gradient("mla/grad-003", "mla",
                   "rope_convention 'half', a padding mask hiding row 1's key 0 (its query 0 sees "
                   "no key: zero output, no gradient through it), H = 2, Dn = 2, Dr = 4, Dv = 2.",
                   inputs={"x": r.uniform((2, 4, 8)), "mask": mask},
                   attributes={**dims(2, 2, 4, 2), "rope_convention": "half"},
                   params=mla_params(r, 8, 2, 2, 4, 2, 4),
                   cotangents={"y": r.uniform((2, 4, 8))},
                   flags=["gradient", "half", "padding", "fully-masked"])
    yield gradient("mla/grad-004", "mla",
                   "eps, rope_base, rope_convention, yarn_factor, mscale_all_dim and offset left "
                   "out, a query latent, H = 2, Dn = 2, Dr = 4, Dv = 2, T = 5.",
                   inputs={"x": r.uniform((2, 5, 8))}, attributes=dims(2, 2, 4, 2),
                   params=mla_params(r, 8, 2, 2, 4, 2, 4, r_q=4),
                   cotangents={"y": r.uniform((2, 5, 8))},
                   flags=["gradient", "defaults"], omit_defaults=True)
    yield from yarn_grad_cases(Rng(f"{COMPONENT.id}/grad-yarn"))


# -- rope_scaling (YaRN as DeepSeek-V2/V3 configure it): mla/yarn-*, their own stream -----------

# DeepSeek-V3's rope_parameters (factor 40, mscale = mscale_all_dim = 1, beta 32 / 1) with
# original_max_position_embeddings 64 and rope_base 10 so that, at Dr = 8 and positions < 10,
# the ramp keeps pair 0 and blends pairs 1-3 (inverse frequencies 1, 0.453, 0.193, 0.074
# where plain RoPE has 1, 0.562, 0.316, 0.178), each visibly
V3_YARN = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 64,
           "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}


def yarn_cases(r):
    yield value("mla/yarn-001", "mla",
                "rope_scaling = DeepSeek-V3's YaRN (factor 40, mscale = mscale_all_dim = 1, "
                "L0 = 64), rope_base 10, Dr = 8: the rope frequencies of pairs 1-3 blended by "
                "YaRN's ramp (0.453, 0.193, 0.074 for 0.562, 0.316, 0.178), cos/sin times 1 "
                "(mscale / mscale_all_dim), the softmax scale "
                "m^2 / sqrt(12), m = 0.1 ln 40 + 1 (m once, m on q and k, or plain RoPE fail).",
                inputs={"x": r.uniform((2, 6, 8))},
                attributes={**dims(2, 4, 8, 4), "rope_base": 10.0, "rope_scaling": dict(V3_YARN)},
                params=mla_params(r, 8, 2, 4, 8, 4, 6, r_q=6),
                flags=["rope-scaling", "scale", "interleaved", "base"])
    sc = {**V3_YARN, "mscale": 0.707, "mscale_all_dim": 0.707, "factor": 16.0}
    yield value("mla/yarn-002", "mla",
                "DeepSeek-V2's mscale = mscale_all_dim = 0.707, factor 16: cos/sin times 1, "
                "m = 0.0707 ln 16 + 1; no query latent (V2-Lite's q_lora_rank None), H = 2, "
                "Dn = 2, Dr = 8, Dv = 4, rope_base 10, T = 7.",
                inputs={"x": r.uniform((2, 7, 8))},
                attributes={**dims(2, 2, 8, 4), "rope_base": 10.0, "rope_scaling": sc},
                params=mla_params(r, 8, 2, 2, 8, 4, 6), flags=["rope-scaling", "scale"])
    sc = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 64,
          "mscale": 1.0}
    yield value("mla/yarn-attention-factor-001", "mla",
                "mscale 1 without mscale_all_dim: transformers' YaRN attention factor "
                "0.1 ln 40 + 1 = 1.369 multiplies cos and sin (q_pe and the rope key), the "
                "softmax scale stays 1 / sqrt(Dn + Dr) (m = 1: mscale_all_dim is 0), rope_base "
                "10, H = 2, Dn = 2, Dr = 8.",
                inputs={"x": r.uniform((2, 6, 8))},
                attributes={**dims(2, 2, 8, 4), "rope_base": 10.0, "rope_scaling": sc},
                params=mla_params(r, 8, 2, 2, 8, 4, 6), flags=["rope-scaling", "attention-factor"])
    sc = {**V3_YARN, "attention_factor": 0.75}
    yield value("mla/yarn-attention-factor-002", "mla",
                "attention_factor 0.75 given (cos and sin times 0.75) and mscale_all_dim 1 (the "
                "softmax scale times (0.1 ln 40 + 1)^2): the two factors are independent; "
                "offset 3, query latent R_q = 4.",
                inputs={"x": r.uniform((1, 6, 8))},
                attributes={**dims(2, 4, 8, 4), "rope_base": 10.0, "offset": 3,
                            "rope_scaling": sc},
                params=mla_params(r, 8, 2, 4, 8, 4, 6, r_q=4),
                flags=["rope-scaling", "attention-factor", "offset"])
    mask = np.ones((2, 1, 1, 6), dtype=bool)
    mask[0, 0, 0, 1] = False
    yield value("mla/yarn-half-001", "mla",
                "YaRN (DeepSeek-V3's) with rope_convention 'half' (rope_interleave False), "
                "offset 4 (positions 4..9), a padding mask hiding row 0's key 1.",
                inputs={"x": r.uniform((2, 6, 8)), "mask": mask},
                attributes={**dims(2, 2, 8, 2), "rope_base": 10.0, "rope_convention": "half",
                            "offset": 4, "rope_scaling": dict(V3_YARN)},
                params=mla_params(r, 8, 2, 2, 8, 2, 6),
                flags=["rope-scaling", "half", "offset", "padding"])
    sc = {**V3_YARN, "truncate": False, "beta_fast": 8.0, "beta_slow": 2.0}
    yield value("mla/yarn-truncate-001", "mla",
                "YaRN with beta_fast 8, beta_slow 2 and truncate False (the ramp's ends not "
                "rounded), mscale_all_dim 1, Dr = 8, rope_base 10.",
                inputs={"x": r.uniform((2, 6, 8))},
                attributes={**dims(2, 4, 8, 4), "rope_base": 10.0, "rope_scaling": sc},
                params=mla_params(r, 8, 2, 4, 8, 4, 6), flags=["rope-scaling"])
    yield value("mla/rope-linear-001", "mla",
                "rope_scaling linear, factor 4 (every frequency / 4, no mscale: transformers' "
                "yarn_apply_mscale reads mscale_all_dim, absent), rope_base 10, Dr = 4.",
                inputs={"x": r.uniform((2, 6, 8))},
                attributes={**dims(2, 4, 4, 4), "rope_base": 10.0,
                            "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
                params=mla_params(r, 8, 2, 4, 4, 4, 6), flags=["rope-scaling"])
    a = dims(2, 2, 4, 4)
    p = mla_params(r, 8, 2, 2, 4, 4, 6)
    x = r.uniform((1, 3, 8))
    yield error("mla/yarn-both-001", "mla",
                "rope_scaling (YaRN) and yarn_factor = 40 both given: with rope_scaling the "
                "mscale is rope_scaling's.",
                inputs={"x": x}, attributes={**a, "yarn_factor": 40.0, "mscale_all_dim": 1.0,
                                             "rope_scaling": dict(V3_YARN)},
                params=p, error="ConfigError", mentions=["yarn_factor", "rope_scaling"])
    yield error("mla/rope-scaling-key-001", "mla",
                "rope_scaling with an unknown key 'scale'.",
                inputs={"x": x}, attributes={**a, "rope_scaling": {"rope_type": "yarn",
                                                                   "factor": 4.0, "scale": 2.0}},
                params=p, error="ConfigError", mentions=["rope_scaling", "scale"])
    yield error("mla/rope-scaling-type-001", "mla",
                "rope_scaling = 40.0 (a number, not a dict of rope_parameters).",
                inputs={"x": x}, attributes={**a, "rope_scaling": 40.0},
                params=p, error="ConfigError", mentions=["rope_scaling", "40.0"])
    yield error("mla/rope-scaling-rule-001", "mla",
                "rope_scaling rope_type 'ntk' (not a rule the spec states).",
                inputs={"x": x}, attributes={**a, "rope_scaling": {"rope_type": "ntk",
                                                                   "factor": 4.0}},
                params=p, error="ConfigError", mentions=["rope_type", "ntk"])


def yarn_grad_cases(r):
    yield gradient("mla/grad-005", "mla",
                   "DeepSeek-V3's YaRN (factor 40, mscale = mscale_all_dim = 1), rope_base 10, "
                   "H = 2, Dn = 2, Dr = 8, Dv = 2, no query latent: dx and every parameter "
                   "through the scaled frequencies and m^2.",
                   inputs={"x": r.uniform((2, 5, 8))},
                   attributes={**dims(2, 2, 8, 2), "rope_base": 10.0,
                               "rope_scaling": dict(V3_YARN)},
                   params=mla_params(r, 8, 2, 2, 8, 2, 4), cotangents={"y": r.uniform((2, 5, 8))},
                   flags=["gradient", "rope-scaling", "scale"])
    yield gradient("mla/grad-006", "mla",
                   "attention_factor 0.75 on cos/sin and mscale_all_dim 1 on the scale, a query "
                   "latent (R_q = 4), offset 3: the rope VJP carries the 0.75.",
                   inputs={"x": r.uniform((1, 5, 8))},
                   attributes={**dims(2, 2, 8, 2), "rope_base": 10.0, "offset": 3,
                               "rope_scaling": {**V3_YARN, "attention_factor": 0.75}},
                   params=mla_params(r, 8, 2, 2, 8, 2, 4, r_q=4),
                   cotangents={"y": r.uniform((1, 5, 8))},
                   flags=["gradient", "rope-scaling", "attention-factor", "offset"])
    mask = np.ones((2, 1, 1, 5), dtype=bool)
    mask[1, 0, 0, 2] = False
    yield gradient("mla/grad-007", "mla",
                   "YaRN with rope_convention 'half' and a padding mask, mscale 1 without "
                   "mscale_all_dim (cos/sin times 1.369, the scale unchanged).",
                   inputs={"x": r.uniform((2, 5, 8)), "mask": mask},
                   attributes={**dims(2, 2, 8, 2), "rope_base": 10.0, "rope_convention": "half",
                               "rope_scaling": {"rope_type": "yarn", "factor": 40.0,
                                                "original_max_position_embeddings": 64,
                                                "mscale": 1.0}},
                   params=mla_params(r, 8, 2, 2, 8, 2, 4), cotangents={"y": r.uniform((2, 5, 8))},
                   flags=["gradient", "rope-scaling", "half", "padding"])
    yield gradient("mla/grad-008", "mla",
                   "rope_scaling linear factor 4, rope_base 10, H = 2, Dn = 2, Dr = 4, Dv = 4.",
                   inputs={"x": r.uniform((2, 5, 8))},
                   attributes={**dims(2, 2, 4, 4), "rope_base": 10.0,
                               "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
                   params=mla_params(r, 8, 2, 2, 4, 4, 4), cotangents={"y": r.uniform((2, 5, 8))},
                   flags=["gradient", "rope-scaling"])
