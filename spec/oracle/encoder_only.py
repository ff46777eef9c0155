"""Encoder-only (BERT-style) model on token ids, inference (no dropout).

    e      = embed.table[ids] + pos.table[0..T-1]      (NOT scaled by sqrt(D), as in BERT)
    mask   = padding(ids)                             (B, 1, 1, T)  keys that are not pad
    hidden = Encoder(e, mask)                         (post-norm and GELU by default)
    logits = hidden lm_head.w + lm_head.b
"""

import numpy as np

from .core import add, sub
from .embedding import embedding, lm_head
from .encoder import encoder
from .learned_pe import learned_pe
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
