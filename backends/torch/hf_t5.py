"""Converters between transformers' ``T5Stack`` (encoder or decoder) / ``T5Block`` and the
spec's ``t5_encoder`` / ``t5_decoder`` (spec/components/t5.md, huggingface.md), both ways:

- ``nn.Linear`` stores W as (out, in): every weight is transposed; head h owns rows
  ``h*d_kv:(h+1)*d_kv`` of q, k, v (the spec's columns);
- only ``block.0``'s self-attention owns ``relative_attention_bias`` (N, H): it becomes
  ``layers.0.<attn>.rel_bias.table`` as it is (already (num_buckets, H));
- ``feed_forward_proj``: ``relu`` -> ``wi``, ``wo`` = ``w_up``, ``w_down``;
  ``gated-gelu`` -> ``wi_0`` (gated), ``wi_1``, ``wo`` = ``w_gate``, ``w_up``, ``w_down``;
  any other activation is refused.
``T5ForConditionalGeneration`` is ``t5_model``: ``shared.weight`` -> ``shared.table``, the
two stacks under ``encoder.`` / ``decoder.``, ``lm_head.weight``ᵀ -> ``lm_head.w`` when untied.
transformers 5 ties ``lm_head.weight`` to ``shared.weight`` always and reads the old
``tie_word_embeddings=False`` as ``scale_decoder_outputs=False`` (no D^-0.5): the spec's
``tie_embeddings`` is ``scale_decoder_outputs``, and an untied model gets its own
``lm_head.weight`` here (the tie broken after loading).
The stack's ``embed_tokens`` is not part of the spec function (call it with inputs_embeds;
to_hf leaves a zero (1, D) table there).

A ``T5Block`` is one layer: its parameters are those of ``layers.<i>.*`` of the stack (the
block that owns ``relative_attention_bias`` adds ``<attn>.rel_bias.table``).
:func:`forward_block` calls it as the stack does: the first block computes the position bias
from its table and returns it, every later block is given it (``position_bias``); the
stack's ``y`` is ``final_norm`` of the last block's output.
"""

from __future__ import annotations

import torch
from attnspec.spec.errors import ConfigError, DTypeError, ParameterError, ShapeError
from transformers import T5Config
from transformers.models.t5.modeling_t5 import T5Block, T5ForConditionalGeneration, T5Stack

from .._checks import flag, params_of
from .hf_base import _check_attributes, _eps, _load, _spec_params, additive_mask

SPEC_FUNCTION = {"T5Stack": "t5_encoder", "T5Block": "t5_encoder",  # t5_decoder if is_decoder
                 "T5ForConditionalGeneration": "t5_model"}
FEED_FORWARD = {("relu", False): "relu", ("gelu_new", True): "gated-gelu"}
FFN = {"relu": [("wi", "w_up"), ("wo", "w_down")],
       "gated-gelu": [("wi_0", "w_gate"), ("wi_1", "w_up"), ("wo", "w_down")]}


def _feed_forward(config) -> str:
    key = (config.dense_act_fn, bool(config.is_gated_act))
    if key not in FEED_FORWARD:
        raise ConfigError(f"T5Config.feed_forward_proj={config.feed_forward_proj!r}: the spec's t5 "
                          f"has relu and gated-gelu (gelu_new) only")
    return FEED_FORWARD[key]


def _sublayers(decoder: bool) -> list:
    """(HF attention name, spec attention scope, spec norm scope) of layer.<j> in a block."""
    return ([("SelfAttention", "self_attn", "self_norm"), ("EncDecAttention", "cross_attn", "cross_norm")]
            if decoder else [("SelfAttention", "attn", "attn_norm")])


