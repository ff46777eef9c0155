"""Converters between transformers' GPT-2 and the spec: ``GPT2Block`` <-> ``encoder_layer``
(pre-norm; the causal mask is GPT2Model's, passed in) and ``GPT2LMHeadModel`` <->
``decoder_only`` (spec/components/decoder_only.md, huggingface.md):

- ``transformer.wte`` (L, D) -> ``embed.table``; ``transformer.wpe`` (n_positions, D) ->
  ``pos.table`` (learned positions ``0..T-1``: GPT2Model's ``position_ids`` are an arange
  whatever the ``attention_mask``, as the spec's);
- ``transformer.h.<i>`` -> ``layers.<i>.*`` through the ``GPT2Block`` table of hf.py
  (``Conv1D`` stores W as (in, out): nothing is transposed; ``c_attn`` packs W_q, W_k, W_v);
- ``transformer.ln_f`` -> ``final_norm`` (pre-norm only: GPT-2 has no post-norm form);
- ``lm_head`` (``nn.Linear(D, L, bias=False)``): tied to ``wte`` when
  ``config.tie_word_embeddings`` (the default) -> ``tie_embeddings=True`` and no ``lm_head.*``
  parameter; untied -> ``lm_head.w`` = ``lm_head.weight``^T. It never has a bias, so an
  ``lm_head.b`` has no GPT2LMHeadModel and is refused.
- ``activation_function``: ``gelu_new`` (GPT-2's, the tanh GELU) -> ``gelu_tanh``; ``gelu``
  (erf), ``relu`` as named; to_hf writes ``gelu_new`` for ``gelu_tanh``.
``pad_id`` is not a GPT2Config field that the model reads (GPT-2 has no pad token): it is a
call-time argument of :func:`forward`, whose ``attention_mask`` is ``ids != pad_id``.
"""

from __future__ import annotations

import torch
from attnspec.spec.errors import ConfigError, DomainError, ParameterError
from transformers import GPT2Config
from transformers.models.gpt2.modeling_gpt2 import GPT2Block, GPT2LMHeadModel

from .._checks import params_of
from .hf_base import (
    _activation,
    _activation_to_hf,
    _check_attributes,
    _eps,
    _from_state,
    _heads,
    _load,
    _spec_params,
    _t,
    _to_state,
    _unsupported,
)

# attn.c_attn.{weight,bias} packs self_attn.{w,b}_{q,k,v}: see _gpt2_qkv.
GPT2 = [
    ("ln_1.weight", "norm1.gamma", False),
    ("ln_1.bias", "norm1.beta", False),
    ("attn.c_proj.weight", "self_attn.w_o", False),
    ("attn.c_proj.bias", "self_attn.b_o", False),
    ("ln_2.weight", "norm2.gamma", False),
    ("ln_2.bias", "norm2.beta", False),
    ("mlp.c_fc.weight", "ffn.w1", False),
    ("mlp.c_fc.bias", "ffn.b1", False),
    ("mlp.c_proj.weight", "ffn.w2", False),
    ("mlp.c_proj.bias", "ffn.b2", False),
]
_GPT2_PATHS = {spec for _, spec, _ in GPT2} | {f"self_attn.{n}_{x}" for n in "wb" for x in "qkv"}

SPEC_FUNCTION = {"GPT2LMHeadModel": "decoder_only"}
ALLOWED = {"num_layers", "num_heads", "norm", "eps", "activation", "tie_embeddings", "pad_id"}


# -- GPT2Block <-> encoder_layer (pre-norm, causal mask) ---------------------------------------


def _gpt2_config(block: GPT2Block) -> GPT2Config:
    c = block.attn.config
    for field, ok in (("add_cross_attention", False), ("scale_attn_weights", True),
                      ("scale_attn_by_inverse_layer_idx", False)):
        if bool(getattr(c, field)) != ok:
            _unsupported("GPT2Block", field, getattr(c, field),
                         "the spec scales scores by 1/sqrt(K) and has no cross-attention here")
    return c


def gpt2_block_from_hf(block: GPT2Block) -> tuple[dict, dict]:
    c = _gpt2_config(block)
    attributes = {"num_heads": c.n_head, "norm": "pre", "eps": float(c.layer_norm_epsilon),
                  "activation": _activation("GPT2Block", "activation_function",
                                            c.activation_function)}
    params = _from_state(block, GPT2)
    d = c.n_embd
    for name, packed in (("w", block.attn.c_attn.weight), ("b", block.attn.c_attn.bias)):
        for proj, part in zip("qkv", packed.detach().split(d, dim=-1)):
            params[f"self_attn.{name}_{proj}"] = _t(part)
    return attributes, params


