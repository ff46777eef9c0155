"""Mixture-of-experts decoder layers and a DeepSeek-V3-style model (spec/components/
moe_layers.md), written once over each backend's llama attention, mla, moe, rms_norm and
gated_feedforward:

- ``mixtral_layer``: Mixtral / Qwen2-MoE: pre-RMSNorm, the Llama grouped-query attention with
  RoPE "half" (optional sliding window, optional q/k/v biases), pre-RMSNorm, ``moe`` (softmax
  router, top-k, renormalised or not, an optional sigmoid-gated shared expert);
- ``deepseek_layer``: DeepSeek-V3: pre-RMSNorm, ``mla``, pre-RMSNorm, then a dense SwiGLU
  (``ffn.*``) or ``moe`` (``moe.*``: sigmoid scoring, correction bias, groups, scaling factor,
  ungated shared experts); which one is read from the parameters;
- ``deepseek_decoder_only``: embedding, ``first_k_dense_replace`` dense layers then MoE
  layers, the final RMSNorm and the untied head.

``moe`` takes tokens (N, D): the layers pass the (B, T, D) rows flattened b-major (token
b T + t) and fold the result back.
"""

from __future__ import annotations

from attnspec.spec.errors import ConfigError, ParameterError

from .. import _checks as check
from .models import Models


