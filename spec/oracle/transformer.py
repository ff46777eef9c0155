"""The encoder-decoder Transformer on token ids (Vaswani et al. 2017), inference (no dropout).

    e_src  = src_embed.table[src_ids] * sqrt(D) + PE(0..S-1)         (sinusoidal)
    e_tgt  = tgt_embed.table[tgt_ids] * sqrt(D) + PE(0..T-1)
    m_src  = padding(src_ids)                     (B, 1, 1, S)   keys that are not pad
    m_self = padding(tgt_ids) & causal(T, T)      (B, 1, T, T)
    memory = Encoder(e_src, m_src)
    h      = Decoder(e_tgt, memory, m_self, m_src)
    logits = h lm_head.w + lm_head.b       or   h tgt_embed.table^T  when tied (no bias)
"""

import numpy as np

from .core import add, merge, mpa, prefixed, sub
from .decoder import decoder, decoder_vjp
from .embedding import embedding, lm_head, lm_head_vjp
from .encoder import encoder, encoder_vjp
from .encoder_only import embed_vjp
from .masks import combined_mask, padding_mask
from .sinusoidal_pe import sinusoidal_pe


def embed(ids, params, name, scale, pe):
    """table[ids] (* sqrt(D)) + pe, pe (T, D) broadcast over the batch."""
    return add(embedding(ids, scale=scale, params=sub(params, name))["y"], pe)


def scoped(prefix, result):
    return {f"{prefix}.{k}": v for k, v in result.items()}


def encode(src_ids, pad_id, num_layers, num_heads, norm, eps, activation, params):
    """(memory, source padding mask, intermediates) of the encoder half."""
    d = params["src_embed.table"].shape[1]
    e_src = embed(src_ids, params, "src_embed", True,
                  sinusoidal_pe(length=len(src_ids[0]), d_model=d)["pe"])
    m_src = padding_mask(src_ids, pad_id)["mask"]
    enc = encoder(e_src, m_src, num_layers=num_layers, num_heads=num_heads, norm=norm, eps=eps,
                  activation=activation, params=sub(params, "encoder"))
    memory = enc.pop("y")
    return memory, m_src, {"src_embed.output": e_src, **scoped("encoder", enc)}


def decode(tgt_ids, memory, m_src, pad_id, num_layers, num_heads, norm, eps, activation,
           tie_embeddings, params):
    """(logits, intermediates) of the decoder half and the LM head."""
    d = params["tgt_embed.table"].shape[1]
    t = len(tgt_ids[0])
    e_tgt = embed(tgt_ids, params, "tgt_embed", True, sinusoidal_pe(length=t, d_model=d)["pe"])
    m_self = combined_mask(tgt_ids, pad_id, t=t, num_heads=1, causal=True)["mask"]
    dec = decoder(e_tgt, memory, m_self, m_src, num_layers=num_layers, num_heads=num_heads,
                  norm=norm, eps=eps, activation=activation, params=sub(params, "decoder"))
    h = dec.pop("y")
    head = sub(params, "tgt_embed") if tie_embeddings else sub(params, "lm_head")
    logits = lm_head(h, tied=bool(tie_embeddings), params=head)["logits"]
    return logits, {"tgt_embed.output": e_tgt, **scoped("decoder", dec)}


def transformer(src_ids, tgt_ids, pad_id=0, num_layers=1, num_heads=1, norm="post", eps=1e-5,
                activation="relu", tie_embeddings=False, params=None):
    memory, m_src, inter = encode(src_ids, pad_id, num_layers, num_heads, norm, eps, activation,
                                  params)
    logits, inter2 = decode(tgt_ids, mpa(memory), m_src, pad_id, num_layers, num_heads, norm,
                            eps, activation, tie_embeddings, params)
    return {"logits": logits, **inter, **inter2}


def transformer_vjp(cot, src_ids, tgt_ids, pad_id=0, num_layers=1, num_heads=1, norm="post",
                    eps=1e-5, activation="relu", tie_embeddings=False, params=None):
    """logits = LMHead(Decoder(e_tgt, memory)), memory = Encoder(e_src):
    dh = LMHead^T dlogits; (de_tgt, dmemory) = Decoder^T dh; de_src = Encoder^T dmemory;
    tied: tgt_embed.table gets the LM head's gradient plus the embedding's."""

    cfg = (num_layers, num_heads, norm, eps, activation)
    memory, m_src, inter = encode(src_ids, pad_id, *cfg, params)
    _, inter2 = decode(tgt_ids, mpa(memory), m_src, pad_id, *cfg, tie_embeddings, params)
    m_self = combined_mask(tgt_ids, pad_id, t=np.asarray(tgt_ids).shape[1], num_heads=1,
                           causal=True)["mask"]
    h = decoder(inter2["tgt_embed.output"], memory, m_self, m_src, *cfg,
                sub(params, "decoder"))["y"]
    head = "tgt_embed" if tie_embeddings else "lm_head"
    gi, g_head = lm_head_vjp({"logits": cot["logits"]}, h, tied=bool(tie_embeddings),
                             params=sub(params, head))
    gd, g_dec = decoder_vjp({"y": gi["x"]}, inter2["tgt_embed.output"], memory, m_self, m_src,
                            *cfg, sub(params, "decoder"))
    ge, g_enc = encoder_vjp({"y": gd["memory"]}, inter["src_embed.output"], m_src, *cfg,
                            sub(params, "encoder"))
    return {}, merge(prefixed(head, g_head), prefixed("decoder", g_dec),
                      prefixed("encoder", g_enc),
                      embed_vjp(gd["x"], tgt_ids, params, "tgt_embed", True, False),
                      embed_vjp(ge["x"], src_ids, params, "src_embed", True, False))


VJPS = {"transformer": transformer_vjp}
