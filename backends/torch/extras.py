"""Backend-specific conformance checks (``TorchBackend.extra_checks``): agreement of the
golden vectors with PyTorch's own built-ins through :mod:`.convert` and, when transformers
is installed, with its BertLayer, GPT2Block and Llama modules through :mod:`.hf`, gradient
checks in float64, and the error contract for tensors on another device (the dtype contract
is the suite's ``test_contract_errors.py``, for every backend).

Agreement checks run at float64 with the vectors' own float64 tolerances (transformers'
Llama modules at the float32 ones: they compute RMSNorm, RoPE and softmax in float32). A vector a
built-in cannot express (a bias where PyTorch has none, widths ``nn.MultiheadAttention``
does not allow, rows with nothing to attend to, where PyTorch gives NaN and the spec 0)
is left out of that check; each check asserts it compared at least one vector.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from attnspec.spec.errors import ConfigError, DeviceError

from . import convert

DT = torch.float64


def _tensors(arrays: dict, device):
    out = {}
    for k, a in arrays.items():
        a = np.asarray(a)
        t = torch.from_numpy(np.array(a))
        out[k] = t.to(device, DT) if a.dtype.kind == "f" else t.to(device)
    return out


def _close(name, got, vector, out_name):
    want = vector.outputs[out_name]
    tol = vector.tolerances["float64"]
    got = got.detach().cpu().to(torch.float64).numpy()
    np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=tol["atol"],
                               err_msg=f"{name}: {vector.id} output {out_name!r}")


def _vectors(spec, component):
    return [v for v in spec.vectors
            if v.component == component and v.expect == "value" and not v.deprecated]


def _no_empty_rows(mask, t, s):
    return mask is None or bool(np.broadcast_to(np.asarray(mask), np.broadcast_shapes(
        np.shape(mask), (1, t, s))).any(axis=-1).all())


def _finite(v) -> bool:
    """No NaN or inf in the float inputs: PyTorch's built-ins multiply masked keys by 0
    (0 * NaN = NaN) and give NaN for +inf scores, a difference the spec pages state."""
    return all(np.all(np.isfinite(a)) for a in v.inputs.values() if np.asarray(a).dtype.kind == "f")


def _run(name, spec, component, one, device):
    compared = 0
    for v in _vectors(spec, component):
        if _finite(v) and one(v, _tensors(v.inputs, device), _tensors(v.params, device)):
            compared += 1
    assert compared, f"{name}: no {component} vector could be expressed with the built-in"


# -- agreement -------------------------------------------------------------------------------


def agree_sdpa(device):
    def one(v, x, _):
        if v.function != "sdpa" or v.attributes.get("softcap") is not None:
            return False  # PyTorch's kernel has no soft-cap (flex_attention's score_mod has)
        q, k, vv = x["q"], x["k"], x["v"]
        mask, bias = x.get("mask"), x.get("bias")
        if not _no_empty_rows(v.inputs.get("mask"), q.shape[-2], k.shape[-2]) or \
                (bias is not None and bool(torch.isinf(bias).any())):
            return False
        attn = mask
        if bias is not None:
            attn = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
        gqa = v.attributes.get("num_kv_heads") is not None
        if not gqa:
            batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], vv.shape[:-2])
            q, k, vv = (t.expand(*batch, *t.shape[-2:]) for t in (q, k, vv))
        # enable_gqa: q (..., H, T, K), k and v (..., H_kv, S, .), as the spec's num_kv_heads
        out = F.scaled_dot_product_attention(q, k, vv, attn_mask=attn, enable_gqa=gqa,
                                             scale=v.attributes.get("scale"))
        _close("F.scaled_dot_product_attention" + (" enable_gqa" if gqa else ""), out, v,
               "output")
        return True
    return lambda spec: _run("sdpa", spec, "sdpa", one, device)


def agree_mha(device):
    def one(v, x, p):
        h = v.attributes["num_heads"]
        b, t, _ = x["query"].shape
        s = x["key"].shape[1]
        if not _no_empty_rows(v.inputs.get("mask"), t, s) or \
                v.attributes.get("num_kv_heads", h) != h:  # no grouped-query mode
            return False
        try:
            mod = convert.mha_to_torch(p, num_heads=h).eval()
        except ConfigError:
            return False
        mask = x.get("mask")
        attn = None if mask is None else convert.to_torch_mask(mask, (b, h, t, s))
        out, w = mod(x["query"], x["key"], x["value"], attn_mask=attn, need_weights=True,
                     average_attn_weights=False)
        _close("nn.MultiheadAttention", out, v, "output")
        _close("nn.MultiheadAttention", w, v, "weights")
        return True
    return lambda spec: _run("mha", spec, "mha", one, device)


def agree_mha_gqa(device):
    """Grouped-query mha written with PyTorch's own pieces: F.linear projections and
    F.scaled_dot_product_attention(enable_gqa=True) on H query heads over H_kv kv heads."""
    def heads(x, n):  # (B, T, n*W) -> (B, n, T, W)
        return x.unflatten(-1, (n, -1)).transpose(1, 2)

    def one(v, x, p):
        h, h_kv = v.attributes["num_heads"], v.attributes.get("num_kv_heads")
        b, t, _ = x["query"].shape
        s = x["key"].shape[1]
        if h_kv is None or h_kv == h or not _no_empty_rows(v.inputs.get("mask"), t, s):
            return False
        q = heads(F.linear(x["query"], p["w_q"].T, p.get("b_q")), h)  # (B, H, T, K)
        k = heads(F.linear(x["key"], p["w_k"].T, p.get("b_k")), h_kv)  # (B, H_kv, S, K)
        vv = heads(F.linear(x["value"], p["w_v"].T, p.get("b_v")), h_kv)  # (B, H_kv, S, V)
        mask = x.get("mask")
        attn = None if mask is None else mask.expand(b, h, t, s)
        o = F.scaled_dot_product_attention(q, k, vv, attn_mask=attn, enable_gqa=True)
        out = F.linear(o.transpose(1, 2).flatten(-2), p["w_o"].T, p.get("b_o"))  # (B, T, Do)
        _close("F.scaled_dot_product_attention(enable_gqa=True) in mha", out, v, "output")
        return True
    return lambda spec: _run("mha gqa", spec, "mha", one, device)


def agree_layer_norm(device):
    def one(v, x, p):
        if v.function != "layer_norm" or v.attributes.get("variant", "canonical") != "canonical":
            return False
        mod = convert.layer_norm_to_torch(p, eps=v.attributes.get("eps", 1e-5))
        _close("nn.LayerNorm", mod(x["x"]), v, "y")
        return True
    return lambda spec: _run("layer_norm", spec, "layer_norm", one, device)


def _layer_mask(mask, shape):
    return None if mask is None else convert.to_torch_mask(mask, shape)


def agree_encoder_layer(device, norm):
    def one(v, x, p):
        a = v.attributes
        if a.get("norm", "post") != norm or a.get("activation", "relu") not in \
                ("relu", "gelu", "gelu_tanh"):
            return False
        b, t, _ = x["x"].shape
        if not _no_empty_rows(v.inputs.get("mask"), t, t):
            return False
        try:
            mod = convert.encoder_layer_to_torch(p, num_heads=a["num_heads"], norm=norm,
                                                 eps=a.get("eps", 1e-5),
                                                 activation=a.get("activation", "relu"))
        except ConfigError:
            return False
        out = mod(x["x"], src_mask=_layer_mask(x.get("mask"), (b, a["num_heads"], t, t)))
        _close(f"nn.TransformerEncoderLayer(norm_first={norm == 'pre'})", out, v, "y")
        return True
    return lambda spec: _run(f"encoder_layer {norm}", spec, "encoder_layer", one, device)


def agree_decoder_layer(device, norm):
    def one(v, x, p):
        a = v.attributes
        if a.get("norm", "post") != norm or a.get("activation", "relu") not in \
                ("relu", "gelu", "gelu_tanh"):
            return False
        b, t, _ = x["x"].shape
        s = x["memory"].shape[1]
        if not (_no_empty_rows(v.inputs.get("self_mask"), t, t)
                and _no_empty_rows(v.inputs.get("memory_mask"), t, s)):
            return False
        try:
            mod = convert.decoder_layer_to_torch(p, num_heads=a["num_heads"], norm=norm,
                                                 eps=a.get("eps", 1e-5),
                                                 activation=a.get("activation", "relu"))
        except ConfigError:
            return False
        h = a["num_heads"]
        out = mod(x["x"], x["memory"], tgt_mask=_layer_mask(x.get("self_mask"), (b, h, t, t)),
                  memory_mask=_layer_mask(x.get("memory_mask"), (b, h, t, s)))
        _close(f"nn.TransformerDecoderLayer(norm_first={norm == 'pre'})", out, v, "y")
        return True
    return lambda spec: _run(f"decoder_layer {norm}", spec, "decoder_layer", one, device)


def agree_gru(device):
    def one(v, x, p):
        if v.function != "gru" or x["x"].shape[1] == 0:
            return False
        mod = convert.gru_to_torch(p)
        h0 = x.get("h0")
        out, h_last = mod(x["x"], None if h0 is None else h0[None])
        _close("nn.GRU", out, v, "outputs")
        _close("nn.GRU", h_last[0], v, "h_last")
        return True
    return lambda spec: _run("gru", spec, "gru", one, device)


# -- gradients -------------------------------------------------------------------------------


def _rand(*shape, device, seed=[0]):  # noqa: B006 - a counter on purpose
    seed[0] += 1
    g = torch.Generator().manual_seed(seed[0])
    return (torch.rand(shape, generator=g, dtype=DT) - 0.5).to(device).requires_grad_()


def _mha_params(d, hk, device, prefix=""):
    names = {"w_q": (d, hk), "b_q": (hk,), "w_k": (d, hk), "b_k": (hk,), "w_v": (d, hk),
             "b_v": (hk,), "w_o": (hk, d), "b_o": (d,)}
    return {prefix + n: _rand(*s, device=device) for n, s in names.items()}


def _ln_params(d, device, prefix):
    return {prefix + "gamma": _rand(d, device=device), prefix + "beta": _rand(d, device=device)}


def _ffn_params(d, f, device, prefix):
    return {prefix + "w1": _rand(d, f, device=device), prefix + "b1": _rand(f, device=device),
            prefix + "w2": _rand(f, d, device=device), prefix + "b2": _rand(d, device=device)}


def _gradcheck(fn, inputs: dict):
    names = list(inputs)

    def f(*tensors):
        out = fn(dict(zip(names, tensors)))
        return out if isinstance(out, tuple) else (out,)

    assert torch.autograd.gradcheck(f, tuple(inputs[n] for n in names), eps=1e-6, atol=1e-5)


def grad_sdpa(device):
    from .attention import sdpa

    def check(spec):
        x = {"q": _rand(2, 3, 4, device=device), "k": _rand(2, 5, 4, device=device),
             "v": _rand(2, 5, 3, device=device)}
        mask = torch.tensor([[1, 1, 0, 1, 0]], dtype=torch.bool, device=device)
        _gradcheck(lambda a: sdpa(a["q"], a["k"], a["v"], mask), x)
    return check


def grad_mha(device):
    from .multihead import mha

    def check(spec):
        p = _mha_params(4, 4, device)
        p["query"], p["kv"] = _rand(1, 3, 4, device=device), _rand(1, 2, 4, device=device)
        _gradcheck(lambda a: mha(a["query"], a["kv"], a["kv"], num_heads=2, params=a), p)
    return check


def grad_layer_norm(device):
    from .norm import layer_norm

    def check(spec):
        p = _ln_params(5, device, "")
        p["x"] = _rand(2, 5, device=device)
        _gradcheck(lambda a: layer_norm(a["x"], params=a), p)
    return check


def grad_feedforward(device):
    from .feedforward import feedforward

    def check(spec):
        p = _ffn_params(3, 5, device, "")
        p["x"] = _rand(2, 3, device=device)
        _gradcheck(lambda a: feedforward(a["x"], activation="gelu", params=a), p)
    return check


def grad_encoder_layer(device):
    from .layers import encoder_layer

    def check(spec):
        p = _mha_params(4, 4, device, "self_attn.")
        for extra in (_ln_params(4, device, "norm1."), _ln_params(4, device, "norm2."),
                      _ffn_params(4, 6, device, "ffn.")):
            p.update(extra)
        p["x"] = _rand(1, 3, 4, device=device)
        _gradcheck(lambda a: encoder_layer(a["x"], num_heads=2, params=a), p)
    return check


# -- Hugging Face transformers (the optional hf extra) -----------------------------------------


def _close_at(name, got, vector, out_name, dtype):
    want, tol = vector.outputs[out_name], vector.tolerances[dtype]
    got = got.detach().cpu().to(torch.float64).numpy()
    np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=tol["atol"],
                               err_msg=f"{name}: {vector.id} output {out_name!r} "
                                       f"(judged at the vector's {dtype} tolerance)")


def agree_hf_encoder_layer(device, norm):
    """Every expressible encoder_layer vector of this norm through ``hf.to_hf``: BertLayer
    (post) or GPT2Block (pre), the vector's own mask given as HF's additive mask."""
    name = "transformers." + ("BertLayer" if norm == "post" else "GPT2Block")

    def one(v, x, p):
        from . import hf  # here, not at collection: importing transformers costs ~5 s

        a = v.attributes
        t = x["x"].shape[1]
        if a.get("norm", "post") != norm or not _no_empty_rows(v.inputs.get("mask"), t, t):
            return False  # HF gives a row with nothing to attend to uniform weights, not 0
        _close(name, hf.forward(hf.to_hf(p, a), x["x"], x.get("mask")), v, "y")
        return True
    return lambda spec: _run(name, spec, "encoder_layer", one, device)


def _gpt2_lm_attributes(v):
    """The decoder_only vector's attributes for ``hf_gpt2.gpt2_lm_to_hf``, or None where
    GPT2LMHeadModel cannot hold them: post-norm (GPT-2 is pre-norm with ln_f), a head bias
    (its lm_head has none), or a first token that is the pad id (that query row sees no key:
    zeros in the spec, uniform weights in transformers)."""
    a = dict(v.attributes)
    ids = np.asarray(v.inputs["ids"])
    if (a.get("norm", "pre") != "pre" or "lm_head.b" in v.params
            or (ids[:, :1] == a["pad_id"]).any()):
        return None
    return a


def agree_hf_gpt2_lm(device):
    """Every decoder_only value vector GPT2LMHeadModel can hold (the tied GPT-2 ones:
    ``decoder_only/gpt2-*``) through ``hf.to_hf``, at the vector's float64 tolerance
    (GPT-2 computes LayerNorm, softmax and gelu_new in the module's dtype)."""
    name = "transformers.GPT2LMHeadModel"

    def one(v, x, p):
        from . import hf  # when the check runs, not when it is listed
        a = _gpt2_lm_attributes(v)
        if a is None:
            return False
        pad_id = a.pop("pad_id")
        model = hf.to_hf(p, a)
        assert type(model).__name__ == "GPT2LMHeadModel", type(model).__name__
        _close(name, hf.forward(model, x["ids"], pad_id=pad_id), v, "logits")
        return True
    return lambda spec: _run(name, spec, "decoder_only", one, device)


def _t5_rows(v, t, s) -> bool:
    """Every query row of a t5 vector sees a key (HF gives an empty row uniform weights)."""
    causal = np.tril(np.ones((t, t), dtype=bool))
    rows = [(v.inputs.get("mask"), t)] if v.function == "t5_encoder" else \
        [(causal if v.inputs.get("self_mask") is None else causal & np.asarray(v.inputs["self_mask"]), t),
         (v.inputs.get("memory_mask"), s)]
    return all(_no_empty_rows(m, t, width) for m, width in rows)


def agree_hf_t5_model(device):
    """Every t5_model value vector through ``hf.to_hf`` (a T5ForConditionalGeneration,
    ``attention_mask = src_ids != pad_id``, ``decoder_input_ids = tgt_ids``), at the vector's
    float32 tolerance: T5LayerNorm's variance is float32 even in a float64 module
    (spec/components/huggingface.md). A source row of pads only is not
    expressible (the spec gives it zero attention outputs, transformers uniform weights)."""
    name = "transformers.T5ForConditionalGeneration"

    def one(v, x, p):
        from . import hf  # when the check runs, not when it is listed
        if v.function != "t5_model":
            return False
        a = dict(v.attributes)
        src = x["src_ids"]
        if not bool((src != a["pad_id"]).any(dim=-1).all()):
            return False
        model = hf.to_hf(p, a)
        assert type(model).__name__ == "T5ForConditionalGeneration", type(model).__name__
        logits = hf.forward(model, (src, x["tgt_ids"]), pad_id=a["pad_id"])
        _close_at(name, logits, v, "logits", "float32")
        return True
    return lambda spec: _run(name, spec, "t5", one, device)


def agree_hf_t5(device, kind):
    """Every t5_encoder (kind "encoder") or t5_decoder ("decoder") value vector through
    ``hf.to_hf`` (a T5Stack), or ("blocks") each layer through its own ``T5Block``
    (``hf_t5.t5_block_to_hf``; block 0 computes the position bias, the later blocks are given
    it, then final_norm), at the vector's float32 tolerance: T5LayerNorm's variance is float32
    even in a float64 module (spec/components/huggingface.md)."""
    name = "transformers." + ("T5Block" if kind == "blocks" else f"T5Stack.{kind}")

    def one(v, x, p):
        from . import hf, hf_t5  # when the check runs, not when it is listed
        decoder = v.function == "t5_decoder"
        memory = x.get("memory")
        t, s = x["x"].shape[1], (memory.shape[1] if decoder else 0)
        if not _t5_rows(v, t, s):
            return False
        a = v.attributes
        masks = (x.get("self_mask"), memory, x.get("memory_mask")) if decoder else \
            (x.get("mask"), None, None)
        if kind != "blocks":
            stack = hf.to_hf(p, a)
            assert type(stack).__name__ == "T5Stack" and stack.config.is_decoder == decoder
            y = hf_t5.forward(stack, x["x"], *masks)
        else:
            h, bias = x["x"], None
            layer_attrs = {k: a[k] for k in a if k != "num_layers"}
            for i in range(a["num_layers"]):
                prefix = f"layers.{i}."
                block = hf_t5.t5_block_to_hf({k[len(prefix):]: w for k, w in p.items()
                                              if k.startswith(prefix)}, layer_attrs,
                                             decoder=decoder, layer_idx=i)
                h, bias = hf_t5.forward_block(block, h, *masks, position_bias=bias)
            g = p["final_norm.gamma"]
            var = h.float().pow(2).mean(-1, keepdim=True)  # T5LayerNorm, as transformers
            y = g * (h * torch.rsqrt(var + a.get("eps", 1e-6))).to(g.dtype)
        _close_at(name, y, v, "y", "float32")
        return True

    def check(spec):
        functions = ("t5_encoder", "t5_decoder") if kind == "blocks" else (f"t5_{kind}",)
        vectors = [v for v in spec.vectors if v.function in functions and v.expect == "value"
                   and not v.deprecated and _finite(v)]
        if not vectors:
            pytest.skip(f"the spec (attnspec {spec.version}) has no {functions} vectors")
        compared = sum(bool(one(v, _tensors(v.inputs, device), _tensors(v.params, device)))
                       for v in vectors)
        assert compared, f"{name}: no {functions} vector could be expressed"
    return check


def _llama_attributes(v, t):
    """The vector's attributes for to_hf, or None if LlamaConfig cannot hold them: a
    ``window`` shorter than T (one of T or more keeps every causal key), Qwen2's
    ``attention_bias`` (Llama's would bias o_proj too; transformers.Qwen2DecoderLayer judges
    those vectors), a ``rotary_dim`` below the head width (Llama rotates whole heads;
    transformers.Phi3DecoderLayer judges those). ``rope_scaling`` goes to rope_parameters."""
    a = dict(v.attributes)
    if a.pop("attention_bias", False):
        return None
    if a.pop("tie_embeddings", False):  # LlamaForCausalLM's converter is untied;
        return None  # transformers.Qwen2ForCausalLM judges the tied vectors
    w_q = v.params["attn.w_q"] if "attn.w_q" in v.params else v.params["layers.0.attn.w_q"]
    if a.get("rotary_dim") not in (None, np.shape(w_q)[1] // a["num_heads"]):
        return None
    if a.get("window") is not None and a["window"] < t:
        return None
    a.pop("window", None)
    return a


def agree_hf_llama(device, function):
    """Every expressible llama_layer (LlamaDecoderLayer) or llama_decoder_only
    (LlamaForCausalLM) vector through ``hf.to_hf``, judged at the vector's float32
    tolerance: at float64 transformers still computes RMSNorm, the RoPE angles and the
    eager softmax in float32 (spec/components/huggingface.md)."""
    name = "transformers." + ("LlamaDecoderLayer" if function == "llama_layer"
                              else "LlamaForCausalLM")

    def one(v, x, p):
        from . import hf
        if function == "llama_decoder_only":
            a = _llama_attributes(v, x["ids"].shape[1])
            if a is None:
                return False
            pad_id = a.pop("pad_id")
            logits = hf.forward(hf.to_hf(p, a), x["ids"], pad_id=pad_id)
            _close_at(name, logits, v, "logits", "float32")
            return True
        t = x["x"].shape[1]
        a = _llama_attributes(v, t)
        keep = np.tril(np.ones((t, t), dtype=bool))
        if "mask" in v.inputs:
            keep = keep & np.asarray(v.inputs["mask"])
        if a is None or not _no_empty_rows(keep, t, t):
            return False  # a row with nothing to attend to gets uniform weights in HF
        offset = a.pop("offset", 0)
        y = hf.forward(hf.to_hf(p, a), x["x"], x.get("mask"), offset=offset)
        _close_at(name, y, v, "y", "float32")
        return True

    def check(spec):
        vectors = [v for v in spec.vectors if v.function == function]
        if not vectors:
            pytest.skip(f"the spec (attnspec {spec.version}) has no {function} vectors")
        compared = sum(bool(_finite(v) and one(v, _tensors(v.inputs, device),
                                                _tensors(v.params, device)))
                       for v in vectors if v.expect == "value" and not v.deprecated)
        assert compared, f"{name}: no {function} vector could be expressed"
    return check


def _moe_block(v):
    """The transformers block a moe vector's parameters and attributes fit, or None:
    DeepSeek-V3 (sigmoid scoring, ungated shared experts n_shared_experts * F wide),
    Mixtral (renormalised, no shared expert) or Qwen2-MoE (a sigmoid-gated shared expert);
    the last two have no sigmoid scoring, groups, scaling factor or correction bias.
    None too for a vector whose router logits tie at the top-k boundary (the spec keeps the
    lowest id; torch.topk's order among equal scores is unspecified)."""
    a, p = v.attributes, v.params
    if _tie_at_top_k(np.asarray(v.inputs["x"]) @ np.asarray(p["router.w"]), a["top_k"]):
        return None
    if a.get("scoring", "softmax") == "sigmoid":
        ok = ("shared.w_gate" in p and "shared_gate.w" not in p
              and (a.get("n_group", 1) == 1 or a.get("group_score", "sum_top2") == "sum_top2")
              and (not a.get("renormalize", False) or a.get("eps", 1e-20) == 1e-20)
              and np.shape(p["shared.w_gate"])[1] % np.shape(p["experts.w_gate"])[2] == 0)
        return "DeepseekV3MoE" if ok else None
    if (a.get("scoring", "softmax") != "softmax" or a.get("n_group", 1) != 1
            or a.get("routed_scaling_factor", 1.0) != 1.0 or "router.correction_bias" in p):
        return None
    if "shared.w_gate" in p:
        return "Qwen2MoeSparseMoeBlock" if "shared_gate.w" in p else None
    return "MixtralSparseMoeBlock" if a.get("renormalize", False) else None


def _tie_at_top_k(z, k: int) -> bool:
    """Whether some row of the scores z (N, E) has its k-th and (k+1)-th largest equal."""
    s = -np.sort(-z, axis=-1)
    return k < z.shape[-1] and bool((s[:, k - 1] == s[:, k]).any())


def agree_hf_moe(device, block):
    """Every moe vector (value, and the forward of each gradient vector) that ``block``
    can hold through ``hf.to_hf``, judged at the vector's float32 tolerance: transformers
    computes the router's softmax and top-k weights in float32 whatever the dtype
    (``softmax(router_logits.float())``; DeepSeek-V3 its router logits:
    spec/components/huggingface.md)."""
    name = f"transformers.{block}"

    def check(spec):
        from . import hf

        vectors = [v for v in spec.vectors if v.function == "moe" and not v.deprecated
                   and v.expect in ("value", "gradient") and _moe_block(v) == block]
        if not vectors:
            pytest.skip(f"the spec (attnspec {spec.version}) has no moe vector for {block}")
        for v in vectors:
            x, p = _tensors(v.inputs, device), _tensors(v.params, device)
            module = hf.to_hf(p, v.attributes)
            assert type(module).__name__ == block, type(module).__name__
            _close_at(name, hf.forward(module, x["x"]), v, "y", "float32")
    return check


def agree_hf_zoo(device, model):
    """Every llama_layer (Mistral, Qwen2, Phi-3) or parallel_layer (GPT-NeoX, Falcon) value
    vector the model can express (``hf_zoo.expressible``) through ``hf.to_hf(model=)``, at
    the vector's float32 tolerance (every one computes the RoPE angles in float32)."""
    name = f"transformers.{model}"

    def one(v, x, p):
        from . import hf, hf_zoo
        a = hf_zoo.expressible(v, model)
        if a is None:
            return False
        offset = a.pop("offset", 0)
        y = hf.forward(hf.to_hf(p, a, model=model), x["x"], x.get("mask"), offset=offset)
        _close_at(name, y, v, "y", "float32")
        return True

    return _each_value_vector(name, device, "hf_zoo", model, one)


def agree_hf_models(device, model):
    """Every llama_decoder_only (Mistral, Qwen2, Phi-3) or parallel_decoder_only (GPT-NeoX,
    Falcon) value vector the model can express
    (``hf_models.expressible``) through ``hf.to_hf(model=)``, at the vector's float32
    tolerance (each computes its RoPE angles, and all but Falcon their softmax and
    RMSNorms, in float32 whatever the dtype: spec/components/huggingface.md)."""
    name = f"transformers.{model}"

    def one(v, x, p):
        from . import hf, hf_models
        a = hf_models.expressible(v, model)
        if a is None:
            return False
        pad_id = a.pop("pad_id")
        module = hf.to_hf(p, a, model=model)
        assert type(module).__name__ == model, type(module).__name__
        _close_at(name, hf.forward(module, x["ids"], pad_id=pad_id), v, "logits", "float32")
        return True

    return _each_value_vector(name, device, "hf_models", model, one)


def _each_value_vector(name: str, device, converters: str, model: str, one):
    """A check that runs ``one(v, inputs, params)`` on every finite value vector of
    ``model``'s spec function (``<converters>.SPEC_FUNCTION``, imported when the check runs):
    ``one`` returns whether it could express ``v``; the check fails when none could."""
    def check(spec):
        function = importlib.import_module(f"{__package__}.{converters}").SPEC_FUNCTION[model]
        vectors = [v for v in spec.vectors if v.function == function and v.expect == "value"
                   and not v.deprecated and _finite(v)]
        if not vectors:
            pytest.skip(f"the spec (attnspec {spec.version}) has no {function} vectors")
        compared = sum(bool(one(v, _tensors(v.inputs, device), _tensors(v.params, device)))
                       for v in vectors)
        assert compared, f"{name}: no {function} vector could be expressed"
    return check


def _mla_attributes(v):
    """The vector's attributes for mla_to_hf, or None if DeepseekV3Config cannot hold them
    (yarn_factor/mscale_all_dim without rope_scaling: YaRN's mscale comes with YaRN's
    frequency scaling there; with rope_scaling both go to rope_parameters)."""
    a = dict(v.attributes)
    if a.get("yarn_factor", 1.0) > 1 and a.get("mscale_all_dim", 0.0):
        return None
    a.pop("yarn_factor", None)
    a.pop("mscale_all_dim", None)
    return a


def agree_hf_mla(device):
    """Every expressible mla vector through ``mla_to_hf``, judged at the vector's float32
    tolerance: at float64 transformers still computes RMSNorm and the RoPE angles in float32.
    Left out: YaRN's mscale without rope_scaling (see _mla_attributes) and a query row with no
    key to attend to (uniform weights in HF, zeros in the spec)."""
    name = "transformers.DeepseekV3Attention"

    def one(v, x, p):
        from .hf_mla import forward, mla_to_hf
        t = x["x"].shape[1]
        a = _mla_attributes(v)
        keep = np.tril(np.ones((t, t), dtype=bool))
        if "mask" in v.inputs:
            keep = keep & np.asarray(v.inputs["mask"])
        if a is None or not _no_empty_rows(keep, t, t):
            return False
        offset = a.pop("offset", 0)
        y = forward(mla_to_hf(p, a), x["x"], x.get("mask"), offset=offset)
        _close_at(name, y, v, "y", "float32")
        return True

    def check(spec):
        vectors = [v for v in spec.vectors if v.function == "mla"]
        if not vectors:
            pytest.skip(f"the spec (attnspec {spec.version}) has no mla vectors")
        compared = sum(bool(_finite(v) and one(v, _tensors(v.inputs, device),
                                                _tensors(v.params, device)))
                       for v in vectors if v.expect == "value" and not v.deprecated)
        assert compared, f"{name}: no mla vector could be expressed"
    return check


def agree_hf_moe_layer(device, layer):
    """Every mixtral_layer / deepseek_layer vector (value, and the forward of each gradient
    vector) that transformers' ``layer`` can hold (``hf_moe_layers.expressible``) through
    ``hf.to_hf``, at the vector's float32 tolerance: transformers computes RMSNorm, the RoPE
    angles and the router's softmax in float32 whatever the dtype."""
    name = f"transformers.{layer}"

    def check(spec):
        from . import hf, hf_moe_layers  # when the check runs, not when it is listed
        compared = 0
        for v in spec.vectors:
            if v.component != "moe_layers" or v.deprecated or v.expect not in ("value", "gradient") \
                    or not _finite(v):
                continue
            found = hf_moe_layers.expressible(v)
            if found is None or found[0] != layer:
                continue
            x, p = _tensors(v.inputs, device), _tensors(v.params, device)
            a = dict(found[1])
            offset, pad_id = a.pop("offset", 0), a.pop("pad_id", None)
            module = hf.to_hf(p, a)
            assert type(module).__name__ == layer, type(module).__name__
            if pad_id is not None:
                _close_at(name, hf.forward(module, x["ids"], pad_id=pad_id), v, "logits", "float32")
                # bfloat16 too: to_hf's experts run eagerly (grouped_mm takes no float64 but
                # bfloat16), measured within each vector's bfloat16 tolerance (0.37 of it)
                low = hf.to_hf({k: t.to(torch.bfloat16) for k, t in p.items()}, a)
                _close_at(name, hf.forward(low, x["ids"], pad_id=pad_id), v, "logits",
                          "bfloat16")
            else:
                _close_at(name, hf.forward(module, x["x"], x.get("mask"), offset=offset), v, "y",
                          "float32")
            compared += 1
        if not compared:
            pytest.skip(f"the spec (attnspec {spec.version}) has no vector {layer} can hold")
    return check


def agree_hf_gemma(device, cls):
    """Every gemma_layer / gemma_decoder_only value vector that transformers' ``cls`` can hold
    (``hf_gemma.expressible``) through ``hf.to_hf``, at the vector's float32 tolerance:
    transformers computes Gemma's RMSNorm and the RoPE angles in float32 whatever the dtype."""
    name = f"transformers.{cls}"

    def check(spec):
        from . import hf, hf_gemma  # when the check runs, not when it is listed
        compared = 0
        for v in spec.vectors:
            if v.component != "gemma" or v.deprecated or v.expect != "value" or not _finite(v):
                continue
            found = hf_gemma.expressible(v)
            if found is None or found[0] != cls:
                continue
            x, p = _tensors(v.inputs, device), _tensors(v.params, device)
            a = dict(found[1])
            offset, pad_id = a.pop("offset", 0), a.pop("pad_id", None)
            module = hf.to_hf(p, a)
            assert type(module).__name__ == cls, type(module).__name__
            if pad_id is not None:
                _close_at(name, hf.forward(module, x["ids"], pad_id=pad_id), v, "logits", "float32")
            else:
                _close_at(name, hf.forward(module, x["x"], x.get("mask"), offset=offset), v, "y",
                          "float32")
            compared += 1
        if not compared:
            pytest.skip(f"the spec (attnspec {spec.version}) has no vector {cls} can hold")
    return check


def agree_hf_deepseek_v2(device, model):
    """Every moe / mla / deepseek_layer vector (value, and the forward of each gradient
    vector) that the DeepSeek-V2 module ``model`` can hold (``hf_deepseek_v2.expressible``)
    through ``hf.to_hf(model=)``, at the vector's float32 tolerance: transformers computes
    the router (its logits and softmax), RMSNorm and the RoPE angles in float32 whatever the
    dtype (spec/components/huggingface.md)."""
    name = f"transformers.{model}"

    def check(spec):
        from . import hf, hf_deepseek_v2  # when the check runs, not when it is listed
        compared = 0
        for v in spec.vectors:
            if v.deprecated or v.expect not in ("value", "gradient") or not _finite(v) \
                    or hf_deepseek_v2.expressible(v) != model:
                continue
            x, p = _tensors(v.inputs, device), _tensors(v.params, device)
            a = dict(v.attributes)
            offset = a.pop("offset", 0)
            module = hf.to_hf(p, a, model=model)
            assert type(module).__name__ == model, type(module).__name__
            _close_at(name, hf.forward(module, x["x"], x.get("mask"), offset=offset), v, "y",
                      "float32")
            compared += 1
        if not compared:
            pytest.skip(f"the spec (attnspec {spec.version}) has no vector {model} can hold")
    return check


def hf_checks(device):
    if importlib.util.find_spec("transformers") is None:
        reason = "transformers is not installed: pip install 'attnspec[hf]' (tox -e hf)"
        return [("agree/transformers", lambda spec: pytest.skip(reason))]
    return [("agree/transformers.BertLayer", agree_hf_encoder_layer(device, "post")),
            ("agree/transformers.GPT2Block", agree_hf_encoder_layer(device, "pre")),
            ("agree/transformers.GPT2LMHeadModel", agree_hf_gpt2_lm(device)),
            ("agree/transformers.T5Stack.encoder", agree_hf_t5(device, "encoder")),
            ("agree/transformers.T5Stack.decoder", agree_hf_t5(device, "decoder")),
            ("agree/transformers.T5Block", agree_hf_t5(device, "blocks")),
            ("agree/transformers.T5ForConditionalGeneration", agree_hf_t5_model(device)),
            ("agree/transformers.LlamaDecoderLayer", agree_hf_llama(device, "llama_layer")),
            ("agree/transformers.LlamaForCausalLM", agree_hf_llama(device, "llama_decoder_only")),
            ("agree/transformers.MixtralSparseMoeBlock",
             agree_hf_moe(device, "MixtralSparseMoeBlock")),
            ("agree/transformers.Qwen2MoeSparseMoeBlock",
             agree_hf_moe(device, "Qwen2MoeSparseMoeBlock")),
            ("agree/transformers.DeepseekV3MoE", agree_hf_moe(device, "DeepseekV3MoE")),
            *[(f"agree/transformers.{m}", agree_hf_zoo(device, m))
              for m in ("MistralDecoderLayer", "Qwen2DecoderLayer", "Phi3DecoderLayer",
                        "GPTNeoXLayer", "FalconDecoderLayer")],
            ("agree/transformers.DeepseekV3Attention", agree_hf_mla(device)),
            *[(f"agree/transformers.{m}", agree_hf_models(device, m))
              for m in ("MistralForCausalLM", "Qwen2ForCausalLM", "Phi3ForCausalLM",
                        "GPTNeoXForCausalLM", "FalconForCausalLM")],
            *[(f"agree/transformers.{m}", agree_hf_moe_layer(device, m))
              for m in ("MixtralDecoderLayer", "Qwen2MoeDecoderLayer", "DeepseekV3DecoderLayer",
                        "DeepseekV3ForCausalLM")],
            *[(f"agree/transformers.{m}", agree_hf_gemma(device, m))
              for m in ("Gemma2DecoderLayer", "Gemma3DecoderLayer", "Gemma2ForCausalLM",
                        "Gemma3ForCausalLM")],
            *[(f"agree/transformers.{m}", agree_hf_deepseek_v2(device, m))
              for m in ("DeepseekV2Moe", "DeepseekV2Attention", "DeepseekV2DecoderLayer")]]


# -- error contract --------------------------------------------------------------------------


def wrong_device(backend, device):
    from .attention import sdpa

    others = [d for d in backend.devices() if d != device]
    other = others[0] if others else "meta"  # a tensor with no data, on no real device

    def check(spec):
        q = torch.zeros(1, 2, 4, dtype=torch.float32, device=device)
        k = torch.zeros(1, 3, 4, dtype=torch.float32, device=other)
        try:
            sdpa(q, k, k)
        except DeviceError as exc:
            assert "k" in str(exc) and other in str(exc), str(exc)
        else:
            raise AssertionError(f"sdpa with q on {device} and k on {other} raised nothing")
    return "errors/wrong-device", check


def extra_checks(backend, device):
    checks = [
        ("agree/F.scaled_dot_product_attention", agree_sdpa(device)),
        ("agree/nn.MultiheadAttention", agree_mha(device)),
        ("agree/F.scaled_dot_product_attention-enable_gqa-mha", agree_mha_gqa(device)),
        ("agree/nn.LayerNorm", agree_layer_norm(device)),
        ("agree/nn.TransformerEncoderLayer-post", agree_encoder_layer(device, "post")),
        ("agree/nn.TransformerEncoderLayer-norm_first", agree_encoder_layer(device, "pre")),
        ("agree/nn.TransformerDecoderLayer-post", agree_decoder_layer(device, "post")),
        ("agree/nn.TransformerDecoderLayer-norm_first", agree_decoder_layer(device, "pre")),
        ("agree/nn.GRU", agree_gru(device)),
    ]
    if device != "mps":  # MPS has no float64
        checks += [(f"grad/{name}", fn(device)) for name, fn in (
            ("sdpa", grad_sdpa), ("mha", grad_mha), ("layer_norm", grad_layer_norm),
            ("feedforward", grad_feedforward), ("encoder_layer", grad_encoder_layer))]
    checks.append(wrong_device(backend, device))
    return checks + hf_checks(device)