class MoeLayers(Models):
    EXPORTS = ("mixtral_layer", "deepseek_layer", "deepseek_decoder_only")

    # -- the shared pieces ----------------------------------------------------------------

    def moe_tokens(self, h, top_k, router: dict, p):
        """moe over the rows of h (B, T, D), flattened to (B T, D) and folded back."""
        ops = self.ops
        b, t = check.shape(h)[:2]
        flat = ops.concat(ops.unstack(h, 0), axis=0)  # (B T, D), token b T + t
        y, _ = self.k.moe(flat, top_k=top_k, params=p, **router)  # (B T, D)
        return ops.stack([y[i * t:(i + 1) * t] for i in range(b)], axis=0)  # (B, T, D)

    def ffn_or_moe(self, h, top_k, router: dict, p, who: str = "deepseek_layer"):
        """The second sublayer on the normed h: moe (``moe.*`` given) or the dense SwiGLU
        (``ffn.*``); both, or neither, is a ParameterError."""
        moe, dense = "moe.router.w" in p, "ffn.w_gate" in p
        if moe and dense:
            raise ParameterError(f"{who}: both {p.path('moe.router.w')!r} and "
                                 f"{p.path('ffn.w_gate')!r} given: a layer's FFN is dense "
                                 f"(ffn.*) or a mixture of experts (moe.*), not both")
        if not moe:
            p.require("ffn.w_gate")  # neither: names the dense FFN's first parameter
            return self.k.gated_feedforward(h, activation="silu", params=p.scope("ffn"))
        if top_k is None:
            raise ConfigError(f"{who}: top_k is None but the layer is a mixture of experts "
                              f"({p.path('moe.router.w')!r} given): top_k is required")
        return self.moe_tokens(h, top_k, router, p.scope("moe"))

    # -- Mixtral / Qwen2-MoE ----------------------------------------------------------------

    def mixtral_layer(self, x, mask=None, *, num_heads, top_k, num_kv_heads=None, eps=1e-6,
                      rope_base=10000.0, window=None, offset=0, attention_bias=False,
                      renormalize=True, params):
        """r1 = x + W_o Attn(RoPE(n1 W_q), RoPE(n1 W_k), n1 W_v), n1 = RMSNorm(x) (llama_layer's
        attention: GQA, causal within window, RoPE "half" at offset.., biases with
        attention_bias); y = r1 + moe(RMSNorm(r1)) over the tokens, softmax router, top_k,
        renormalize (Mixtral: True; Qwen2-MoE: norm_topk_prob), shared expert if given."""
        x = self.ops.floating("x", x)
        b, t, _ = check.rank("x", x, min_rank=3, max_rank=3)
        heads, kv = self.llama_heads(num_heads, num_kv_heads)
        window = self.llama_window(window)
        offset = check.integer("offset", offset, lo=0)
        top_k = check.integer("top_k", top_k, lo=1)
        keep = self.llama_keep(mask, b, t, t, window, x)  # (B?, 1, T, T)
        bias = check.flag("attention_bias", attention_bias)
        p = check.params_of(params)
        n1 = self.k.rms_norm(x, eps=eps, params=p.scope("attn_norm"))
        a, _ = self.llama_attention(n1, keep, heads, kv, rope_base, offset, p.scope("attn"),
                                    None, bias=bias)
        r1 = x + a
        n2 = self.k.rms_norm(r1, eps=eps, params=p.scope("ffn_norm"))
        p.require("moe.router.w")
        return r1 + self.moe_tokens(n2, top_k, {"renormalize": renormalize}, p.scope("moe"))

    # -- DeepSeek-V3 ------------------------------------------------------------------------

    def deepseek_layer(self, x, mask=None, *, num_heads, qk_nope_head_dim, qk_rope_head_dim,
                       v_head_dim, top_k=None, eps=1e-6, rope_base=10000.0,
                       rope_convention="interleaved", yarn_factor=1.0, mscale_all_dim=0.0,
                       offset=0, scoring="sigmoid", renormalize=True, n_group=1, topk_group=1,
                       routed_scaling_factor=1.0, rope_scaling=None, group_score="sum_top2",
                       params):
        """r1 = x + mla(RMSNorm(x)) (causal, ANDed with mask); y = r1 + F(RMSNorm(r1)), F the
        dense SwiGLU (ffn.*) or moe (moe.*) with the router attributes; eps is every RMSNorm's
        (the layer's two and mla's latent ones); rope_scaling goes to mla as it is."""
        x = self.ops.floating("x", x)
        check.rank("x", x, min_rank=3, max_rank=3)
        if top_k is not None:
            top_k = check.integer("top_k", top_k, lo=1)
        p = check.params_of(params)
        n1 = self.k.rms_norm(x, eps=eps, params=p.scope("attn_norm"))
        a = self.k.mla(n1, mask, num_heads=num_heads, qk_nope_head_dim=qk_nope_head_dim,
                       qk_rope_head_dim=qk_rope_head_dim, v_head_dim=v_head_dim, eps=eps,
                       rope_base=rope_base, rope_convention=rope_convention,
                       yarn_factor=yarn_factor, mscale_all_dim=mscale_all_dim, offset=offset,
                       **({} if rope_scaling is None else {"rope_scaling": rope_scaling}),
                       params=p.scope("attn"))
        r1 = x + a
        n2 = self.k.rms_norm(r1, eps=eps, params=p.scope("ffn_norm"))
        router = {"scoring": scoring, "renormalize": renormalize, "n_group": n_group,
                  "topk_group": topk_group, "routed_scaling_factor": routed_scaling_factor,
                  **({} if group_score == "sum_top2" else {"group_score": group_score})}
        return r1 + self.ffn_or_moe(n2, top_k, router, p)

    def deepseek_decoder_only(self, ids, *, pad_id, num_layers, first_k_dense_replace,
                              num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
                              top_k=None, eps=1e-6, rope_base=10000.0,
                              rope_convention="interleaved", yarn_factor=1.0,
                              mscale_all_dim=0.0, scoring="sigmoid", renormalize=True,
                              n_group=1, topk_group=1, routed_scaling_factor=1.0,
                              rope_scaling=None, group_score="sum_top2", params):
        """h_0 = E[ids] (no positions, no scale); h_{i+1} = deepseek_layer_i(h_i, pad(ids)),
        layers 0..first_k_dense_replace-1 dense (ffn.*), the rest MoE (moe.*);
        logits = RMSNorm(h_N) W_lm (no bias); rope_scaling goes to every layer's mla."""
        p = check.params_of(params)
        ids, pad_id = self._model_ids(ids, pad_id, p)
        n = check.integer("num_layers", num_layers, lo=1)
        dense = check.integer("first_k_dense_replace", first_k_dense_replace, lo=0, hi=n)
        h = self.k.embedding(ids, scale=False, params=p.scope("embed"))  # (B, T, D)
        pad = self.k.padding_mask(ids, pad_id=pad_id)  # (B, 1, 1, T)
        for i in range(n):
            q = p.scope(f"layers.{i}")
            if i < dense and "moe.router.w" in q:
                raise ParameterError(f"{q.path('moe.router.w')!r} given for layer {i} < "
                                     f"first_k_dense_replace={dense}: that layer is dense "
                                     f"(ffn.*)")
            if i >= dense:
                q.require("moe.router.w")
            h = self.k.deepseek_layer(
                h, pad, num_heads=num_heads, qk_nope_head_dim=qk_nope_head_dim,
                qk_rope_head_dim=qk_rope_head_dim, v_head_dim=v_head_dim, top_k=top_k, eps=eps,
                rope_base=rope_base, rope_convention=rope_convention, yarn_factor=yarn_factor,
                mscale_all_dim=mscale_all_dim, offset=0, scoring=scoring,
                renormalize=renormalize, n_group=n_group, topk_group=topk_group,
                routed_scaling_factor=routed_scaling_factor,
                **({} if rope_scaling is None else {"rope_scaling": rope_scaling}),
                **({} if group_score == "sum_top2" else {"group_score": group_score}), params=q)
        return self.llama_head(h, eps, p)
