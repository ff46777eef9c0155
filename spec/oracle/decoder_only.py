"""Decoder-only (GPT-style) language model on token ids, inference (no dropout).

    e      = embed.table[ids] + pos.table[0..T-1]      (unscaled, as GPT-2)
    mask   = padding(ids) & causal(T, T)              (B, 1, T, T)
    h      = N encoder layers (self-attention + FFN, no cross-attention) under that mask,
             parameters layers.<i>.*; pre-norm and GELU by default, then LN_final (final_norm.*)
    logits = h lm_head.w + lm_head.b      or   h embed.table^T  when tie_embeddings (GPT-2:
             no bias, no lm_head.* parameter)
"""

import numpy as np

from .core import merge, prefixed, sub
from .embedding import lm_head, lm_head_vjp
from .encoder import encoder, encoder_vjp
from .encoder_only import embed_learned, embed_vjp
from .masks import combined_mask


def _head(params, tie_embeddings):
    return sub(params, "embed") if tie_embeddings else sub(params, "lm_head")


def decoder_only(ids, pad_id=0, num_layers=1, num_heads=1, norm="pre", eps=1e-5,
                 activation="gelu", params=None, tie_embeddings=False):
    e = embed_learned(ids, params)
    t = np.asarray(ids).shape[1]
    mask = combined_mask(ids, pad_id, t=t, num_heads=1, causal=True)["mask"]
    stack = encoder(e, mask, num_layers=num_layers, num_heads=num_heads, norm=norm, eps=eps,
                    activation=activation, params=params)
    h = stack.pop("y")
    logits = lm_head(h, tied=bool(tie_embeddings), params=_head(params, tie_embeddings))["logits"]
    return {"logits": logits, "embed.output": e, **stack}


def decoder_only_vjp(cot, ids, pad_id=0, num_layers=1, num_heads=1, norm="pre", eps=1e-5,
                     activation="gelu", params=None, tie_embeddings=False):
    """logits = LMHead(Stack(e, pad & causal)):  dh = LMHead^T dlogits, de = Stack^T dh,
    then the token and position tables. Tied: embed.table gets the head's dlogits^T h
    plus the embedding's scatter-add (it is read twice)."""

    e = embed_learned(ids, params)
    mask = combined_mask(ids, pad_id, t=np.asarray(ids).shape[1], num_heads=1, causal=True)
    mask = mask["mask"]
    h = encoder(e, mask, num_layers, num_heads, norm, eps, activation, params)["y"]
    tied = bool(tie_embeddings)
    gi, g = lm_head_vjp({"logits": cot["logits"]}, h, tied=tied, params=_head(params, tied))
    gs, g_stack = encoder_vjp({"y": gi["x"]}, e, mask, num_layers, num_heads, norm, eps,
                              activation, params)
    return {}, merge(prefixed("embed" if tied else "lm_head", g), g_stack,
                      embed_vjp(gs["x"], ids, params, "embed", False, True))


VJPS = {"decoder_only": decoder_only_vjp}
