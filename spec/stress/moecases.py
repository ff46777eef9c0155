"""Stress cases of the router and the MoE layer (issue 26): many experts and tokens, logits
of large magnitude, sigmoid saturation, exact ties at large values, a correction bias that
moves the choice, renormalisation where eps matters; experts with no token, one expert with
every token, top_k = E, SwiGLU gates of large magnitude. Expected values:
spec/stress/fastmoe.py (the fast exact oracle's arithmetic); the mpmath check: sampled
tokens through the oracles (spec/stress/moecheck.py).
"""

from __future__ import annotations

from .cases import WIDE, _floats, case, u

DEEPSEEK_V3 = {"scoring": "sigmoid", "renormalize": True, "eps": 1e-20, "n_group": 8,
               "topk_group": 4, "routed_scaling_factor": 2.5}
NO_HALF = ["float64", "float32", "bfloat16"]


def _rows(start, stop, value=None, **draw):
    """A ``set`` edit of rows start..stop of a 2-D recipe: one value, or a uniform draw."""
    if value is not None:
        return {"index": [[start, stop], None], "value": value}
    return {"index": [[start, stop], None], "uniform": draw}


def _bias(e, plus, rest=-1.0):
    """A correction bias of E entries: +1 on the ``plus`` experts, ``rest`` elsewhere (sigmoid
    scores lie in (0, 1): a +1 expert always outranks a -1 one; the scores decide within a
    level)."""
    return {"op": "full", "shape": [e], "value": rest,
            "set": [{"index": [i], "value": 1.0} for i in plus]}


