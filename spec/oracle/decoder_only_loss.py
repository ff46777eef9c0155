"""The loss of one training step of the decoder-only model (next-token prediction):

    logits = DecoderOnly(ids)                                        (B, T, L)
    loss   = CrossEntropy(logits, targets; ignore_index, label_smoothing), the mean over
             the N tokens whose target is not ignore_index

targets[b, t] is the id that follows position t (ids[b, t + 1]), ignore_index where there
is none (the last position, padding). Its gradient with respect to every parameter is
one training step's gradient. Intermediates: ``logits``.
"""

from .decoder_only import decoder_only, decoder_only_vjp
from .losses import cross_entropy, cross_entropy_vjp


def decoder_only_loss(ids, targets, pad_id=0, num_layers=1, num_heads=1, norm="pre", eps=1e-5,
                      activation="gelu", ignore_index=-100, label_smoothing=0.0, params=None):
    logits = decoder_only(ids, pad_id, num_layers, num_heads, norm, eps, activation,
                          params)["logits"]
    loss = cross_entropy(logits, targets, ignore_index, label_smoothing)["loss"]
    return {"loss": loss, "logits": logits}


def decoder_only_loss_vjp(cot, ids, targets, pad_id=0, num_layers=1, num_heads=1, norm="pre",
                          eps=1e-5, activation="gelu", ignore_index=-100, label_smoothing=0.0,
                          params=None):
    """loss = CE(DecoderOnly(ids), targets):  dlogits = CE^T dloss = dloss (p - q) / N on the
    counted tokens, then DecoderOnly^T dlogits (every parameter's training-step gradient)."""

    cfg = (pad_id, num_layers, num_heads, norm, eps, activation)
    logits = decoder_only(ids, *cfg, params)["logits"]
    gl, _ = cross_entropy_vjp({"loss": cot["loss"]}, logits, targets, ignore_index,
                              label_smoothing)
    return decoder_only_vjp({"logits": gl["logits"]}, ids, *cfg, params)


VJPS = {"decoder_only_loss": decoder_only_loss_vjp}
