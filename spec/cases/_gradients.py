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
         "cross_entropy": cross_entropy_cases}
CASES.update(GRAD2_CASES)


def gradient_cases(component: str) -> list:
    make = CASES.get(component)
    return [] if make is None else list(make(Rng(f"{component}/grad")))
