"""Gradient vectors (VJPs) of the differentiable components, kept apart from the
components' value cases so that those files keep their bytes and merge cleanly.

Each component's gradient cases draw from their own stream ``Rng("<component>/grad")``;
``generate`` appends them after the component's other cases. A gradient vector is a
value vector (inputs, attributes, params) plus a cotangent per output it names, every
cotangent a multiple of 2**-6 in [-2, 2] (exact in float16 and bfloat16); the expected
gradients come from the oracle's VJP (oracle/grad.py).
"""

from __future__ import annotations

import numpy as np

from ._build import Rng, gradient


def _gb(rng, d):
    return {"gamma": 1.0 + rng.weights((d,), 0.5), "beta": rng.weights((d,), 1.0)}


def softmax_cases(r):
    yield gradient("softmax/grad-001", "softmax",
                   "dx = y * (dy - sum(dy * y)) for a (3, 5) input: leaving out the subtraction "
                   "term (dx = y * dy) or using the Jacobian's diagonal only fails.",
                   inputs={"x": r.uniform((3, 5))}, cotangents={"y": r.uniform((3, 5))},
                   flags=["gradient", "basic"])
    mask = r.bools((2, 2, 6))
    mask[..., 0] = True
    yield gradient("softmax/grad-002", "softmax",
                   "A masked (2, 2, 6) input: masked entries have weight 0 and gradient 0, and "
                   "the row sum in the backward pass runs over the kept entries only.",
                   inputs={"x": r.uniform((2, 2, 6)), "mask": mask},
                   cotangents={"y": r.uniform((2, 2, 6))}, flags=["gradient", "mask"])
    yield gradient("softmax/grad-003", "softmax",
                   "axis=0 on a (4, 3) input: the backward sum runs along the softmax axis, "
                   "not the last one.",
                   inputs={"x": r.uniform((4, 3))}, attributes={"axis": 0},
                   cotangents={"y": r.uniform((4, 3))}, flags=["gradient", "axis"])
    yield gradient("softmax/grad-004", "softmax",
                   "Logits in [-8, 8] (weights near one-hot, some below 1e-6): the gradient of a "
                   "saturated row is tiny and must not come out as NaN or a large value.",
                   inputs={"x": r.uniform((2, 7), -8, 8, 2.0**-4)},
                   cotangents={"y": r.uniform((2, 7))}, flags=["gradient", "large-logits"])


def sdpa_cases(r):
    q, k, v = r.uniform((2, 3, 4)), r.uniform((2, 5, 4)), r.uniform((2, 5, 3))
    yield gradient("sdpa/grad-001", "sdpa",
                   "dq, dk, dv for a (2, 3, 4) query, 5 keys and values of width 3, with a "
                   "cotangent on the output only: dq = c dS k and dk = c dS^T q, so a missing "
                   "transpose or a missing scale c fails.",
                   inputs={"q": q, "k": k, "v": v}, cotangents={"output": r.uniform((2, 3, 3))},
                   flags=["gradient", "basic"])
    yield gradient("sdpa/grad-002", "sdpa",
                   "Cotangents on both the output and the attention weights: the weights' "
                   "cotangent adds to dO v^T before the softmax backward.",
                   inputs={"q": r.uniform((1, 4, 2)), "k": r.uniform((1, 4, 2)),
                           "v": r.uniform((1, 4, 2))},
                   cotangents={"output": r.uniform((1, 4, 2)), "weights": r.uniform((1, 4, 4))},
                   flags=["gradient", "weights-cotangent"])
    mask = r.bools((3, 5))
    mask[:, 0] = True
    yield gradient("sdpa/grad-003", "sdpa",
                   "A (3, 5) mask and a (3, 5) bias broadcast over a (2, 2) batch of heads: "
                   "dbias = dS summed over the batch axes; masked keys get no gradient in dk "
                   "and dv from their row.",
                   inputs={"q": r.uniform((2, 2, 3, 4)), "k": r.uniform((2, 2, 5, 4)),
                           "v": r.uniform((2, 2, 5, 4)), "mask": mask,
                           "bias": r.uniform((3, 5))},
                   cotangents={"output": r.uniform((2, 2, 3, 4))},
                   flags=["gradient", "mask", "bias", "broadcast"])
    yield gradient("sdpa/grad-004", "sdpa",
                   "Cross-attention with T = 2 queries and S = 6 keys (dq and dk have different "
                   "shapes, so swapping them fails) and scale = 0.5 given explicitly.",
                   inputs={"q": r.uniform((2, 4)), "k": r.uniform((6, 4)),
                           "v": r.uniform((6, 3))},
                   attributes={"scale": 0.5}, cotangents={"output": r.uniform((2, 3))},
                   flags=["gradient", "scale", "cross-attention"])
    causal = np.tril(np.ones((4, 4), dtype=bool))
    yield gradient("sdpa/grad-005", "sdpa",
                   "A causal (4, 4) mask and a full (4, 4) bias: dbias is dS itself, 0 above "
                   "the diagonal.",
                   inputs={"q": r.uniform((4, 3)), "k": r.uniform((4, 3)), "v": r.uniform((4, 3)),
                           "mask": causal, "bias": r.uniform((4, 4))},
                   cotangents={"output": r.uniform((4, 3)), "weights": r.uniform((4, 4))},
                   flags=["gradient", "causal", "bias"])


def layer_norm_cases(r):
    yield gradient("layer_norm/grad-001", "layer_norm",
                   "canonical, a (2, 3, 5) input: dx = (dz - mean(dz) - z mean(dz z)) / r with "
                   "dz = dy gamma; leaving out either mean term fails; dgamma and dbeta sum "
                   "over every leading axis.",
                   inputs={"x": r.uniform((2, 3, 5))}, params=_gb(r, 5),
                   cotangents={"y": r.uniform((2, 3, 5))}, flags=["gradient", "basic"])
    yield gradient("layer_norm/grad-002", "layer_norm",
                   "canonical with eps = 0.25 and inputs of small variance: eps inside the root "
                   "in the backward pass too.",
                   inputs={"x": r.uniform((3, 6), -0.375, 0.375)}, attributes={"eps": 0.25},
                   params=_gb(r, 6), cotangents={"y": r.uniform((3, 6))},
                   flags=["gradient", "eps"])
    yield gradient("layer_norm/grad-003", "layer_norm",
                   "variant='annotated' (unbiased std, eps added to the std), a (3, 4) input.",
                   inputs={"x": r.uniform((3, 4))}, attributes={"variant": "annotated"},
                   params=_gb(r, 4), cotangents={"y": r.uniform((3, 4))},
                   flags=["gradient", "annotated"])
    yield gradient("layer_norm/grad-004", "layer_norm",
                   "variant='annotated' with eps = 0.25 and a rank-1 input of width 8.",
                   inputs={"x": r.uniform((8,), -0.5, 0.5)},
                   attributes={"variant": "annotated", "eps": 0.25}, params=_gb(r, 8),
                   cotangents={"y": r.uniform((8,))}, flags=["gradient", "annotated", "eps"])