def _block_state_table(decoder: bool, feed_forward: str, has_bias: bool) -> list:
    """(block state_dict name, spec path within the layer, transposed) for one T5Block."""
    table = []
    sub = _sublayers(decoder)
    for j, (hf, spec, norm) in enumerate(sub):
        table += [(f"layer.{j}.{hf}.{n}.weight", f"{spec}.{w}", True)
                  for n, w in (("q", "w_q"), ("k", "w_k"), ("v", "w_v"), ("o", "w_o"))]
        table.append((f"layer.{j}.layer_norm.weight", f"{norm}.gamma", False))
    last = f"layer.{len(sub)}"
    table.append((f"{last}.layer_norm.weight", "ffn_norm.gamma", False))
    table += [(f"{last}.DenseReluDense.{n}.weight", f"ffn.{w}", True) for n, w in FFN[feed_forward]]
    if has_bias:
        table.append(("layer.0.SelfAttention.relative_attention_bias.weight",
                      f"{sub[0][1]}.rel_bias.table", False))
    return table


def _attributes(config, num_layers: int) -> dict:
    return {"num_layers": num_layers, "num_heads": config.num_heads,
            "num_buckets": config.relative_attention_num_buckets,
            "max_distance": config.relative_attention_max_distance,
            "eps": config.layer_norm_epsilon, "feed_forward": _feed_forward(config)}


def t5_block_from_hf(block: T5Block) -> tuple[dict, dict]:
    """(attributes, params) of one ``T5Block``: params are the spec's ``layers.<i>.*`` paths
    without the prefix (``attn.w_q``... or ``self_attn.*``, ``cross_attn.*``), with
    ``<attn>.rel_bias.table`` when the block owns the table; attributes those of a one-layer
    stack (the function is t5_decoder when ``config.is_decoder``)."""
    config = block.layer[0].SelfAttention.config
    has_bias = block.layer[0].SelfAttention.has_relative_attention_bias
    state = block.state_dict()
    table = _block_state_table(config.is_decoder, _feed_forward(config), has_bias)
    params = {spec: (state[hf].T if t else state[hf]).detach().contiguous()
              for hf, spec, t in table}
    return _attributes(config, 1), params


def t5_stack_from_hf(stack) -> tuple[str, dict, dict]:
    """(spec function, attributes, params {canonical path: tensor}) of a ``T5Stack``."""
    config = stack.config
    kind = "t5_decoder" if config.is_decoder else "t5_encoder"
    p = {}
    for i, block in enumerate(stack.block):
        p.update({f"layers.{i}.{k}": v for k, v in t5_block_from_hf(block)[1].items()})
    p["final_norm.gamma"] = stack.final_layer_norm.weight.detach().clone()
    return kind, _attributes(config, len(stack.block)), p


def is_t5_stack(p) -> bool:
    """t5_encoder / t5_decoder parameters: layer 0 owns the position-bias table."""
    return any(k in p for k in ("layers.0.attn.rel_bias.table", "layers.0.self_attn.rel_bias.table"))


# -- to_hf: spec parameters -> T5Stack / T5Block ------------------------------------------------

ALLOWED = {"num_layers", "num_heads", "num_buckets", "max_distance", "eps", "feed_forward"}


def _config(p, attributes: dict, decoder: bool, n: int, who: str) -> T5Config:
    _check_attributes(attributes, {}, ALLOWED, who)
    h = attributes.get("num_heads")
    if isinstance(h, bool) or not isinstance(h, int) or h < 1:
        raise ConfigError(f"{who}: num_heads must be a positive integer, got {h!r}")
    attn = "self_attn" if decoder else "attn"
    w_q = p.require(f"{attn}.w_q", (None, None))
    d, hk = w_q.shape
    if hk % h:
        raise ConfigError(f"{who}: num_heads={h} does not divide {p.path(attn + '.w_q')}'s "
                          f"width {hk}")
    f = p.require("ffn.w_down", (None, d)).shape[0]
    return T5Config(d_model=d, d_kv=hk // h, num_heads=h, d_ff=f, num_layers=n,
                    num_decoder_layers=n,
                    relative_attention_num_buckets=attributes.get("num_buckets", 32),
                    relative_attention_max_distance=attributes.get("max_distance", 128),
                    layer_norm_epsilon=_eps(attributes, 1e-6, who),
                    feed_forward_proj=attributes.get("feed_forward", "relu"),
                    dropout_rate=0.0, vocab_size=1, eos_token_id=None, is_decoder=decoder,
                    is_encoder_decoder=False, use_cache=False, attn_implementation="eager")