def router_cases():
    yield case("moe_router/stress-softmax-64-001", "moe_router",
               "2049 tokens over 64 experts (softmax over all 64, top 8, renormalised), logits "
               "in [-8, 8] on a 2^-4 grid: exact ties in every row (lowest id first), one token "
               "past a 2048-row tile; a softmax over the kept 8 only, a sort that is not "
               "stable, or a tile that drops the last token fails.",
               inputs={"logits": u((2049, 64), -8.0, 8.0, 2.0 ** -4)},
               attributes={"top_k": 8, "renormalize": True},
               flags=["long", "ties", "tile-boundary"])
    x = u((1025, 64), -8.0, 8.0, 2.0 ** -4, add=10240.0)
    x["set"] = [_rows(512, 1025, lo=-10248.0, hi=-10232.0, step=2.0 ** -4),
                _rows(0, 32, 10240.0),
                {"index": [[32, 64], [40, 64]], "value": 10250.0}]
    yield case("moe_router/stress-large-logits-001", "moe_router",
               "Softmax router logits near +10240 (tokens 0..511) and -10240 (512..1024), "
               "64 experts, top 6, not renormalised: exp without the row maximum overflows "
               "(inf / inf) or underflows (0 / 0); tokens 0..31 tie on all 64 experts at "
               "10240 (experts 0..5, each 1/64), tokens 32..63 on experts 40..63 at 10250 "
               "(experts 40..45, each 1/24: the lowest ids of a tie at a large value).",
               inputs={"logits": x}, attributes={"top_k": 6}, dtypes=WIDE,
               dtype_note="logits near 1e4 on a 2^-4 grid need 18 significant bits",
               flags=["large-logits", "overflow", "underflow", "stability", "ties"])
    x = u((1025, 16), 40.0, 100.0, 1.0)
    x["set"] = [_rows(256, 512, lo=-80.0, hi=-40.0, step=1.0),
                {"index": [[512, 1025], [0, 8]], "uniform": {"lo": -80.0, "hi": -40.0, "step": 1.0}}]
    yield case("moe_router/stress-sigmoid-saturation-001", "moe_router",
               "Sigmoid logits in [40, 100] and [-80, -40] (16 experts, top 4, renormalised, a "
               "correction bias of sixteen distinct multiples of 1/16 in [-1/2, 7/16]): every "
               "score above 37 is 1.0 in float64 and every score below -40 is under 5e-18, so "
               "the bias alone decides the choice (no two selection scores closer than 1/16), "
               "exp(z) overflows float32 past 88.7 (a sigmoid written exp(z) / (1 + exp(z)) "
               "gives NaN), and tokens 256..511 keep four scores near e^-40..e^-80 whose "
               "ratios are the weights (a sigmoid written 1 - sigmoid(-z) gives 0 / eps = 0).",
               inputs={"logits": x, "correction_bias": _floats([((5 * e + 3) % 16 - 8) / 16
                                                                for e in range(16)])},
               attributes={"top_k": 4, "scoring": "sigmoid", "renormalize": True},
               dtypes=NO_HALF, dtype_note="sigmoid(-40) = 4e-18 is 0 in float16",
               flags=["saturation", "overflow", "large-logits", "bias"])
    yield case("moe_router/stress-eps-001", "moe_router",
               "Sigmoid logits in [-48, -44] (scores near 1e-20 = eps), 8 experts, top 2, "
               "renormalised with eps 1e-20: w = p / (p_1 + p_2 + eps) is well below 1/2; a "
               "router that leaves eps out (weights summing to 1), adds it after the division "
               "or uses a larger one fails.",
               inputs={"logits": u((1025, 8), -48.0, -44.0, 0.25)},
               attributes={"top_k": 2, "scoring": "sigmoid", "renormalize": True},
               dtypes=NO_HALF, dtype_note="sigmoid(-44) = 8e-20 and eps = 1e-20 are 0 in float16",
               flags=["eps", "tiny", "underflow"])
    yield case("moe_router/stress-deepseek-v3-001", "moe_router",
               "DeepSeek-V3's router at size: 2049 tokens, 256 experts in 8 groups of 32, the "
               "best 4 groups (each scored by the sum of its top two of sigmoid + bias), top 8, "
               "renormalised (eps 1e-20), times 2.5; a correction bias of +1 on one expert "
               "per group and -1 on the other 248: it changes the choice but never the weights "
               "(a bias added to the weights is off by 2.5/8 per +-1), and half of each chosen "
               "set has a negative selection score, so dropped groups filled with 0 instead of "
               "-inf (transformers' DeepseekV3 masked_fill) outrank them.",
               inputs={"logits": u((2049, 256), -8.0, 8.0, 2.0 ** -4),
                       "correction_bias": _bias(256, range(5, 256, 32))},
               attributes={"top_k": 8, **DEEPSEEK_V3}, dtypes=WIDE,
               dtype_note="sigmoid scores of neighbouring logits near +-8 differ by 2e-5, below "
                          "float16's and bfloat16's spacing near 1: they tie there and the "
                          "choice moves",
               flags=["long", "bias", "tile-boundary"])
    yield case("moe_router/stress-grad-001", "moe_router",
               "dlogits of a softmax router over 64 experts, top 8, renormalised, 1025 tokens: "
               "every logit gets a gradient through the softmax, the kept weights' cotangent "
               "through the renormalisation (whose sum of p dp is exactly (g . p_I) eps / "
               "(S + eps)^2).",
               inputs={"logits": u((1025, 64), -8.0, 8.0, 2.0 ** -4)},
               attributes={"top_k": 8, "renormalize": True},
               cotangents={"weights": u((1025, 8))},
               flags=["gradient", "long", "ties", "tile-boundary"])
    yield case("moe_router/stress-grad-002", "moe_router",
               "dlogits of DeepSeek-V3's router (256 experts, 8 groups, best 4, top 8, sigmoid, "
               "renormalised, times 2.5, the correction bias of stress-deepseek-v3-001) at 513 "
               "tokens: d bias = 0, the gradient reaches the 8 kept logits only.",
               inputs={"logits": u((513, 256), -8.0, 8.0, 2.0 ** -4),
                       "correction_bias": _bias(256, range(5, 256, 32))},
               attributes={"top_k": 8, **DEEPSEEK_V3}, cotangents={"weights": u((513, 8))},
               dtypes=WIDE, dtype_note="the choice moves in float16 and bfloat16 "
                                       "(see stress-deepseek-v3-001)",
               flags=["gradient", "bias", "tile-boundary"])


def _w(rows, cols, fan_in, lead=()):
    a = int(128 * 3 / fan_in ** 0.5) / 128
    return u((*lead, rows, cols), -a, a, 2.0 ** -7)


