"""T5's encoder and decoder stacks (Raffel et al. 2020; transformers' T5Stack / T5Block,
Mesh TensorFlow's transformer with the "t5.1.0" / "t5.1.1" feed-forward), inference:

every sublayer pre-norm with RMSNorm (T5LayerNorm: no mean, no bias), residual added;
attention has no 1/sqrt(K) (scale 1), no biases; feed-forward without biases:
    relu:       F(n) = relu(n W_up) W_down                          (DenseReluDense)
    gated-gelu: F(n) = (gelu_tanh(n W_gate) * (n W_up)) W_down      (DenseGatedActDense)

t5_encoder, x (B, T, D), keep (B?, 1, T, T) from mask:
    P   = t5_bias(T, T, bidirectional, table = layers.0.attn.rel_bias.table)   once, (H, T, T)
    h  += A(RMSNorm(h; layers.i.attn_norm), same, P, keep)      for every layer i, the same P
    h  += F(RMSNorm(h; layers.i.ffn_norm))
    y   = RMSNorm(h; final_norm)
t5_decoder, x (B, T, D), memory (B, S, D):
    P   = t5_bias(T, T, causal buckets, table = layers.0.self_attn.rel_bias.table)   once
    h  += A(RMSNorm(h; self_norm), same, P, causal AND self_mask)
    h  += A(RMSNorm(h; cross_norm), memory, no bias, memory_mask)        (memory not normed)
    h  += F(RMSNorm(h; ffn_norm));   y = RMSNorm(h; final_norm)
A(a, m, P, keep) = concat_h sdpa(a W_q, m W_k, m W_v, keep, P, scale=1) W_o.
"""

import mpmath
import numpy as np

from .core import add, emap, linear_vjp, matmul, merge, mpa, prefixed, sub, zeros
from .embedding import embedding, embedding_vjp, lm_head, lm_head_vjp
from .gated_feedforward import gated_feedforward, gated_feedforward_vjp
from .llama import heads_of, merge_heads
from .masks import _causal, padding_mask
from .rms_norm import rms_norm, rms_norm_vjp
from .sdpa import sdpa, sdpa_vjp
from .t5_bias import t5_bias, t5_bias_vjp

TABLE = {"encoder": "layers.0.attn.rel_bias", "decoder": "layers.0.self_attn.rel_bias"}


def _relu(e):
    return e if e > 0 else mpmath.mpf(0)


def ffn(n, feed_forward, params):
    if feed_forward == "gated-gelu":
        return gated_feedforward(n, activation="gelu_tanh", params=params)["y"]
    return matmul(emap(_relu, matmul(n, mpa(params["w_up"]))), mpa(params["w_down"]))


def ffn_vjp(dy, n, feed_forward, params):
    """relu: u = n W_up, y = relu(u) W_down: dW_down = relu(u)^T dy, du = dy W_down^T [u > 0],
    dW_up = n^T du, dn = du W_up^T; gated-gelu: gated_feedforward's VJP."""
    if feed_forward == "gated-gelu":
        g, p = gated_feedforward_vjp({"y": dy}, n, activation="gelu_tanh", params=params)
        return g["x"], p
    u = matmul(n, mpa(params["w_up"]))
    da, dw_down, _ = linear_vjp(emap(_relu, u), params["w_down"], dy)
    du = da * emap(lambda e: 1 if e > 0 else 0, u)
    dn, dw_up, _ = linear_vjp(n, params["w_up"], du)
    return dn, {"w_up": dw_up, "w_down": dw_down}


def attention(a, m, bias, keep, heads, params):
    """concat_h sdpa(a W_q, m W_k, m W_v, keep, bias, scale=1) W_o: (B, T, D)."""
    w = {n: mpa(params[n]) for n in ("w_q", "w_k", "w_v", "w_o")}
    kw = w["w_q"].shape[1] // heads
    q, k, v = (heads_of(matmul(x, w[n]), heads, kw) for x, n in ((a, "w_q"), (m, "w_k"), (m, "w_v")))
    o = sdpa(q, k, v, mask=keep, bias=bias, scale=1)["output"]  # (B, H, T, K)
    return matmul(merge_heads(o), w["w_o"])