def rms_norm_cases(r):
    def g(d):
        return {"gamma": 1.0 + r.weights((d,), 0.5)}

    yield gradient("rms_norm/grad-001", "rms_norm",
                   "A (3, 4) input: dx = dz / r - x sum(dz x) / (D r^3), dz = dy gamma; "
                   "leaving out the second term fails.",
                   inputs={"x": r.uniform((3, 4))}, params=g(4),
                   cotangents={"y": r.uniform((3, 4))}, flags=["gradient", "basic"])
    yield gradient("rms_norm/grad-002", "rms_norm",
                   "A (2, 2, 6) batch: dgamma sums over both leading axes.",
                   inputs={"x": r.uniform((2, 2, 6))}, params=g(6),
                   cotangents={"y": r.uniform((2, 2, 6))}, flags=["gradient", "batch"])
    yield gradient("rms_norm/grad-003", "rms_norm",
                   "eps = 0.25 with small inputs: eps inside the root of the backward pass.",
                   inputs={"x": r.uniform((2, 5), -0.375, 0.375)}, attributes={"eps": 0.25},
                   params=g(5), cotangents={"y": r.uniform((2, 5))}, flags=["gradient", "eps"])
    yield gradient("rms_norm/grad-004", "rms_norm", "A rank-1 input of width 8.",
                   inputs={"x": r.uniform((8,))}, params=g(8), cotangents={"y": r.uniform((8,))},
                   flags=["gradient", "rank-1"])