def gpt2_block_to_hf(params, attributes: dict) -> GPT2Block:
    """Spec ``encoder_layer`` (norm="pre") -> ``GPT2Block`` (eager attention, dropout 0).
    GPT2Model makes it causal through the mask: pass ``mask=causal(T)`` to :func:`forward`."""
    who = "GPT2Block"
    _check_attributes(attributes, {"norm": "pre"}, {"num_heads", "norm", "eps", "activation"}, who)
    p = _spec_params(params, _GPT2_PATHS, who)
    w1 = p.require("ffn.w1", (None, None))
    d, f = w1.shape
    config = GPT2Config(n_embd=d, n_head=_heads(attributes, d, who), n_inner=f,
                        activation_function=_activation_to_hf(attributes, who),
                        layer_norm_epsilon=_eps(attributes, 1e-5, who), resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
    block = GPT2Block(config, layer_idx=0)
    like = block.state_dict()
    state = _to_state(p, GPT2, like)
    state["attn.c_attn.weight"] = torch.cat([p.require(f"self_attn.w_{n}", (d, d)) for n in "qkv"],
                                            dim=1)
    state["attn.c_attn.bias"] = torch.cat([_bias(p, f"self_attn.b_{n}", d, w1) for n in "qkv"])
    return _load(block, state, w1.dtype, w1.device)


def _bias(p, name, d, like):
    b = p.get(name, (d,))
    return torch.zeros(d, dtype=like.dtype, device=like.device) if b is None else b


# -- GPT2LMHeadModel <-> decoder_only (tie_embeddings) -------------------------------------------


def gpt2_lm_from_hf(model: GPT2LMHeadModel) -> tuple[dict, dict]:
    """(attributes, params) of ``decoder_only`` for a ``GPT2LMHeadModel``; ``pad_id`` is
    config.pad_token_id when set."""
    blocks = list(model.transformer.h)
    attributes, _ = gpt2_block_from_hf(blocks[0])
    attributes["num_layers"] = len(blocks)
    tied = bool(model.config.tie_word_embeddings)
    attributes["tie_embeddings"] = tied
    if model.config.pad_token_id is not None:
        attributes["pad_id"] = model.config.pad_token_id
    params = {"embed.table": _t(model.transformer.wte.weight),
              "pos.table": _t(model.transformer.wpe.weight)}
    for i, block in enumerate(blocks):
        params.update({f"layers.{i}.{k}": v for k, v in gpt2_block_from_hf(block)[1].items()})
    params["final_norm.gamma"] = _t(model.transformer.ln_f.weight)
    params["final_norm.beta"] = _t(model.transformer.ln_f.bias)
    if not tied:
        params["lm_head.w"] = _t(model.lm_head.weight.T)
    return attributes, params


def _known(n: int, tied: bool):
    layers = {str(i) for i in range(n)}

    def known(path: str) -> bool:
        if path in ("embed.table", "pos.table", "final_norm.gamma", "final_norm.beta"):
            return True
        if path == "lm_head.w":
            return not tied
        parts = path.split(".", 2)
        return len(parts) == 3 and parts[0] == "layers" and parts[1] in layers \
            and parts[2] in _GPT2_PATHS
    return known


def gpt2_lm_to_hf(params, attributes: dict) -> GPT2LMHeadModel:
    """Spec ``decoder_only`` (norm="pre") -> ``GPT2LMHeadModel`` (eager attention, dropout
    0): tied (``tie_embeddings=True``) or with an ``lm_head.w`` and no bias."""
    who = "GPT2LMHeadModel"
    _check_attributes(attributes, {"norm": "pre"}, ALLOWED, who)
    n = attributes.get("num_layers")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"{who}: num_layers must be a positive integer, got {n!r}")
    tied = attributes.get("tie_embeddings", False)
    if not isinstance(tied, bool):
        raise ConfigError(f"{who}: tie_embeddings must be True or False, got {tied!r}")
    given = params_of(params)
    if "lm_head.b" in given:
        raise ParameterError(f"{who}: {given.path('lm_head.b')!r} of shape "
                             f"{tuple(given.require('lm_head.b').shape)}: GPT-2's lm_head has "
                             f"no bias")
    p = _spec_params(params, _known(n, tied), who)
    table = p.require("embed.table", (None, None))
    vocab, d = table.shape
    positions = p.require("pos.table", (None, d))
    block_attrs = {k: attributes[k] for k in ("num_heads", "norm", "eps", "activation")
                   if k in attributes}
    first = gpt2_block_to_hf(p.scope("layers.0"), block_attrs)
    c = first.attn.config
    config = GPT2Config(vocab_size=vocab, n_positions=positions.shape[0], n_embd=d,
                        n_layer=n, n_head=c.n_head, n_inner=c.n_inner,
                        activation_function=c.activation_function,
                        layer_norm_epsilon=c.layer_norm_epsilon, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
                        tie_word_embeddings=tied, attn_implementation="eager")
    model = GPT2LMHeadModel(config)
    state = {"transformer.wte.weight": table, "transformer.wpe.weight": positions,
             "transformer.ln_f.weight": p.require("final_norm.gamma", (d,)),
             "transformer.ln_f.bias": p.require("final_norm.beta", (d,)),
             "lm_head.weight": table if tied else p.require("lm_head.w", (d, vocab)).T}
    for i in range(n):
        block = gpt2_block_to_hf(p.scope(f"layers.{i}"), block_attrs).state_dict()
        state.update({f"transformer.h.{i}.{k}": v for k, v in block.items()})
    model = _load(model, state, table.dtype, table.device)
    if tied and model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        raise ConfigError(f"{who}: transformers did not tie lm_head to wte")  # pragma: no cover
    return model


def forward(model: GPT2LMHeadModel, ids: torch.Tensor, pad_id: int | None) -> torch.Tensor:
    """The logits (B, T, L) of ``decoder_only`` on ``ids``: ``attention_mask = ids != pad_id``
    (GPT2Model adds the causal mask and the positions 0..T-1 itself)."""
    n_positions = model.config.n_positions
    if ids.shape[1] > n_positions:
        raise DomainError(f"GPT2LMHeadModel: T = {ids.shape[1]} positions, wpe (pos.table) has "
                          f"{n_positions} rows")
    keep = torch.ones_like(ids) if pad_id is None else (ids != pad_id).long()
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=keep).logits
