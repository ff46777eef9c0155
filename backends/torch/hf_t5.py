"""Converter from transformers' ``T5Stack`` (encoder or decoder) to the spec's
``t5_encoder`` / ``t5_decoder`` (spec/components/t5.md, huggingface.md):

- ``nn.Linear`` stores W as (out, in): every weight is transposed; head h owns rows
  ``h*d_kv:(h+1)*d_kv`` of q, k, v (the spec's columns);
- only ``block.0``'s self-attention owns ``relative_attention_bias`` (N, H): it becomes
  ``layers.0.<attn>.rel_bias.table`` as it is (already (num_buckets, H));
- ``feed_forward_proj``: ``relu`` -> ``wi``, ``wo`` = ``w_up``, ``w_down``;
  ``gated-gelu`` -> ``wi_0`` (gated), ``wi_1``, ``wo`` = ``w_gate``, ``w_up``, ``w_down``;
  any other activation is refused.
The stack's ``embed_tokens`` is not part of the spec function (call it with inputs_embeds).
"""

from __future__ import annotations

from attnspec.spec.errors import ConfigError

FEED_FORWARD = {("relu", False): "relu", ("gelu_new", True): "gated-gelu"}
FFN = {"relu": [("wi", "w_up"), ("wo", "w_down")],
       "gated-gelu": [("wi_0", "w_gate"), ("wi_1", "w_up"), ("wo", "w_down")]}


def _feed_forward(config) -> str:
    key = (config.dense_act_fn, bool(config.is_gated_act))
    if key not in FEED_FORWARD:
        raise ConfigError(f"T5Config.feed_forward_proj={config.feed_forward_proj!r}: the spec's t5 "
                          f"has relu and gated-gelu (gelu_new) only")
    return FEED_FORWARD[key]


def _attention(state, hf: str, spec: str) -> dict:
    return {f"{spec}.{w}": state[f"{hf}.{n}.weight"].T for n, w in
            (("q", "w_q"), ("k", "w_k"), ("v", "w_v"), ("o", "w_o"))}


def t5_stack_from_hf(stack) -> tuple[str, dict, dict]:
    """(spec function, attributes, params {canonical path: tensor}) of a ``T5Stack``."""
    config, state = stack.config, stack.state_dict()
    ff = _feed_forward(config)
    kind = "t5_decoder" if config.is_decoder else "t5_encoder"
    sub = ([("SelfAttention", "self_attn", "self_norm"), ("EncDecAttention", "cross_attn", "cross_norm")]
           if config.is_decoder else [("SelfAttention", "attn", "attn_norm")])
    p = {}
    for i in range(len(stack.block)):
        for j, (hf, spec, norm) in enumerate(sub):
            p.update(_attention(state, f"block.{i}.layer.{j}.{hf}", f"layers.{i}.{spec}"))
            p[f"layers.{i}.{norm}.gamma"] = state[f"block.{i}.layer.{j}.layer_norm.weight"]
        last = f"block.{i}.layer.{len(sub)}"
        p[f"layers.{i}.ffn_norm.gamma"] = state[f"{last}.layer_norm.weight"]
        p.update({f"layers.{i}.ffn.{w}": state[f"{last}.DenseReluDense.{n}.weight"].T
                  for n, w in FFN[ff]})
    p[f"layers.0.{sub[0][1]}.rel_bias.table"] = \
        state["block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
    p["final_norm.gamma"] = state["final_layer_norm.weight"]
    attributes = {"num_layers": len(stack.block), "num_heads": config.num_heads,
                  "num_buckets": config.relative_attention_num_buckets,
                  "max_distance": config.relative_attention_max_distance,
                  "eps": config.layer_norm_epsilon, "feed_forward": ff}
    return kind, attributes, {k: v.detach().contiguous() for k, v in p.items()}