def _feed_forward_attribute(attributes: dict, who: str) -> str:
    ff = attributes.get("feed_forward", "relu")
    if ff not in FFN:
        raise ConfigError(f"{who}: feed_forward must be one of {sorted(FFN)}, got {ff!r}")
    return ff


def _layer_paths(decoder: bool, ff: str, has_bias: bool) -> set:
    return {spec for _, spec, _ in _block_state_table(decoder, ff, has_bias)}


def _block_state(p, decoder: bool, ff: str, has_bias: bool, like: dict) -> dict:
    state = {}
    for hf, spec, transposed in _block_state_table(decoder, ff, has_bias):
        w = p.require(spec, tuple(like[hf].T.shape if transposed else like[hf].shape))
        state[hf] = w.T if transposed else w
    return state


def t5_block_to_hf(params, attributes: dict, *, decoder: bool = False,
                   layer_idx: int = 0) -> T5Block:
    """One layer's spec parameters (``layers.<i>.*`` without the prefix) -> ``T5Block``
    (eager attention, dropout 0). The block owns the position-bias table when its
    parameters hold ``<attn>.rel_bias.table`` (stack layer 0)."""
    who = "T5Block"
    attn = "self_attn" if decoder else "attn"
    has_bias = f"{attn}.rel_bias.table" in params_of(params)
    ff = _feed_forward_attribute(attributes, who)
    p = _spec_params(params, _layer_paths(decoder, ff, has_bias), who)
    config = _config(p, {**attributes, "num_layers": 1}, decoder, 1, who)
    block = T5Block(config, has_relative_attention_bias=has_bias, layer_idx=layer_idx)
    w = p.require(f"{attn}.w_q")
    return _load(block, _block_state(p, decoder, ff, has_bias, block.state_dict()), w.dtype,
                 w.device)


def t5_stack_to_hf(params, attributes: dict, decoder: bool | None = None) -> T5Stack:
    """Spec ``t5_encoder`` / ``t5_decoder`` parameters -> ``T5Stack`` (eager attention,
    dropout 0; ``is_decoder`` from the parameters' names unless given: ``layers.0.self_attn.*``
    is a decoder's). Only layer 0 may hold a ``rel_bias.table`` (T5 computes the bias once)."""
    who = "T5Stack"
    if decoder is None:
        decoder = "layers.0.self_attn.w_q" in params_of(params)
    n = attributes.get("num_layers")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"{who}: num_layers must be a positive integer, got {n!r}")
    ff = _feed_forward_attribute(attributes, who)
    paths = {"final_norm.gamma"} | {f"layers.{i}.{s}" for i in range(n)
                                    for s in _layer_paths(decoder, ff, i == 0)}
    p = _spec_params(params, paths, who)
    config = _config(p.scope("layers.0"), attributes, decoder, n, who)
    stack = T5Stack(config)
    like = stack.state_dict()
    state = {"embed_tokens.weight": torch.zeros_like(like["embed_tokens.weight"]),
             "final_layer_norm.weight": p.require("final_norm.gamma", (config.d_model,))}
    for i in range(n):
        head = f"block.{i}."
        block_like = {k[len(head):]: v for k, v in like.items() if k.startswith(head)}
        block = _block_state(p.scope(f"layers.{i}"), decoder, ff, i == 0, block_like)
        state.update({head + k: v for k, v in block.items()})
    w = p.require("final_norm.gamma")
    return _load(stack, state, w.dtype, w.device)


# -- calling a T5Stack / T5Block as the spec function is called ---------------------------------