def attention_vjp(dy, a, m, bias, keep, heads, params):
    """dW_o = concat(O)^T dy; (dQ, dK, dV, dP) = sdpa^T; dW_q = a^T concat(dQ),
    da = concat(dQ) W_q^T; dW_k, dW_v and dm likewise from m. Returns (da, dm, dP, grads)."""
    w = {n: mpa(params[n]) for n in ("w_q", "w_k", "w_v", "w_o")}
    kw = w["w_q"].shape[1] // heads
    q, k, v = (heads_of(matmul(x, w[n]), heads, kw) for x, n in ((a, "w_q"), (m, "w_k"), (m, "w_v")))
    o = sdpa(q, k, v, mask=keep, bias=bias, scale=1)["output"]
    grads = {}
    d_cat, grads["w_o"], _ = linear_vjp(merge_heads(o), w["w_o"], dy)
    gi, _ = sdpa_vjp({"output": heads_of(d_cat, heads, kw)}, q, k, v, mask=keep, bias=bias, scale=1)
    da, grads["w_q"], _ = linear_vjp(a, w["w_q"], merge_heads(gi["q"]))
    dm1, grads["w_k"], _ = linear_vjp(m, w["w_k"], merge_heads(gi["k"]))
    dm2, grads["w_v"], _ = linear_vjp(m, w["w_v"], merge_heads(gi["v"]))
    return da, dm1 + dm2, gi.get("bias"), grads


def _keep(mask, shape4):
    return None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), shape4)


def _bias(kind, t, heads, num_buckets, max_distance, params):
    return t5_bias(t=t, s=t, bidirectional=kind == "encoder", num_buckets=num_buckets,
                   max_distance=max_distance, params=sub(params, TABLE[kind]))["bias"]


def _sublayers(kind, memory):
    """(norm, attention, memory or None for self, biased) per attention sublayer."""
    if kind == "encoder":
        return [("attn_norm", "attn", None, True)]
    return [("self_norm", "self_attn", None, True), ("cross_norm", "cross_attn", memory, False)]


def _forward(kind, x, memory, keeps, num_layers, num_heads, num_buckets, max_distance, eps,
             feed_forward, params):
    """(y, per-layer inputs [(h, normed...)], P): the stack, keeping what the VJP needs."""
    heads = int(num_heads)
    h = mpa(x)
    bias = _bias(kind, h.shape[1], heads, num_buckets, max_distance, params)
    saved = []
    for i in range(int(num_layers)):
        p = sub(params, f"layers.{i}")
        steps = []
        for (norm, name, mem, biased), keep in zip(_sublayers(kind, memory), keeps):
            n = rms_norm(h, eps=eps, params=sub(p, norm))["y"]
            steps.append(h)
            h = add(h, attention(n, n if mem is None else mpa(mem), bias if biased else None,
                                 keep, heads, sub(p, name)))
        steps.append(h)
        h = add(h, ffn(rms_norm(h, eps=eps, params=sub(p, "ffn_norm"))["y"], feed_forward,
                       sub(p, "ffn")))
        saved.append(steps)
    return h, saved, bias


def _backward(kind, dh, x, memory, keeps, num_layers, num_heads, num_buckets, max_distance, eps,
              feed_forward, params):
    """Every residual passes dh on and adds its branch's input gradient; dP sums over the
    layers (one table); the memory's gradient sums over the layers' cross-attentions."""
    heads = int(num_heads)
    y, saved, bias = _forward(kind, x, memory, keeps, num_layers, num_heads, num_buckets,
                              max_distance, eps, feed_forward, params)
    grads, dbias = [], zeros(bias.shape)
    dmem = None if memory is None else zeros(np.shape(memory))
    for i in reversed(range(int(num_layers))):
        p = sub(params, f"layers.{i}")
        steps = saved[i]
        n = rms_norm(steps[-1], eps=eps, params=sub(p, "ffn_norm"))["y"]
        dn, pf = ffn_vjp(dh, n, feed_forward, sub(p, "ffn"))
        gn, pn = rms_norm_vjp({"y": dn}, steps[-1], eps=eps, params=sub(p, "ffn_norm"))
        dh = dh + gn["x"]
        grads += [prefixed(f"layers.{i}.ffn", pf), prefixed(f"layers.{i}.ffn_norm", pn)]
        layer = list(zip(_sublayers(kind, memory), keeps, steps))
        for (norm, name, mem, biased), keep, h_in in reversed(layer):
            n = rms_norm(h_in, eps=eps, params=sub(p, norm))["y"]
            m = n if mem is None else mpa(mem)
            da, dm, db, pa = attention_vjp(dh, n, m, bias if biased else None, keep, heads, sub(p, name))
            if mem is None:
                da = da + dm
            else:
                dmem = dmem + dm
            if biased:
                dbias = dbias + db
            gn, pn = rms_norm_vjp({"y": da}, h_in, eps=eps, params=sub(p, norm))
            dh = dh + gn["x"]
            grads += [prefixed(f"layers.{i}.{name}", pa), prefixed(f"layers.{i}.{norm}", pn)]
    _, pt = t5_bias_vjp({"bias": dbias}, t=bias.shape[1], s=bias.shape[2],
                        bidirectional=kind == "encoder", num_buckets=num_buckets,
                        max_distance=max_distance, params=sub(params, TABLE[kind]))
    grads.append(prefixed(TABLE[kind], pt))
    return dh, dmem, grads