def feedforward_cases(r):
    def p(d, f):
        return {"w1": r.weights((d, f)), "b1": r.weights((f,), 0.5),
                "w2": r.weights((f, d)), "b2": r.weights((d,), 0.5)}

    for n, act in enumerate(["relu", "gelu", "gelu_tanh"], 1):
        yield gradient(f"feedforward/grad-00{n}", "feedforward",
                       f"activation='{act}', a (2, 3, 4) input, D = 4, F = 8: dW1 = x^T dh and "
                       f"dW2 = a^T dy summed over every token (a wrong transpose fails: D != F), "
                       f"dh = (dy W2^T) act'(h).",
                       inputs={"x": r.uniform((2, 3, 4))}, attributes={"activation": act},
                       params=p(4, 8), cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", act])
    yield gradient("feedforward/grad-004", "feedforward",
                   "activation='gelu', a single token (rank-1 x), D = 6, F = 3.",
                   inputs={"x": r.uniform((6,))}, attributes={"activation": "gelu"},
                   params=p(6, 3), cotangents={"y": r.uniform((6,))},
                   flags=["gradient", "gelu", "rank-1"])


def cross_entropy_cases(r):
    t = np.array([[1, 4, -100, 0], [2, -100, 3, 3]])
    yield gradient("cross_entropy/grad-001", "cross_entropy",
                   "reduction='mean' over the 6 counted tokens of a (2, 4) batch with two "
                   "ignored (-100): dlogits = (p - onehot) / 6, 0 on ignored tokens (dividing "
                   "by 8, all tokens, fails).",
                   inputs={"logits": r.uniform((2, 4, 5), -3, 3), "targets": t},
                   cotangents={"loss": np.array(1.0)}, flags=["gradient", "ignore-index"])
    yield gradient("cross_entropy/grad-002", "cross_entropy",
                   "label_smoothing = 0.1 (Vaswani et al.): dlogits = (p - q) / N with "
                   "q = 0.9 onehot + 0.1 / L, and a cotangent of 0.75 on the loss.",
                   inputs={"logits": r.uniform((2, 4, 5), -3, 3), "targets": t},
                   attributes={"label_smoothing": 0.1}, cotangents={"loss": np.array(0.75)},
                   flags=["gradient", "label-smoothing", "ignore-index"])
    yield gradient("cross_entropy/grad-003", "cross_entropy",
                   "reduction='none' with a cotangent per token, ignore_index = 0 given: "
                   "the tokens whose target is 0 get a zero gradient.",
                   inputs={"logits": r.uniform((3, 4), -3, 3), "targets": np.array([2, 0, 3])},
                   attributes={"reduction": "none", "ignore_index": 0, "label_smoothing": 0.2},
                   cotangents={"loss": r.uniform((3,))}, flags=["gradient", "reduction"])
    yield gradient("cross_entropy/grad-004", "cross_entropy",
                   "reduction='sum' over a (5, 6) batch, logits in [-8, 8]: the cotangent is "
                   "not divided by the token count.",
                   inputs={"logits": r.uniform((5, 6), -8, 8, 2.0**-4),
                           "targets": np.array([5, 0, 1, 1, 4])},
                   attributes={"reduction": "sum"}, cotangents={"loss": np.array(-0.5)},
                   flags=["gradient", "reduction"])


def residual_cases(r):
    from .residual import block_params

    for n, pos in enumerate(["post", "pre"], 1):
        how = ("ds = LN^T dy, dx = ds + FFN^T ds" if pos == "post"
               else "dx = dy + LN^T (FFN^T dy)")
        yield gradient(f"residual/grad-00{n}", "residual",
                       f"position='{pos}', a (2, 3, 4) input, D = 4, F = 8: {how}; leaving out "
                       f"the skip path's gradient (dx without the identity term) fails.",
                       inputs={"x": r.uniform((2, 3, 4))}, attributes={"position": pos},
                       params=block_params(r, 4, 8), cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", f"{pos}-norm", "relu"])
    for n, pos in enumerate(["post", "pre"], 3):
        yield gradient(f"residual/grad-00{n}", "residual",
                       f"position='{pos}', activation='gelu', eps = 0.25 and small inputs: the "
                       f"LayerNorm's backward sits {'after' if pos == 'post' else 'before'} the "
                       f"feed-forward's in the backward pass (the other order fails), with eps "
                       f"inside its root.",
                       inputs={"x": r.uniform((3, 4), -0.375, 0.375)},
                       attributes={"position": pos, "activation": "gelu", "eps": 0.25},
                       params=block_params(r, 4, 6), cotangents={"y": r.uniform((3, 4))},
                       flags=["gradient", f"{pos}-norm", "gelu", "eps"])

# == grad2: embedding, lm_head, rope, gated_feedforward, gru_cell, gru, softcap, dropout ====

def embedding_cases(r):
    yield gradient("embedding/grad-001", "embedding",
                   "ids (2, 3) = [[1, 4, 1], [1, 0, 4]] into a (6, 4) table, scale=True: a "
                   "scatter-add, dtable[1] = 2 (dy[0,0] + dy[0,2] + dy[1,0]); writing each row's "
                   "gradient over the last one (table[ids] = dy) instead of accumulating fails, "
                   "and rows 2, 3, 5 (never looked up) get 0. The ids get no gradient.",
                   inputs={"ids": np.array([[1, 4, 1], [1, 0, 4]])},
                   params={"table": r.weights((6, 4))}, cotangents={"y": r.uniform((2, 3, 4))},
                   flags=["gradient", "repeat", "accumulation", "sqrt-d-scale"])
    yield gradient("embedding/grad-002", "embedding",
                   "scale=False, ids (5,) = [2, 2, 2, 0, 3] into a (4, 3) table: dtable[2] is "
                   "the sum of three cotangent rows, no sqrt(D) factor.",
                   inputs={"ids": np.array([2, 2, 2, 0, 3])}, attributes={"scale": False},
                   params={"table": r.weights((4, 3))}, cotangents={"y": r.uniform((5, 3))},
                   flags=["gradient", "repeat", "unscaled"])
    yield gradient("embedding/grad-003", "lm_head",
                   "logits = x W + b for x (2, 3, 4), W (4, 7): dW = x^T dlogits and db = sum "
                   "dlogits over all 6 tokens, dx = dlogits W^T.",
                   inputs={"x": r.uniform((2, 3, 4))},
                   params={"w": r.weights((4, 7)), "b": r.weights((7,))},
                   cotangents={"logits": r.uniform((2, 3, 7))}, flags=["gradient", "lm-head"])
    yield gradient("embedding/grad-004", "lm_head",
                   "tied=True, table (9, 4), no bias: dtable = dlogits^T x of shape (L, D) = "
                   "(9, 4), the transpose of the untied dW; dx = dlogits table.",
                   inputs={"x": r.uniform((2, 3, 4))}, attributes={"tied": True},
                   params={"table": r.weights((9, 4))},
                   cotangents={"logits": r.uniform((2, 3, 9))},
                   flags=["gradient", "tied-embeddings", "lm-head", "no-bias"])
    yield gradient("embedding/grad-005", "lm_head",
                   "tied=True with a square (4, 4) table and a bias: dtable = dlogits^T x; the "
                   "untied layout x^T dlogits has the same shape and wrong values.",
                   inputs={"x": r.uniform((3, 4))}, attributes={"tied": True},
                   params={"table": r.weights((4, 4)), "b": r.weights((4,))},
                   cotangents={"logits": r.uniform((3, 4))},
                   flags=["gradient", "tied-embeddings", "transpose", "lm-head"])


def rope_cases(r):
    yield gradient("rope/grad-001", "rope",
                   "interleaved, x (1, 5, 8), offset 3: dx = R^T dy, the rotation by the "
                   "opposite angle (dx_a = dy_a cos + dy_b sin, dx_b = -dy_a sin + dy_b cos); "
                   "rotating dy forward (R dy) fails.",
                   inputs={"x": r.uniform((1, 5, 8))}, attributes={"offset": 3},
                   cotangents={"y": r.uniform((1, 5, 8))},
                   flags=["gradient", "interleaved", "offset", "sign"])
    yield gradient("rope/grad-002", "rope",
                   "half convention, x (2, 4, 8), offset 5: the pairs (i, i + K/2) in the "
                   "backward pass too.",
                   inputs={"x": r.uniform((2, 4, 8))},
                   attributes={"offset": 5, "convention": "half"},
                   cotangents={"y": r.uniform((2, 4, 8))}, flags=["gradient", "half", "offset"])
    yield gradient("rope/grad-003", "rope",
                   "x (1, 2, 4, 6) = (B, H, T, K), base 500, interleaved, offset 0: row 0 is "
                   "not rotated, so its gradient is dy itself.",
                   inputs={"x": r.uniform((1, 2, 4, 6))}, attributes={"base": 500.0},
                   cotangents={"y": r.uniform((1, 2, 4, 6))},
                   flags=["gradient", "heads", "base", "interleaved"])
    yield gradient("rope/grad-004", "rope",
                   "half convention, base 100, offset 37, rank-2 x (3, 10).",
                   inputs={"x": r.uniform((3, 10))},
                   attributes={"offset": 37, "base": 100.0, "convention": "half"},
                   cotangents={"y": r.uniform((3, 10))},
                   flags=["gradient", "half", "base", "rank-2"])


def gated_feedforward_cases(r):
    def p(d, f):
        return {"w_gate": r.weights((d, f)), "w_up": r.weights((d, f)),
                "w_down": r.weights((f, d))}

    for n, act in enumerate(["silu", "gelu", "gelu_tanh"], 1):
        yield gradient(f"gated_feedforward/grad-00{n}", "gated_feedforward",
                       f"activation='{act}', x (2, 3, 4), D = 4, F = 6: dg = (dy W_down^T) u "
                       f"act'(g) and du = (dy W_down^T) act(g), dx = dg W_gate^T + du W_up^T; "
                       f"dropping either path into dx, or act'(g), fails.",
                       inputs={"x": r.uniform((2, 3, 4))}, attributes={"activation": act},
                       params=p(4, 6), cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", act])
    yield gradient("gated_feedforward/grad-004", "gated_feedforward",
                   "activation='silu', a single token (rank-1 x), D = 5, F = 3.",
                   inputs={"x": r.uniform((5,))}, params=p(5, 3),
                   cotangents={"y": r.uniform((5,))}, flags=["gradient", "silu", "rank-1"])


def _gru_p(r, i, h, biases=True, scale=1.0):
    p = {"w_ih": r.weights((i, 3 * h), scale), "w_hh": r.weights((h, 3 * h), scale)}
    if biases:
        p.update(b_ih=r.weights((3 * h,), scale), b_hh=r.weights((3 * h,), scale))
    return p


def gru_cell_cases(r):
    yield gradient("gru_cell/grad-001", "gru_cell",
                   "B = 2, I = 3, H = 4, all four parameters: dx, dh and every weight; the "
                   "reset gate's gradient dr = da_n (h W_hn + b_hn) (reset after the hidden "
                   "matmul) and dW_hn = h^T (r da_n).",
                   inputs={"x": r.uniform((2, 3), -1, 1), "h": r.uniform((2, 4), -0.9, 0.9)},
                   params=_gru_p(r, 3, 4), cotangents={"h": r.uniform((2, 4))},
                   flags=["gradient", "reset-after", "gate-order", "layout"])
    yield gradient("gru_cell/grad-002", "gru_cell",
                   "No biases, B = 3, I = 5, H = 2: the gradients of the absent biases are not "
                   "part of the result.",
                   inputs={"x": r.uniform((3, 5), -1, 1), "h": r.uniform((3, 2), -0.9, 0.9)},
                   params=_gru_p(r, 5, 2, biases=False), cotangents={"h": r.uniform((3, 2))},
                   flags=["gradient", "optional-params"])
    p = _gru_p(r, 2, 3)
    p["b_hh"][6:] = 1.5
    yield gradient("gru_cell/grad-003", "gru_cell",
                   "b_hn = 1.5 and weights up to 1: the r term of the n gate (r (h W_hn + b_hn)) "
                   "carries a large gradient into b_hh's n block (r da_n) and the reset gate.",
                   inputs={"x": r.uniform((2, 2), -1, 1), "h": r.uniform((2, 3), -0.9, 0.9)},
                   params=p, cotangents={"h": r.uniform((2, 3))},
                   flags=["gradient", "reset-after"])
    yield gradient("gru_cell/grad-004", "gru_cell",
                   "B = 1, I = H = 3, weights up to 1.5 (saturating gates).",
                   inputs={"x": r.uniform((1, 3), -1, 1), "h": r.uniform((1, 3), -0.9, 0.9)},
                   params=_gru_p(r, 3, 3, scale=1.5), cotangents={"h": r.uniform((1, 3))},
                   flags=["gradient", "saturation"])


def gru_cases(r):
    yield gradient("gru/grad-001", "gru",
                   "Backpropagation through time: B = 2, T = 4, I = 3, H = 3, h0 given, "
                   "cotangents on every output and on h_last; dW = sum over the steps, dh0 the "
                   "state gradient after the last backward step.",
                   inputs={"x": r.uniform((2, 4, 3), -1, 1), "h0": r.uniform((2, 3), -0.9, 0.9)},
                   params=_gru_p(r, 3, 3),
                   cotangents={"outputs": r.uniform((2, 4, 3)), "h_last": r.uniform((2, 3))},
                   flags=["gradient", "accumulation", "initial-state"])
    yield gradient("gru/grad-002", "gru",
                   "h0 absent (zeros, no gradient), cotangent on h_last only: every step's "
                   "gradient reaches back only through the state; I = 2, H = 4, T = 3.",
                   inputs={"x": r.uniform((2, 3, 2), -1, 1)}, params=_gru_p(r, 2, 4),
                   cotangents={"h_last": r.uniform((2, 4))},
                   flags=["gradient", "default-state"])
    yield gradient("gru/grad-003", "gru",
                   "Cotangent on the outputs only, no biases, T = 5, B = 1: the outputs' "
                   "cotangent enters at each step and adds to the carried state gradient.",
                   inputs={"x": r.uniform((1, 5, 3), -1, 1), "h0": r.uniform((1, 2), -0.9, 0.9)},
                   params=_gru_p(r, 3, 2, biases=False),
                   cotangents={"outputs": r.uniform((1, 5, 2))},
                   flags=["gradient", "optional-params", "long"])
    yield gradient("gru/grad-004", "gru",
                   "T = 1: the same as gru_cell's gradient with dh' = doutputs[:, 0] + dh_last.",
                   inputs={"x": r.uniform((2, 1, 3), -1, 1), "h0": r.uniform((2, 3), -0.9, 0.9)},
                   params=_gru_p(r, 3, 3),
                   cotangents={"outputs": r.uniform((2, 1, 3)), "h_last": r.uniform((2, 3))},
                   flags=["gradient", "single-step"])


def softcap_cases(r):
    yield gradient("softcap/grad-001", "softcap",
                   "cap = 8, x in [-32, 32]: dx = dy (1 - tanh^2(x / cap)), near 0 where "
                   "saturated; forgetting the 1/cap inside tanh's argument fails.",
                   inputs={"x": r.uniform((3, 5), -32, 32, 0.25)}, attributes={"cap": 8.0},
                   cotangents={"y": r.uniform((3, 5))}, flags=["gradient", "softcap",
                                                              "saturation"])
    yield gradient("softcap/grad-002", "softcap",
                   "cap = 50 (Gemma 2), x in [-128, 128] on a (2, 2, 4) input.",
                   inputs={"x": r.uniform((2, 2, 4), -128, 128, 1.0)}, attributes={"cap": 50.0},
                   cotangents={"y": r.uniform((2, 2, 4))}, flags=["gradient", "softcap"])
    yield gradient("softcap/grad-003", "softcap",
                   "cap = 1, |x| <= 2: dx = dy (1 - tanh^2 x).",
                   inputs={"x": r.uniform((4, 3))}, attributes={"cap": 1.0},
                   cotangents={"y": r.uniform((4, 3))}, flags=["gradient", "softcap"])
    yield gradient("softcap/grad-004", "softcap",
                   "cap = 30, a rank-1 x of width 8 in [-64, 64].",
                   inputs={"x": r.uniform((8,), -64, 64, 0.5)}, attributes={"cap": 30.0},
                   cotangents={"y": r.uniform((8,))}, flags=["gradient", "softcap", "rank-1"])


def dropout_cases(r):
    yield gradient("dropout/grad-001", "dropout",
                   "p = 0.25 with a (3, 4) keep mask: dx = dy / 0.75 where kept, 0 where "
                   "dropped; the gradient uses the forward pass's mask, not a fresh one.",
                   inputs={"x": r.uniform((3, 4)), "keep_mask": r.bools((3, 4), 0.75)},
                   attributes={"p": 0.25}, cotangents={"y": r.uniform((3, 4))},
                   flags=["gradient", "inverted-dropout", "mask-polarity"])
    yield gradient("dropout/grad-002", "dropout",
                   "p = 0.5 on a (2, 3, 4) input: kept gradients are doubled.",
                   inputs={"x": r.uniform((2, 3, 4)), "keep_mask": r.bools((2, 3, 4), 0.5)},
                   attributes={"p": 0.5}, cotangents={"y": r.uniform((2, 3, 4))},
                   flags=["gradient", "inverted-dropout"])
    yield gradient("dropout/grad-003", "dropout",
                   "A (1, 5) keep mask broadcast over 3 rows, p = 0.375.",
                   inputs={"x": r.uniform((3, 5)), "keep_mask": r.bools((1, 5), 0.6)},
                   attributes={"p": 0.375}, cotangents={"y": r.uniform((3, 5))},
                   flags=["gradient", "broadcast"])
    yield gradient("dropout/grad-004", "dropout",
                   "p = 0 (the identity): dx = dy whatever the mask.",
                   inputs={"x": r.uniform((2, 4)), "keep_mask": r.bools((2, 4), 0.5)},
                   attributes={"p": 0.0}, cotangents={"y": r.uniform((2, 4))},
                   flags=["gradient", "p-zero"])


def attention_entropy_cases(r):
    yield gradient("attention_entropy/grad-001", "attention_entropy",
                   "Positive (3, 5) weights in [2^-6, 1]: dw = -dH (ln w + 1); leaving out "
                   "the + 1 (the derivative of ln w times w) fails.",
                   inputs={"weights": r.uniform((3, 5), 2.0**-6, 1)},
                   cotangents={"entropy": r.uniform((3,))}, flags=["gradient", "basic"])
    yield gradient("attention_entropy/grad-002", "attention_entropy",
                   "axis = 0 on (4, 3) weights: each column's cotangent scales its column.",
                   inputs={"weights": r.uniform((4, 3), 2.0**-6, 1)}, attributes={"axis": 0},
                   cotangents={"entropy": r.uniform((3,))}, flags=["gradient", "axis"])
    w = r.uniform((2, 6), 2.0**-6, 1)
    w[0, [1, 4]] = 0
    w[1, 0] = 0
    yield gradient("attention_entropy/grad-003", "attention_entropy",
                   "Zero weights (as after a mask): 0 ln 0 = 0 and the gradient there is 0 "
                   "(the one-sided derivative is +inf; torch's and TensorFlow's where-guarded "
                   "entropy give 0); -(ln w + 1) unguarded gives inf.",
                   inputs={"weights": w}, cotangents={"entropy": r.uniform((2,))},
                   flags=["gradient", "zeros"])
    yield gradient("attention_entropy/grad-004", "attention_entropy",
                   "A (2, 2, 4) batch of small weights in [2^-6, 2^-3]: |ln w| up to 4.2.",
                   inputs={"weights": r.uniform((2, 2, 4), 2.0**-6, 2.0**-3)},
                   cotangents={"entropy": r.uniform((2, 2))}, flags=["gradient", "batch", "tiny"])


GRAD2_CASES = {"embedding": embedding_cases, "rope": rope_cases,
               "gated_feedforward": gated_feedforward_cases, "gru_cell": gru_cell_cases,
               "gru": gru_cases, "softcap": softcap_cases, "dropout": dropout_cases,
               "attention_entropy": attention_entropy_cases}

# == end grad2 ===============================================================================


CASES = {"softmax": softmax_cases, "sdpa": sdpa_cases, "layer_norm": layer_norm_cases,
         "rms_norm": rms_norm_cases, "feedforward": feedforward_cases,
         "cross_entropy": cross_entropy_cases, "residual": residual_cases}
CASES.update(GRAD2_CASES)


def gradient_cases(component: str) -> list:
    make = CASES.get(component)
    return [] if make is None else list(make(Rng(f"{component}/grad")))


# -- attention kernels: sdpa (num_kv_heads, softcap), mha, self_attention, additive_attention,
# luong_attention, relative_attention ---------------------------------------------------------

def sdpa_gqa_softcap_cases(r):
    yield gradient("sdpa/grad-006", "sdpa",
                   "num_kv_heads = 2 under H = 4 query heads (groups of 2): dk and dv of a kv "
                   "head are the sums over the two query heads of its group; keeping one head's "
                   "share, or pairing head h with kv head h % 2, fails.",
                   inputs={"q": r.uniform((2, 4, 3, 4)), "k": r.uniform((2, 2, 5, 4)),
                           "v": r.uniform((2, 2, 5, 3))},
                   attributes={"num_kv_heads": 2}, cotangents={"output": r.uniform((2, 4, 3, 3))},
                   flags=["gradient", "gqa"])
    yield gradient("sdpa/grad-007", "sdpa",
                   "Multi-query attention (num_kv_heads = 1 under H = 3) with a cotangent on the "
                   "weights too: dk and dv sum over every query head.",
                   inputs={"q": r.uniform((3, 4, 2)), "k": r.uniform((1, 4, 2)),
                           "v": r.uniform((1, 4, 3))},
                   attributes={"num_kv_heads": 1},
                   cotangents={"output": r.uniform((3, 4, 3)), "weights": r.uniform((3, 4, 4))},
                   flags=["gradient", "mqa", "weights-cotangent"])
    yield gradient("sdpa/grad-008", "sdpa",
                   "softcap = 1.5 on scaled scores up to 8 in size: ds = dS (1 - tanh^2(s / 1.5)) "
                   "before dq and dk; leaving out tanh' (ds = dS) fails.",
                   inputs={"q": r.uniform((2, 3, 4)), "k": r.uniform((2, 5, 4)),
                           "v": r.uniform((2, 5, 3))},
                   attributes={"softcap": 1.5}, cotangents={"output": r.uniform((2, 3, 3))},
                   flags=["gradient", "softcap"])
    mask = r.bools((4, 4))
    mask[:, 0] = True
    yield gradient("sdpa/grad-009", "sdpa",
                   "softcap = 2, num_kv_heads = 1 under H = 2, a (4, 4) mask and bias and a "
                   "cotangent on the weights: the bias is added after the cap, so dbias = dS "
                   "(not ds), while dq, dk use ds.",
                   inputs={"q": r.uniform((2, 4, 3)), "k": r.uniform((1, 4, 3)),
                           "v": r.uniform((1, 4, 2)), "mask": mask, "bias": r.uniform((4, 4))},
                   attributes={"softcap": 2.0, "num_kv_heads": 1},
                   cotangents={"output": r.uniform((2, 4, 2)), "weights": r.uniform((2, 4, 4))},
                   flags=["gradient", "softcap", "mqa", "mask", "bias"])


def _then(*makes):
    def chained(r):
        for make in makes:
            yield from make(r)
    return chained


CASES["sdpa"] = _then(sdpa_cases, sdpa_gqa_softcap_cases)


def mha_grad_cases(r):
    from .mha import mha_params

    def u(*shape):
        return r.uniform(shape, -1, 1)

    yield gradient("mha/grad-001", "mha",
                   "Cross-attention B = 2, T = 2, S = 4, Dq = 5, Dk = Dv = 4, H = 2, K = 3, V = 2, "
                   "Do = 3, all biases: every width differs, so a projection gradient with a "
                   "wrong transpose (dW_o = dO^T concat) cannot even take the parameter's shape, "
                   "and db_q sums over the batch and the tokens.",
                   inputs={"query": u(2, 2, 5), "key": u(2, 4, 4), "value": u(2, 4, 4)},
                   attributes={"num_heads": 2}, params=mha_params(r, 5, 4, 4, 2, 3, 2, 3),
                   cotangents={"output": r.uniform((2, 2, 3))},
                   flags=["gradient", "cross-attention", "bias"])
    x = u(1, 3, 4)
    yield gradient("mha/grad-002", "mha",
                   "Self-attention (the same (1, 3, 4) array as query, key and value; each gets "
                   "its own gradient), H = 2, K = V = 2, a causal mask and cotangents on the "
                   "output and the (1, 2, 3, 3) weights.",
                   inputs={"query": x, "key": x, "value": x,
                           "mask": np.tril(np.ones((3, 3), dtype=bool))},
                   attributes={"num_heads": 2}, params=mha_params(r, 4, 4, 4, 2, 2, 2, 4),
                   cotangents={"output": r.uniform((1, 3, 4)), "weights": r.uniform((1, 2, 3, 3))},
                   flags=["gradient", "self", "causal", "weights-cotangent"])
    yield gradient("mha/grad-003", "mha",
                   "num_kv_heads = 2 under H = 4 (K = V = 2, D = 4, B = 2, T = 3, S = 4): w_k and "
                   "w_v are (4, 4), and the gradient of kv head g's columns is the sum over "
                   "query heads 2g and 2g + 1.",
                   inputs={"query": u(2, 3, 4), "key": u(2, 4, 4), "value": u(2, 4, 4)},
                   attributes={"num_heads": 4, "num_kv_heads": 2},
                   params=mha_params(r, 4, 4, 4, 4, 2, 2, 4, kv_heads=2),
                   cotangents={"output": r.uniform((2, 3, 4))}, flags=["gradient", "gqa", "bias"])
    keep = np.array([[True, True, True, False], [True, True, False, False]])[:, None, None, :]
    yield gradient("mha/grad-004", "mha",
                   "Multi-query (num_kv_heads = 1 under H = 3), no biases, a (2, 1, 1, 4) "
                   "padding mask: padded keys and values get zero gradient, and the parameter "
                   "gradients hold only the four weights.",
                   inputs={"query": u(2, 2, 3), "key": u(2, 4, 3), "value": u(2, 4, 3),
                           "mask": keep},
                   attributes={"num_heads": 3, "num_kv_heads": 1},
                   params=mha_params(r, 3, 3, 3, 3, 2, 2, 3, bias=False, kv_heads=1),
                   cotangents={"output": r.uniform((2, 2, 3)), "weights": r.uniform((2, 3, 2, 4))},
                   flags=["gradient", "mqa", "padding", "no-bias"])


def self_attention_grad_cases(r):
    from .self_attention import sa_params

    def u(*shape):
        return r.uniform(shape, -1, 1)

    yield gradient("self_attention/grad-001", "self_attention",
                   "B = 2, T = 3, D = 4, K = 3, V = 2, all biases: x feeds Q, K and V, so dx is "
                   "the sum of the three projections' input gradients (keeping one fails).",
                   inputs={"x": u(2, 3, 4)}, params=sa_params(r, 4, 3, 2),
                   cotangents={"output": r.uniform((2, 3, 2))}, flags=["gradient", "basic"])
    yield gradient("self_attention/grad-002", "self_attention",
                   "A causal mask and cotangents on the output and the weights, scale = 0.5.",
                   inputs={"x": u(1, 4, 3), "mask": np.tril(np.ones((4, 4), dtype=bool))},
                   attributes={"scale": 0.5}, params=sa_params(r, 3, 2, 3),
                   cotangents={"output": r.uniform((1, 4, 3)), "weights": r.uniform((1, 4, 4))},
                   flags=["gradient", "causal", "scale", "weights-cotangent"])
    yield gradient("self_attention/grad-003", "self_attention",
                   "No biases (Vaswani et al.'s projections): the gradients hold w_q, w_k, w_v "
                   "only; B = 3 so dW sums over every sequence.",
                   inputs={"x": u(3, 2, 4)}, params=sa_params(r, 4, 2, 2, biases=()),
                   cotangents={"output": r.uniform((3, 2, 2))}, flags=["gradient", "no-bias"])
    keep = r.bools((2, 3, 3))
    keep[..., 0] = True
    yield gradient("self_attention/grad-004", "self_attention",
                   "Only b_v among the biases, a (2, 3, 3) per-sequence mask, inputs in [-2, 2] "
                   "(sharper weights).",
                   inputs={"x": r.uniform((2, 3, 3)), "mask": keep},
                   params=sa_params(r, 3, 2, 2, biases=("b_v",)),
                   cotangents={"output": r.uniform((2, 3, 2))}, flags=["gradient", "mask"])


CASES.update(mha=mha_grad_cases, self_attention=self_attention_grad_cases)


# == composites: layers, stacks, models (the kernels' VJPs chained; backends/composite/tape.py)

def _L():
    from . import encoder_layer as L
    return L


def encoder_layer_cases(r):
    L = _L()
    for n, norm in enumerate(["post", "pre"], 1):
        yield gradient(f"encoder_layer/grad-00{n}", "encoder_layer",
                       f"norm='{norm}', a (2, 3, 4) input, H = 2, F = 8, row 1 key-padded after "
                       f"2: dx sums the self-attention's dquery, dkey and dvalue (x is all "
                       f"three) and the skip paths of both residual blocks.",
                       inputs={"x": r.uniform((2, 3, 4)), "mask": L.key_padding([3, 2], 3)},
                       attributes={"num_heads": 2, "norm": norm},
                       params=L.enc_layer_params(r, 4, 8), cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", f"{norm}-norm", "padding"])
    yield gradient("encoder_layer/grad-003", "encoder_layer",
                   "norm='post', activation='gelu', a causal (4, 4) mask, H = 1, no biases in "
                   "the attention (no b_* gradients expected).",
                   inputs={"x": r.uniform((1, 4, 4)), "mask": L.causal(4)},
                   attributes={"num_heads": 1, "activation": "gelu"},
                   params=L.enc_layer_params(r, 4, 6, bias=False),
                   cotangents={"y": r.uniform((1, 4, 4))},
                   flags=["gradient", "post-norm", "gelu", "causal", "no-bias"])
    yield gradient("encoder_layer/grad-004", "encoder_layer",
                   "norm='pre', eps = 0.25, a single token (T = 1): the attention weights are "
                   "1 and its gradient reaches x through the value projection only.",
                   inputs={"x": r.uniform((2, 1, 4))},
                   attributes={"num_heads": 2, "norm": "pre", "eps": 0.25},
                   params=L.enc_layer_params(r, 4, 8), cotangents={"y": r.uniform((2, 1, 4))},
                   flags=["gradient", "pre-norm", "eps", "single-query"])


def decoder_layer_cases(r):
    L = _L()
    for n, norm in enumerate(["post", "pre"], 1):
        yield gradient(f"decoder_layer/grad-00{n}", "decoder_layer",
                       f"norm='{norm}', x (2, 3, 4), memory (2, 5, 4), causal self-attention, "
                       f"memory row 1 padded after 3, H = 2: dmemory = the cross-attention's "
                       f"dkey + dvalue, 0 on the padded memory positions.",
                       inputs={"x": r.uniform((2, 3, 4)), "memory": r.uniform((2, 5, 4)),
                               "self_mask": L.causal(3),
                               "memory_mask": L.key_padding([5, 3], 5)},
                       attributes={"num_heads": 2, "norm": norm},
                       params=L.dec_layer_params(r, 4, 8), cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", f"{norm}-norm", "causal", "padding"])
    yield gradient("decoder_layer/grad-003", "decoder_layer",
                   "norm='post', activation='gelu', T = 2 queries, S = 3 memory positions, "
                   "H = 1, no masks: dx and dmemory have different shapes.",
                   inputs={"x": r.uniform((1, 2, 4)), "memory": r.uniform((1, 3, 4))},
                   attributes={"num_heads": 1, "activation": "gelu"},
                   params=L.dec_layer_params(r, 4, 6), cotangents={"y": r.uniform((1, 2, 4))},
                   flags=["gradient", "post-norm", "gelu", "cross-attention"])
    yield gradient("decoder_layer/grad-004", "decoder_layer",
                   "norm='pre', eps = 0.25, no biases, a memory mask only (self-attention "
                   "unmasked).",
                   inputs={"x": r.uniform((2, 2, 4)), "memory": r.uniform((2, 4, 4)),
                           "memory_mask": L.key_padding([2, 4], 4)},
                   attributes={"num_heads": 2, "norm": "pre", "eps": 0.25},
                   params=L.dec_layer_params(r, 4, 6, bias=False),
                   cotangents={"y": r.uniform((2, 2, 4))},
                   flags=["gradient", "pre-norm", "eps", "no-bias", "padding"])


def encoder_cases(r):
    L = _L()
    for n, (norm, layers) in enumerate([("post", 2), ("pre", 2), ("post", 1), ("pre", 3)], 1):
        final = " and final_norm" if norm == "pre" else ""
        yield gradient(f"encoder/grad-00{n}", "encoder",
                       f"N = {layers}, norm='{norm}', a (2, 3, 4) input, row 1 key-padded after "
                       f"2: dh_i = layer_i^T dh_(i+1), parameters layers.<i>.*{final} each get "
                       f"their own layer's gradient (swapping two layers' fails).",
                       inputs={"x": r.uniform((2, 3, 4)), "mask": L.key_padding([3, 2], 3)},
                       attributes={"num_layers": layers, "num_heads": 2, "norm": norm,
                                   "activation": "gelu" if n == 3 else "relu"},
                       params=L.stack_params(r, L.enc_layer_params, layers, 4, 6, norm == "pre"),
                       cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", f"{norm}-norm", "padding"])


def decoder_cases(r):
    L = _L()
    for n, (norm, layers) in enumerate([("post", 2), ("pre", 2), ("post", 1), ("pre", 1)], 1):
        yield gradient(f"decoder/grad-00{n}", "decoder",
                       f"N = {layers}, norm='{norm}', x (2, 3, 4), memory (2, 4, 4), causal "
                       f"self-attention, memory row 1 padded after 2: dmemory sums every "
                       f"layer's cross-attention gradient.",
                       inputs={"x": r.uniform((2, 3, 4)), "memory": r.uniform((2, 4, 4)),
                               "self_mask": L.causal(3),
                               "memory_mask": L.key_padding([4, 2], 4)},
                       attributes={"num_layers": layers, "num_heads": 2, "norm": norm},
                       params=L.stack_params(r, L.dec_layer_params, layers, 4, 6, norm == "pre"),
                       cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", f"{norm}-norm", "causal", "padding"])


def encoder_only_cases(r):
    from .encoder_only import params
    from .transformer import ids

    for n, (norm, cot) in enumerate([("post", ("logits",)), ("post", ("hidden", "logits")),
                                     ("pre", ("hidden", "logits")), ("pre", ("hidden",))], 1):
        toks = ids(r, 7, [4, 2], 4, bos_id=1)
        if n == 4:
            toks = np.array([[1, 5, 5, 5], [1, 5, 3, 0]])  # repeated ids: rows accumulate
        yield gradient(f"encoder_only/grad-00{n}", "encoder_only",
                       f"norm='{norm}', N = 1, D = 4, vocabulary 7, T = 4, row 1 padded; "
                       f"cotangents on {' and '.join(cot)}: dhidden = its cotangent + the LM "
                       f"head's dx; embed.table and pos.table get scatter-added rows"
                       + (" (id 5 three times in row 0)." if n == 4 else "."),
                       inputs={"ids": toks},
                       attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2, "norm": norm},
                       params=params(r, 1, 4, 6, 7, 4, norm),
                       cotangents={c: r.uniform((2, 4, 4 if c == "hidden" else 7)) for c in cot},
                       flags=["gradient", f"{norm}-norm", "padding"]
                       + (["repeat"] if n == 4 else []))


def decoder_only_cases(r):
    from .decoder_only import params
    from .transformer import ids

    for n, (norm, layers) in enumerate([("pre", 1), ("pre", 2), ("post", 1), ("pre", 1)], 1):
        toks = ids(r, 7, [4, 3], 4, bos_id=1) if n != 4 else np.array([[1, 4, 4, 4],
                                                                          [1, 4, 0, 0]])
        yield gradient(f"decoder_only/grad-00{n}", "decoder_only",
                       f"N = {layers}, norm='{norm}', D = 4, H = 2, vocabulary 7, T = 4, causal "
                       f"and padded: dlogits through lm_head, the stack, then embed.table and "
                       f"pos.table (pos.table row t sums the batch)"
                       + (", id 4 repeated: its table row accumulates." if n == 4 else "."),
                       inputs={"ids": toks},
                       attributes={"pad_id": 0, "num_layers": layers, "num_heads": 2,
                                   "norm": norm, "activation": "relu" if n == 4 else "gelu"},
                       params=params(r, layers, 4, 6, 7, 4, norm),
                       cotangents={"logits": r.uniform((2, 4, 7))},
                       flags=["gradient", f"{norm}-norm", "causal", "padding"]
                       + (["repeat"] if n == 4 else []))


def transformer_cases(r):
    from .transformer import ids, transformer_params

    for n, (norm, tied, layers) in enumerate([("post", False, 1), ("pre", False, 1),
                                              ("post", True, 1), ("pre", True, 2)], 1):
        tie = ("tied: tgt_embed.table gets dlogits^T h from the LM head plus the embedding's "
               "scatter-added rows" if tied else "untied")
        yield gradient(f"transformer/grad-00{n}", "transformer",
                       f"N = {layers}, norm='{norm}', {tie}; D = 4, H = 2, vocabulary 7, source "
                       f"T = 4 and target T = 3, padded: the encoder's gradient comes only "
                       f"through the decoder's cross-attention (dmemory).",
                       inputs={"src_ids": ids(r, 7, [4, 3], 4), "tgt_ids": ids(r, 7, [3, 2], 3,
                                                                              bos_id=1)},
                       attributes={"pad_id": 0, "num_layers": layers, "num_heads": 2,
                                   "norm": norm, "tie_embeddings": tied},
                       params=transformer_params(r, layers, 4, 6, 7, norm, tied),
                       cotangents={"logits": r.uniform((2, 3, 7))},
                       flags=["gradient", f"{norm}-norm", "padding"]
                       + (["tied-embeddings"] if tied else []))


CASES.update(encoder_layer=encoder_layer_cases, decoder_layer=decoder_layer_cases,
             encoder=encoder_cases, decoder=decoder_cases, encoder_only=encoder_only_cases,
             decoder_only=decoder_only_cases, transformer=transformer_cases)


def decoder_only_loss_cases(r):
    """One training step: the loss's gradient with respect to every parameter."""
    from .decoder_only import params
    from .decoder_only_loss import next_ids
    from .transformer import ids

    for n, (norm, layers, smooth) in enumerate([("pre", 1, 0.1), ("pre", 2, 0.1),
                                                ("post", 1, 0.0), ("pre", 1, 0.0)], 1):
        toks = ids(r, 7, [5, 3], 5, bos_id=1)
        smoothing = f"label_smoothing = {smooth}" if smooth else "no label smoothing"
        yield gradient(f"decoder_only_loss/grad-00{n}", "decoder_only_loss",
                       f"One training step of a decoder-only model (N = {layers}, norm='{norm}', "
                       f"D = 4, H = 2, vocabulary 7, B = 2, T = 5, row 1 padded after 3): "
                       f"loss = the mean cross-entropy of the logits against the next ids over "
                       f"the 6 counted targets (the last position and padding ignored), "
                       f"{smoothing}, dloss = 1; expected: the loss and the gradient of every "
                       f"parameter (embed.table, pos.table, layers.*, "
                       f"{'final_norm.*, ' if norm == 'pre' else ''}lm_head.*).",
                       inputs={"ids": toks, "targets": next_ids(toks)},
                       attributes={"pad_id": 0, "num_layers": layers, "num_heads": 2,
                                   "norm": norm, "label_smoothing": smooth},
                       params=params(r, layers, 4, 6, 7, 5, norm),
                       cotangents={"loss": np.array(1.0)},
                       flags=["gradient", "training-step", f"{norm}-norm", "ignore-index",
                              "padding"] + (["label-smoothing"] if smooth else []))


CASES["decoder_only_loss"] = decoder_only_loss_cases

def additive_attention_grad_cases(r):
    from .additive_attention import add_params

    def u(*shape):
        return r.uniform(shape, -1, 1)

    yield gradient("additive_attention/grad-001", "additive_attention",
                   "B = 2, T = 2, S = 3, Dq = 3 != Dk = 4, A = 5, values omitted (= keys): the "
                   "keys' gradient is the score path's plus the values path's (W^T dC); "
                   "du = de v (1 - h^2), so leaving out tanh' fails.",
                   inputs={"query": u(2, 2, 3), "keys": u(2, 3, 4)}, params=add_params(r, 3, 4, 5),
                   cotangents={"context": r.uniform((2, 2, 4))},
                   flags=["gradient", "default-values"])
    keep = r.bools((2, 3, 4))
    keep[..., 0] = True
    yield gradient("additive_attention/grad-002", "additive_attention",
                   "values given (Dv = 2), a (2, 3, 4) mask and cotangents on the context and "
                   "the weights: masked keys get no gradient from their row.",
                   inputs={"query": u(2, 3, 2), "keys": u(2, 4, 3), "values": u(2, 4, 2),
                           "mask": keep},
                   params=add_params(r, 2, 3, 4),
                   cotangents={"context": r.uniform((2, 3, 2)), "weights": r.uniform((2, 3, 4))},
                   flags=["gradient", "mask", "weights-cotangent"])
    yield gradient("additive_attention/grad-003", "additive_attention",
                   "Inputs in [-2, 2] (pre-activations up to 12: some tanh saturated, 1 - h^2 "
                   "near 0), values given: dv = sum de h, dW_q = sum_b query^T (sum_s du).",
                   inputs={"query": r.uniform((1, 3, 4)), "keys": r.uniform((1, 4, 4)),
                           "values": r.uniform((1, 4, 3))},
                   params=add_params(r, 4, 4, 3), cotangents={"context": r.uniform((1, 3, 3))},
                   flags=["gradient", "saturation"])
    yield gradient("additive_attention/grad-004", "additive_attention",
                   "A single query (T = 1) over S = 5 keys, B = 3, cotangent on the weights only "
                   "(the context's is 0).",
                   inputs={"query": u(3, 1, 2), "keys": u(3, 5, 2)}, params=add_params(r, 2, 2, 3),
                   cotangents={"weights": r.uniform((3, 1, 5))},
                   flags=["gradient", "single-query", "weights-cotangent"])


def luong_attention_grad_cases(r):
    from .luong_attention import concat_params

    def u(*shape):
        return r.uniform(shape, -1, 1)

    yield gradient("luong_attention/grad-001", "luong_attention",
                   "score='dot', values omitted (= keys), B = 2, T = 2, S = 3, D = 3: dq = de k, "
                   "dk = de^T q + W^T dC (the keys are also the values).",
                   inputs={"query": u(2, 2, 3), "keys": u(2, 3, 3)}, attributes={"score": "dot"},
                   cotangents={"context": r.uniform((2, 2, 3))},
                   flags=["gradient", "dot", "default-values"])
    keep = r.bools((2, 2, 4))
    keep[..., 0] = True
    yield gradient("luong_attention/grad-002", "luong_attention",
                   "score='dot', values given (Dv = 2), a (2, 2, 4) mask, cotangents on the "
                   "context and the weights.",
                   inputs={"query": u(2, 2, 3), "keys": u(2, 4, 3), "values": u(2, 4, 2),
                           "mask": keep},
                   attributes={"score": "dot"},
                   cotangents={"context": r.uniform((2, 2, 2)), "weights": r.uniform((2, 2, 4))},
                   flags=["gradient", "dot", "mask", "weights-cotangent"])
    yield gradient("luong_attention/grad-003", "luong_attention",
                   "score='general', Dq = 3 != Dk = 2, values given: dW = sum_b q^T de k is "
                   "(3, 2), dq = de k W^T, dk = de^T q W (a missing transpose cannot take the "
                   "shape).",
                   inputs={"query": u(2, 3, 3), "keys": u(2, 4, 2), "values": u(2, 4, 2)},
                   attributes={"score": "general"}, params={"w": r.weights((3, 2))},
                   cotangents={"context": r.uniform((2, 3, 2))}, flags=["gradient", "general"])
    yield gradient("luong_attention/grad-004", "luong_attention",
                   "score='general' with a square W (Dq = Dk = 3), values omitted and a cotangent "
                   "on the weights: W's gradient in the wrong layout (its transpose) fails.",
                   inputs={"query": u(1, 3, 3), "keys": u(1, 4, 3)},
                   attributes={"score": "general"}, params={"w": r.weights((3, 3))},
                   cotangents={"context": r.uniform((1, 3, 3)), "weights": r.uniform((1, 3, 4))},
                   flags=["gradient", "general", "default-values", "weights-cotangent"])
    yield gradient("luong_attention/grad-005", "luong_attention",
                   "score='concat', Dq = 2, Dk = 3, A = 4, values given: W's top 2 rows get "
                   "the query's share and its bottom 3 the keys'; tanh' = 1 - h^2.",
                   inputs={"query": u(2, 2, 2), "keys": u(2, 3, 3), "values": u(2, 3, 2)},
                   attributes={"score": "concat"}, params=concat_params(r, 2, 3, 4),
                   cotangents={"context": r.uniform((2, 2, 2))}, flags=["gradient", "concat"])
    yield gradient("luong_attention/grad-006", "luong_attention",
                   "score='concat', values omitted, inputs in [-2, 2] (some tanh saturated), "
                   "cotangents on the context and the weights.",
                   inputs={"query": r.uniform((1, 2, 3)), "keys": r.uniform((1, 4, 2))},
                   attributes={"score": "concat"}, params=concat_params(r, 3, 2, 3),
                   cotangents={"context": r.uniform((1, 2, 2)), "weights": r.uniform((1, 2, 4))},
                   flags=["gradient", "concat", "default-values", "saturation"])


CASES.update(additive_attention=additive_attention_grad_cases,
             luong_attention=luong_attention_grad_cases)


def relative_attention_grad_cases(r):
    def t(m, kw, vw):
        return {"rel_k": r.weights((2 * m + 1, kw)), "rel_v": r.weights((2 * m + 1, vw))}

    yield gradient("relative_attention/grad-001", "relative_attention",
                   "T = 3, S = 5, K = 3, V = 2, max_distance = 1 (distances 2..4 "
                   "clipped): the rows 0 and 2 of rel_k and rel_v collect the gradient of every "
                   "clipped pair (overwriting instead of accumulating fails).",
                   inputs={"q": r.uniform((2, 3, 3)), "k": r.uniform((2, 5, 3)),
                           "v": r.uniform((2, 5, 2))},
                   attributes={"max_distance": 1}, params=t(1, 3, 2),
                   cotangents={"output": r.uniform((2, 3, 2))},
                   flags=["gradient", "clipping", "accumulation"])
    yield gradient("relative_attention/grad-002", "relative_attention",
                   "max_distance = 3 >= every distance (T = S = 4), a causal mask and cotangents "
                   "on the output and the weights: masked pairs add nothing to the tables' "
                   "gradients, rel_k's upper rows (j > i) get 0.",
                   inputs={"q": r.uniform((1, 4, 2)), "k": r.uniform((1, 4, 2)),
                           "v": r.uniform((1, 4, 3)), "mask": np.tril(np.ones((4, 4), dtype=bool))},
                   attributes={"max_distance": 3}, params=t(3, 2, 3),
                   cotangents={"output": r.uniform((1, 4, 3)), "weights": r.uniform((1, 4, 4))},
                   flags=["gradient", "causal", "weights-cotangent"])
    yield gradient("relative_attention/grad-003", "relative_attention",
                   "max_distance = 0 (a single table row shared by every pair), scale = 0.5: "
                   "drel_v = sum over every pair of alpha_ij dz_i; drel_k is 0 (the one row "
                   "shifts a query's every score alike, which the softmax ignores).",
                   inputs={"q": r.uniform((2, 2, 2)), "k": r.uniform((2, 3, 2)),
                           "v": r.uniform((2, 3, 2))},
                   attributes={"max_distance": 0, "scale": 0.5}, params=t(0, 2, 2),
                   cotangents={"output": r.uniform((2, 2, 2))},
                   flags=["gradient", "max-distance-0", "scale"])
    keep = r.bools((2, 4, 3))
    keep[..., 0] = True
    yield gradient("relative_attention/grad-004", "relative_attention",
                   "T = 4 > S = 3 with max_distance = 2, a (2, 4, 3) mask and a cotangent on "
                   "the weights only: dq_i includes the scaled a^K term c sum_j de_ij a^K_ij.",
                   inputs={"q": r.uniform((2, 4, 2)), "k": r.uniform((2, 3, 2)),
                           "v": r.uniform((2, 3, 2)), "mask": keep},
                   attributes={"max_distance": 2}, params=t(2, 2, 2),
                   cotangents={"weights": r.uniform((2, 4, 3))},
                   flags=["gradient", "mask", "weights-cotangent"])


CASES.update(relative_attention=relative_attention_grad_cases)


def seq2seq_attention_cases(r):
    from .seq2seq_attention import s2s_params, src_batch, tf, tgt_batch

    for n, kind in enumerate(["additive", "dot", "general", "concat"], 1):
        how = ("the attention reads h_(t-1), so dh_(t-1) gets the attention's dquery besides "
               "the GRU's" if kind == "additive" else
               "h~ = tanh([c; h] W_c): decoder.combine.w gets [c; h]^T dz, and h_t gets the "
               "attention's dquery")
        yield gradient(f"seq2seq_attention/grad-00{n}", "seq2seq_attention",
                       f"{kind} attention, B = 2, S = 4, T = 3, E = H = A = 4, vocabularies of "
                       f"8, source row 1 padded after 2: backpropagation through time in the "
                       f"decoder ({how}), the encoder outputs get every step's dkeys plus dh_0 "
                       f"at each row's last real token, then the encoder's BPTT.",
                       inputs={"src_ids": src_batch(r, [4, 2], 4, vocab=8),
                               "tgt_ids": tgt_batch(r, 2, 3, vocab=8)},
                       attributes=tf(kind),
                       params=s2s_params(r, kind, src_vocab=8, vocab=8, e=4, h=4, a=4),
                       cotangents={"logits": r.uniform((2, 3, 8))},
                       flags=["gradient", kind, "padding", "attention-state"])


CASES["seq2seq_attention"] = seq2seq_attention_cases