def _additive(mask, x, t: int, s: int, who: str, name: str):
    """The spec's boolean mask (True = may attend) -> HF's additive 4-D float mask."""
    if mask is None:
        return None
    mask = torch.as_tensor(mask).to(x.device)
    if mask.dtype != torch.bool:
        raise DTypeError(f"{who}: {name} must be boolean (True = may attend), got {mask.dtype}")
    try:
        if mask.dim() > 4:
            raise RuntimeError
        torch.broadcast_shapes(tuple(mask.shape), (x.shape[0], 1, t, s))
    except RuntimeError:
        raise ShapeError(f"{who}: {name} of shape {tuple(mask.shape)} does not broadcast to "
                         f"(B, H, T, S) = ({x.shape[0]}, H, {t}, {s})") from None
    return additive_mask(mask, x.dtype).to(x.device)


def _self_mask(x, mask, decoder: bool, who: str):
    """Decoder: causal AND mask (a 4-D mask replaces transformers' causal one, so the causal
    part is put in here); encoder: the mask as given."""
    t = x.shape[1]
    if decoder:
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        mask = causal if mask is None else torch.as_tensor(mask).to(x.device) & causal
    return _additive(mask, x, t, t, who, "mask")


def forward(stack: T5Stack, x, mask=None, memory=None, memory_mask=None) -> torch.Tensor:
    """``y`` of t5_encoder(x, mask) or t5_decoder(x, memory, mask, memory_mask) through the
    stack (inputs_embeds = x; the spec's boolean masks as HF's additive 4-D masks)."""
    who = "T5Stack"
    decoder = stack.config.is_decoder
    if decoder != (memory is not None):
        need = "required by a decoder" if decoder else "not taken by an encoder"
        raise ConfigError(f"{who}: memory is {need} stack")
    kwargs = {}
    if decoder:
        kwargs = {"encoder_hidden_states": memory,
                  "encoder_attention_mask": _additive(memory_mask, x, x.shape[1], memory.shape[1],
                                                      who, "memory_mask")}
    with torch.no_grad():
        return stack(inputs_embeds=x, attention_mask=_self_mask(x, mask, decoder, who),
                     **kwargs).last_hidden_state


def forward_block(block: T5Block, x, mask=None, memory=None, memory_mask=None,
                  position_bias=None):
    """(the block's output, the self-attention position bias), as T5Stack calls the block:
    ``position_bias`` None for the block that owns the table (it computes the bias and
    returns it), the first block's returned bias for every later one."""
    who = "T5Block"
    attention = block.layer[0].SelfAttention
    decoder = attention.config.is_decoder
    if position_bias is None and not attention.has_relative_attention_bias:
        raise ParameterError(f"{who}: a block without relative_attention_bias needs the first "
                             f"block's position_bias")
    cross = None
    if decoder:
        cross = _additive(memory_mask, x, x.shape[1], memory.shape[1], who, "memory_mask")
    with torch.no_grad():
        out = block(x, _self_mask(x, mask, decoder, who), position_bias,
                    memory if decoder else None, cross, None)
    return out[0], out[1]


# -- T5ForConditionalGeneration <-> t5_model -----------------------------------------------------

MODEL = "T5ForConditionalGeneration"


def _rescaled(config) -> bool:
    """transformers 5: ``scale_decoder_outputs``; older releases: ``tie_word_embeddings``."""
    return bool(getattr(config, "scale_decoder_outputs", config.tie_word_embeddings))


def t5_model_from_hf(model: T5ForConditionalGeneration) -> tuple[dict, dict]:
    """(attributes, params) of t5_model: the rescaled head is the tied one (``shared.table``
    only); without the rescale, ``lm_head.w`` = ``lm_head.weight``ᵀ (a copy of ``shared.weight``
    where transformers keeps the two tied)."""
    config = model.config
    if config.num_decoder_layers != config.num_layers:
        raise ConfigError(f"{MODEL}: num_decoder_layers={config.num_decoder_layers} != "
                          f"num_layers={config.num_layers}: t5_model has one num_layers")
    tie = _rescaled(config)
    shared, head = model.shared.weight, model.lm_head.weight
    if tie and not torch.equal(shared, head):
        raise ConfigError(f"{MODEL}: the rescaled (tied) head has an lm_head.weight other than "
                          f"shared.weight: t5_model's tied head reads shared.table only")
    _, attrs, enc = t5_stack_from_hf(model.encoder)
    _, _, dec = t5_stack_from_hf(model.decoder)
    p = {"shared.table": shared.detach().clone(), **{f"encoder.{k}": v for k, v in enc.items()},
         **{f"decoder.{k}": v for k, v in dec.items()}}
    if not tie:
        p["lm_head.w"] = head.detach().T.contiguous()
    return {"pad_id": config.pad_token_id, **attrs, "tie_embeddings": tie}, p