def _final(y, eps, params):
    return rms_norm(y, eps=eps, params=sub(params, "final_norm"))["y"]


def _enc_keeps(x, mask, num_heads):
    b, t = np.shape(x)[:2]
    return [_keep(mask, (b, int(num_heads), t, t))]


def _dec_keeps(x, memory, self_mask, memory_mask, num_heads):
    b, t = np.shape(x)[:2]
    s = np.shape(memory)[1]
    causal = np.broadcast_to(_causal(t, t), (b, int(num_heads), t, t))
    keep = causal if self_mask is None else np.logical_and(causal, _keep(self_mask, causal.shape))
    return [keep, _keep(memory_mask, (b, int(num_heads), t, s))]


def t5_encoder(x, mask=None, num_layers=1, num_heads=1, num_buckets=32, max_distance=128,
               eps=1e-6, feed_forward="relu", params=None):
    y, _, _ = _forward("encoder", x, None, _enc_keeps(x, mask, num_heads), num_layers, num_heads,
                       num_buckets, max_distance, eps, feed_forward, params)
    return {"y": _final(y, eps, params)}


def t5_decoder(x, memory, self_mask=None, memory_mask=None, num_layers=1, num_heads=1,
               num_buckets=32, max_distance=128, eps=1e-6, feed_forward="relu", params=None):
    keeps = _dec_keeps(x, memory, self_mask, memory_mask, num_heads)
    y, _, _ = _forward("decoder", x, memory, keeps, num_layers, num_heads, num_buckets,
                       max_distance, eps, feed_forward, params)
    return {"y": _final(y, eps, params)}


def _final_vjp(cot, kind, x, memory, keeps, attrs, params):
    y, _, _ = _forward(kind, x, memory, keeps, **attrs, params=params)
    gn, pn = rms_norm_vjp({"y": mpa(cot["y"])}, y, eps=attrs["eps"], params=sub(params, "final_norm"))
    dx, dmem, grads = _backward(kind, gn["x"], x, memory, keeps, **attrs, params=params)
    return dx, dmem, merge(prefixed("final_norm", pn), *grads)


def t5_encoder_vjp(cot, x, mask=None, num_layers=1, num_heads=1, num_buckets=32,
                   max_distance=128, eps=1e-6, feed_forward="relu", params=None):
    attrs = dict(num_layers=num_layers, num_heads=num_heads, num_buckets=num_buckets,
                 max_distance=max_distance, eps=eps, feed_forward=feed_forward)
    dx, _, grads = _final_vjp(cot, "encoder", x, None, _enc_keeps(x, mask, num_heads), attrs, params)
    return {"x": dx}, grads


def t5_decoder_vjp(cot, x, memory, self_mask=None, memory_mask=None, num_layers=1, num_heads=1,
                   num_buckets=32, max_distance=128, eps=1e-6, feed_forward="relu", params=None):
    attrs = dict(num_layers=num_layers, num_heads=num_heads, num_buckets=num_buckets,
                 max_distance=max_distance, eps=eps, feed_forward=feed_forward)
    keeps = _dec_keeps(x, memory, self_mask, memory_mask, num_heads)
    dx, dmem, grads = _final_vjp(cot, "decoder", x, memory, keeps, attrs, params)
    return {"x": dx, "memory": dmem}, grads


