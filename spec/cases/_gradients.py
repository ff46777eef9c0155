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


CASES = {"softmax": softmax_cases, "sdpa": sdpa_cases, "layer_norm": layer_norm_cases,
         "rms_norm": rms_norm_cases, "feedforward": feedforward_cases,
         "cross_entropy": cross_entropy_cases, "residual": residual_cases}


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