def t5_model_to_hf(params, attributes: dict) -> T5ForConditionalGeneration:
    """t5_model parameters and attributes -> ``T5ForConditionalGeneration`` (eager attention,
    dropout 0, ``pad_token_id = decoder_start_token_id = pad_id``); untied: its own
    ``lm_head.weight`` and ``scale_decoder_outputs`` False."""
    who = MODEL
    _check_attributes(attributes, {}, ALLOWED | {"pad_id", "tie_embeddings"}, who)
    tie = flag("tie_embeddings", attributes.get("tie_embeddings", True))
    pad_id = attributes.get("pad_id")
    if isinstance(pad_id, bool) or not isinstance(pad_id, int):
        raise ConfigError(f"{who}: pad_id must be an integer, got {pad_id!r}")
    head = {"lm_head.w"} if not tie else set()
    p = _spec_params(params, lambda k: k.startswith(("encoder.", "decoder."))
                     or k in {"shared.table"} | head, who)
    table = p.require("shared.table", (None, None))
    vocab, d = table.shape
    stack_attrs = {k: v for k, v in attributes.items() if k in ALLOWED}
    stacks = {}
    for kind in ("encoder", "decoder"):
        sub = {k[len(kind) + 1:]: p.require(k) for k in p.keys() if k.startswith(kind + ".")}
        stacks[kind] = t5_stack_to_hf(sub, stack_attrs, decoder=kind == "decoder")
    c = stacks["decoder"].config
    if stacks["encoder"].config.d_model != d:
        raise ShapeError(f"{who}: {p.path('shared.table')} of width {d}, the encoder's "
                         f"d_model {stacks['encoder'].config.d_model}")
    config = T5Config(d_model=d, d_kv=c.d_kv, num_heads=c.num_heads, d_ff=c.d_ff,
                      num_layers=c.num_layers, num_decoder_layers=c.num_layers,
                      relative_attention_num_buckets=c.relative_attention_num_buckets,
                      relative_attention_max_distance=c.relative_attention_max_distance,
                      layer_norm_epsilon=c.layer_norm_epsilon, feed_forward_proj=c.feed_forward_proj,
                      dropout_rate=0.0, vocab_size=vocab, pad_token_id=pad_id,
                      decoder_start_token_id=pad_id, eos_token_id=None, tie_word_embeddings=tie,
                      use_cache=False, attn_implementation="eager")
    model = T5ForConditionalGeneration(config)
    state = {"shared.weight": table, "encoder.embed_tokens.weight": table,
             "decoder.embed_tokens.weight": table, "lm_head.weight": table}
    for kind, stack in stacks.items():
        state.update({f"{kind}.{k}": v for k, v in stack.state_dict().items()
                      if k != "embed_tokens.weight"})
    model = _load(model, state, table.dtype, table.device)
    if not tie:  # transformers 5 keeps lm_head tied to shared: give it its own weight
        w = p.require("lm_head.w", (d, vocab))
        model.lm_head.weight = torch.nn.Parameter(w.T.detach().clone().to(table.dtype))
    return model


def model_forward(model: T5ForConditionalGeneration, src_ids, tgt_ids, pad_id) -> torch.Tensor:
    """t5_model's logits: ``attention_mask = src_ids != pad_id`` (the encoder's and the
    cross-attention's keys), ``decoder_input_ids = tgt_ids`` as given (the caller shifted
    them), no ``decoder_attention_mask`` (causal only, as the spec)."""
    src, tgt = torch.as_tensor(src_ids), torch.as_tensor(tgt_ids)
    with torch.no_grad():
        return model(input_ids=src, attention_mask=(src != pad_id).long(),
                     decoder_input_ids=tgt).logits