# -- t5_model: ids -> logits ---------------------------------------------------------------
#   e_src = shared.table[src_ids], e_tgt = shared.table[tgt_ids]   (no sqrt(D), no positions)
#   memory = t5_encoder(e_src, padding(src), encoder.*)
#   h      = t5_decoder(e_tgt, memory, causal only, padding(src), decoder.*)
#   logits = (h D^-0.5) shared.table^T  (tied, T5 1.0)   or   h lm_head.w  (untied, v1.1)


def _model_parts(src_ids, tgt_ids, pad_id, attrs, params):
    shared = sub(params, "shared")
    e_src = embedding(src_ids, scale=False, params=shared)["y"]
    e_tgt = embedding(tgt_ids, scale=False, params=shared)["y"]
    m_src = padding_mask(src_ids, pad_id)["mask"]  # (B, 1, 1, S)
    memory = t5_encoder(e_src, m_src, **attrs, params=sub(params, "encoder"))["y"]
    h = t5_decoder(e_tgt, memory, None, m_src, **attrs, params=sub(params, "decoder"))["y"]
    return e_src, e_tgt, m_src, memory, h


def _head_input(h, tie, d):
    return h * mpmath.power(d, mpmath.mpf(-0.5)) if tie else h


def _head_params(params, tie):
    return sub(params, "shared") if tie else sub(params, "lm_head")


def t5_model(src_ids, tgt_ids, pad_id=0, num_layers=1, num_heads=1, num_buckets=32,
             max_distance=128, eps=1e-6, feed_forward="relu", tie_embeddings=True, params=None):
    attrs = dict(num_layers=num_layers, num_heads=num_heads, num_buckets=num_buckets,
                 max_distance=max_distance, eps=eps, feed_forward=feed_forward)
    tie = bool(tie_embeddings)
    *_, memory, h = _model_parts(src_ids, tgt_ids, pad_id, attrs, params)
    d = h.shape[-1]
    return {"logits": lm_head(_head_input(h, tie, d), tied=tie,
                              params=_head_params(params, tie))["logits"]}


def t5_model_vjp(cot, src_ids, tgt_ids, pad_id=0, num_layers=1, num_heads=1, num_buckets=32,
                 max_distance=128, eps=1e-6, feed_forward="relu", tie_embeddings=True,
                 params=None):
    """dh = LMHead^T dlogits (* D^-0.5 when tied); (de_tgt, dmemory) = decoder^T dh;
    de_src = encoder^T dmemory; shared.table sums the two scatter-adds and, tied, the head's
    dlogits^T (h D^-0.5) (one table read three times)."""
    attrs = dict(num_layers=num_layers, num_heads=num_heads, num_buckets=num_buckets,
                 max_distance=max_distance, eps=eps, feed_forward=feed_forward)
    tie = bool(tie_embeddings)
    e_src, e_tgt, m_src, memory, h = _model_parts(src_ids, tgt_ids, pad_id, attrs, params)
    d = h.shape[-1]
    gi, g_head = lm_head_vjp({"logits": cot["logits"]}, _head_input(h, tie, d), tied=tie,
                             params=_head_params(params, tie))
    dh = _head_input(gi["x"], tie, d)
    g_dec, p_dec = t5_decoder_vjp({"y": dh}, e_tgt, memory, None, m_src, **attrs,
                                  params=sub(params, "decoder"))
    g_enc, p_enc = t5_encoder_vjp({"y": g_dec["memory"]}, e_src, m_src, **attrs,
                                  params=sub(params, "encoder"))
    shared = sub(params, "shared")
    _, g_tgt = embedding_vjp({"y": g_dec["x"]}, tgt_ids, scale=False, params=shared)
    _, g_src = embedding_vjp({"y": g_enc["x"]}, src_ids, scale=False, params=shared)
    return {}, merge(prefixed("shared" if tie else "lm_head", g_head), prefixed("shared", g_tgt),
                     prefixed("shared", g_src), prefixed("decoder", p_dec),
                     prefixed("encoder", p_enc))


VJPS = {"t5_encoder": t5_encoder_vjp, "t5_decoder": t5_decoder_vjp, "t5_model": t5_model_vjp}
