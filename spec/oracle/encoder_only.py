"""Encoder-only (BERT-style) model on token ids, inference (no dropout).

    e      = embed.table[ids] + pos.table[0..T-1]      (NOT scaled by sqrt(D), as in BERT)
    mask   = padding(ids)                             (B, 1, 1, T)  keys that are not pad
    hidden = Encoder(e, mask)                         (post-norm and GELU by default)
    logits = hidden lm_head.w + lm_head.b
"""

import numpy as np

from .core import add, fsum_axes, merge, mpa, prefixed, sub, zeros
from .embedding import embedding, embedding_vjp, lm_head, lm_head_vjp
from .encoder import encoder, encoder_vjp
from .learned_pe import learned_pe, learned_pe_vjp
from .masks import padding_mask


def embed_learned(ids, params):
    """table[ids] + pos.table[0..T-1], unscaled."""
    t = np.asarray(ids).shape[1]
    pe = learned_pe(np.arange(t), params=sub(params, "pos"))["pe"]  # (T, D)
    return add(embedding(ids, scale=False, params=sub(params, "embed"))["y"], pe)


def encoder_only(ids, pad_id=0, num_layers=1, num_heads=1, norm="post", eps=1e-5,
                 activation="gelu", params=None):
    e = embed_learned(ids, params)
    enc = encoder(e, padding_mask(ids, pad_id)["mask"], num_layers=num_layers,
                  num_heads=num_heads, norm=norm, eps=eps, activation=activation,
                  params=sub(params, "encoder"))
    hidden = enc.pop("y")
    logits = lm_head(hidden, tied=False, params=sub(params, "lm_head"))["logits"]
    return {"hidden": hidden, "logits": logits, "embed.output": e,
            **{f"encoder.{k}": v for k, v in enc.items()}}


def embed_vjp(de, ids, params, name, scale, learned: bool):
    """e = name.table[ids] (* sqrt(D)) + PE: dtable from de; with learned positions,
    dpos.table[t] = sum over the batch of de[:, t]."""

    _, g = embedding_vjp({"y": de}, ids, scale=scale, params=sub(params, name))
    grads = prefixed(name, g)
    if learned:
        t = np.asarray(ids).shape[1]
        _, gp = learned_pe_vjp({"pe": fsum_axes(de, (0,))}, np.arange(t), sub(params, "pos"))
        grads = merge(grads, prefixed("pos", gp))
    return grads


def padding_of(ids, pad_id):
    return padding_mask(ids, pad_id)["mask"]


def encoder_only_vjp(cot, ids, pad_id=0, num_layers=1, num_heads=1, norm="post", eps=1e-5,
                     activation="gelu", params=None):
    """hidden = Encoder(e), logits = LMHead(hidden):
    dhidden = (its cotangent) + LMHead^T dlogits, de = Encoder^T dhidden, then the tables."""

    fwd = encoder_only(ids, pad_id, num_layers, num_heads, norm, eps, activation, params)
    dh = zeros(fwd["hidden"].shape) if "hidden" not in cot else mpa(cot["hidden"])
    dlogits = mpa(cot["logits"]) if "logits" in cot else zeros(fwd["logits"].shape)
    gi, g = lm_head_vjp({"logits": dlogits}, fwd["hidden"], params=sub(params, "lm_head"))
    dh, grads = dh + gi["x"], prefixed("lm_head", g)
    gi, g = encoder_vjp({"y": dh}, fwd["embed.output"], padding_of(ids, pad_id), num_layers,
                        num_heads, norm, eps, activation, sub(params, "encoder"))
    return {}, merge(grads, prefixed("encoder", g),
                      embed_vjp(gi["x"], ids, params, "embed", False, True))


VJPS = {"encoder_only": encoder_only_vjp}