def _x(n, d):
    """Tokens (N, D) in [-1, 1] on a 2^-5 grid, the last feature 1 (a constant the router and
    the gates read)."""
    r = u((n, d), -1.0, 1.0, 2.0 ** -5)
    r["set"] = [{"index": [None, d - 1], "value": 1.0}]
    return r


def _router_w(d, e, offsets, scale=8.0):
    """W_router (D, E): z_e = scale x_e + offsets[e] (the constant feature): the logits of
    distinct features differ by scale/32, so the choice is the same in every dtype (equal
    features tie exactly); the features span 2 scale = 16, so an offset of -20 leaves an
    expert without tokens and +20 gives it every token."""
    sets = [{"index": [i, i], "value": scale} for i in range(e)]
    sets += [{"index": [d - 1, i], "value": float(v)} for i, v in enumerate(offsets) if v]
    return {"op": "full", "shape": [d, e], "value": 0.0, "set": sets}


def _experts(e, d, f):
    return {"experts.w_gate": _w(d, f, d, (e,)), "experts.w_up": _w(d, f, d, (e,)),
            "experts.w_down": _w(f, d, f, (e,))}


def moe_cases():
    yield case("moe/stress-tokens-001", "moe",
               "2049 tokens, D = 32, 8 SwiGLU experts of F = 48, top 2, softmax renormalised "
               "(Mixtral): expert 3 receives every token (its logit is 20 above the rest, whose "
               "features span 16) and experts 5, 6 and 7 none (20 below): a grouped matmul or "
               "permutation that mishandles an empty group, a buffer of 2048 rows per expert "
               "(or any capacity factor), or a tile of 2048 tokens that drops the 2049th, fails.",
               inputs={"x": _x(2049, 32)},
               params={"router.w": _router_w(32, 8, [0, 0, 0, 20, 0, -20, -20, -20]),
                       **_experts(8, 32, 48)},
               attributes={"top_k": 2, "renormalize": True},
               flags=["long", "empty", "tile-boundary"])
    p = {"router.w": _w(32, 8, 16), **_experts(8, 32, 48)}
    p["experts.w_gate"]["set"] = [{"index": [None, 31, [0, 16]], "value": 96.0},
                                  {"index": [None, 31, [16, 32]], "value": -96.0}]
    yield case("moe/stress-top-all-001", "moe",
               "top_k = E = 8 over 513 tokens (every expert takes every token), sigmoid scores "
               "renormalised with eps, times 2.5 (D = 32, F = 48, a random router), and SwiGLU "
               "gates of large magnitude: a third of every expert's gate columns read the "
               "constant feature times 96 (h near +96), a third times -96. The weights sum to "
               "2.5 up to eps: a kernel that caps top_k or skips the renormalisation when every "
               "expert is chosen fails; silu(h) = h exp(h) / (1 + exp(h)) is inf / inf = NaN "
               "past h = 88.7 in float32 (11 in float16); silu(-96) is -3e-40.",
               inputs={"x": _x(513, 32)}, params=p,
               attributes={"top_k": 8, "scoring": "sigmoid", "renormalize": True,
                           "routed_scaling_factor": 2.5},
               flags=["top-all", "silu", "overflow", "saturation", "long"])
    yield case("moe/stress-grad-001", "moe",
               "Every gradient (x, the router, each expert's three weights) at 513 tokens, "
               "D = 32, 8 experts of F = 48, top 2, softmax renormalised, expert 7 receiving no "
               "token (its weight gradients are 0), cotangents on y and the router logits.",
               inputs={"x": _x(513, 32)},
               params={"router.w": _router_w(32, 8, [0, 0, 0, 0, 0, 0, 0, -20]),
                       **_experts(8, 32, 48)},
               attributes={"top_k": 2, "renormalize": True},
               cotangents={"y": u((513, 32)), "router_logits": u((513, 8), -1.0, 1.0, 2.0 ** -6)},
               flags=["gradient", "empty", "tile-boundary"])


# -- multi-head latent attention (expected values from the mpmath oracle itself: its exact
# matmuls make a 257-token MLA take seconds, and the fast oracle has no RoPE) -------------

def _x3(t, d):
    """x (1, T, D) in [-1, 1] on a 2^-5 grid, the last feature 1."""
    r = u((1, t, d), -1.0, 1.0, 2.0 ** -5)
    r["set"] = [{"index": [None, None, d - 1], "value": 1.0}]
    return r


def _mla_params(d, h, dn, dr, dv, r):
    """w_q (D, H (Dn+Dr)), w_kv_a (D, R + Dr), kv_norm.gamma (R,) in [0.5, 1.5], w_kv_b
    (R, H (Dn+Dv)), w_o (H Dv, D) (the recipes of spec/cases/mla.py's mla_params)."""
    return {"w_q": _w(d, h * (dn + dr), d), "w_kv_a": _w(d, r + dr, d),
            "kv_norm.gamma": u((r,), 0.5, 1.5, 2.0 ** -6), "w_kv_b": _w(r, h * (dn + dv), r),
            "w_o": _w(h * dv, d, h * dv)}


def _mla_dims(h, dn, dr, dv):
    return {"num_heads": h, "qk_nope_head_dim": dn, "qk_rope_head_dim": dr, "v_head_dim": dv}


def _mla_far_below(d, h, dn, dr, dv, r):
    """Column 0 of every head's query is 256 (the constant feature times 256 in w_q) and of
    its key -256 c_kv[0], where a[0] = 64 (the constant feature times 64 in w_kv_a; the other
    latent columns read the features times at most 2^-4, so c_kv[0] is about sqrt(R) times
    its gain 1.5): every causal score is about -256 * 256 * 1.5 sqrt(R) / sqrt(Dn + Dr)."""
    p = _mla_params(d, h, dn, dr, dv, r)
    p["w_q"]["set"] = [e for i in range(h) for e in (
        {"index": [None, i * (dn + dr)], "value": 0.0},
        {"index": [d - 1, i * (dn + dr)], "value": 256.0})]
    p["w_kv_a"] = u((d, r + dr), -2.0 ** -4, 2.0 ** -4, 2.0 ** -8)
    p["w_kv_a"]["set"] = [{"index": [None, 0], "value": 0.0}, {"index": [d - 1, 0], "value": 64.0}]
    p["kv_norm.gamma"]["set"] = [{"index": [0], "value": 1.5}]
    p["w_kv_b"]["set"] = [e for i in range(h) for e in (
        {"index": [None, i * (dn + dv)], "value": 0.0},
        {"index": [0, i * (dn + dv)], "value": -256.0})]
    return p


def mla_cases():
    yield case("mla/stress-tile-001", "mla",
               "T = 257 (one past a 256-row tile), causal, H = 2, Dn = 16, Dr = 16 (query/key "
               "width 32), Dv = 24, an odd latent width R = 31, D = 32, positions 1792..2048 "
               "(offset 1792), and every causal score near -96750 (column 0 of each head: query "
               "256 against key -256 c_kv[0], c_kv[0] about 1.5 sqrt(31)): the shared rope key "
               "broadcast to both heads across tile edges; a row maximum started at a finite "
               "sentinel (-1e4, -65504) underflows every weight (0 or NaN rows).",
               inputs={"x": _x3(257, 32)},
               attributes={**_mla_dims(2, 16, 16, 24), "offset": 1792},
               params=_mla_far_below(32, 2, 16, 16, 24, 31),
               dtypes=WIDE, dtype_note="scores near -1e5 pass float16's 65504 and lose every "
                                       "weight in bfloat16's 8 bits",
               flags=["tile-boundary", "causal", "k-ne-v", "odd-width", "offset", "long",
                      "finite-sentinel", "underflow", "large-logits"])
    yield case("mla/stress-grad-001", "mla",
               "Every gradient (x and the five weights) at T = 65 (one past a 64-row tile), "
               "causal, H = 2, Dn = 16, Dr = 8, Dv = 16, R = 15 (odd), D = 32, positions "
               "2000..2064 (offset 2000, crossing 2048): the shared rope key's gradient sums "
               "over the heads.",
               inputs={"x": _x3(65, 32)},
               attributes={**_mla_dims(2, 16, 8, 16), "offset": 2000},
               params=_mla_params(32, 2, 16, 8, 16, 15), cotangents={"y": u((1, 65, 32))},
               flags=["gradient", "tile-boundary", "causal", "odd-width", "offset"])


def every():
    yield from router_cases()
    yield from moe_cases()
    yield from mla_cases()
