"""Extra checks of the MLX backend (``builtin_checks(device)``, added to ``extras.extra_checks``):
agreement of the golden vectors with MLX's built-ins (``mx.fast.scaled_dot_product_attention``,
``mx.softmax``, ``mx.fast.layer_norm``/``nn.LayerNorm``, ``mx.fast.rms_norm``/``nn.RMSNorm``,
``mx.fast.rope``/``nn.RoPE``, ``nn.MultiHeadAttention``) on the inputs where they agree with the spec, and the
differences spec/components/mlx.md states, pinned:
- a row whose mask keeps no key is the mean of the values (the spec's is 0), and a NaN in a
  masked key's value reaches the output: vectors with such rows or non-finite inputs are
  left out of the agreement;
- ``mx.softmax`` gives NaN for +inf entries and for a row of -inf: finite inputs only;
- ``mx.fast.rope`` computes its angles in float32 (positions past FAR_POSITION left out)
  and refuses width 0 (left out; pinned);
- the spec's ``annotated`` LayerNorm has no built-in; ``nn.MultiHeadAttention`` has no GQA,
  one width for queries and keys, and its biases all or none (the vectors beyond it left out).
Agreement runs in float32 (the dtype the backend claims first and MLX's fast kernels are
written for), with the vectors' float32 tolerances. Each check needs only ``mlx`` and the
vectors, not the backend's kernels.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

FAR_POSITION = 1024  # float32 angles: p · θ_i is exact to ~p · 6e-8 rad


def _stream(device):
    return mx.gpu if device == "gpu" else mx.cpu


def _values(spec, function):
    for v in spec.vectors:
        if v.function == function and v.expect == "value" and not v.deprecated \
                and "float32" in v.dtypes:
            yield v


def _finite(v) -> bool:
    return all(np.all(np.isfinite(a)) for a in (*v.inputs.values(), *(v.params or {}).values())
               if np.asarray(a).dtype.kind == "f")


def _f32(a):
    return mx.array(np.asarray(a, dtype=np.float32))


def _attr(spec, v, name):
    return v.attributes.get(name, spec.functions[v.function].attributes.get(name))


def _close(builtin, got, v, out):
    tol = v.tolerances["float32"]
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), v.outputs[out],
                               rtol=tol["rtol"], atol=tol["atol"], err_msg=f"{builtin}: {v.id}")


def _agree(builtin, function, expressible, run):
    """A check: ``run(spec, v)`` of every float32 value vector of ``function`` that
    ``expressible(spec, v)`` admits agrees with the vector; at least one is compared."""
    def check(spec):
        compared = 0
        for v in _values(spec, function):
            if expressible(spec, v):
                _close(builtin, run(spec, v), v, spec.functions[function].returns[0])
                compared += 1
        assert compared, f"no {function} vector could be expressed with {builtin}"
    return check


# -- sdpa ------------------------------------------------------------------------------------

def _sdpa_expressible(spec, v) -> bool:
    x = {n: np.asarray(a) for n, a in v.inputs.items()}
    q, k, vv = x["q"], x["k"], x["v"]
    if not _finite(v) or _attr(spec, v, "softcap") is not None or q.ndim != 4 \
            or k.ndim != 4 or vv.ndim != 4 or set(x) - {"q", "k", "v", "mask", "bias"}:
        return False
    if set(v.attributes) - {"scale", "num_kv_heads", "softcap"} or q.shape[1] % k.shape[1]:
        return False
    mask = x.get("mask")
    return mask is None or bool(np.broadcast_to(mask, q.shape[:-1] + (k.shape[-2],)).any(-1).all())


def _sdpa(device):
    def run(spec, v):
        x = {n: np.asarray(a) for n, a in v.inputs.items()}
        scale = _attr(spec, v, "scale")
        scale = 1.0 / np.sqrt(x["q"].shape[-1]) if scale is None else scale
        mask, bias = x.get("mask"), x.get("bias")
        if bias is not None:  # an additive mask: the bias where a key is kept
            mask = np.where(True if mask is None else mask, bias, -np.inf).astype(np.float32)
        mask = None if mask is None else mx.array(mask)
        return np.array(mx.fast.scaled_dot_product_attention(
            _f32(x["q"]), _f32(x["k"]), _f32(x["v"]), scale=float(scale), mask=mask,
            stream=_stream(device)))
    return run


# -- softmax, norms, rope --------------------------------------------------------------------

def _softmax_run(device):
    def run(spec, v):
        axis = _attr(spec, v, "axis")
        return np.array(mx.softmax(_f32(v.inputs["x"]), axis=-1 if axis is None else int(axis),
                                   stream=_stream(device)))
    return run


def _norm_expressible(spec, v) -> bool:
    return _finite(v) and np.shape(v.inputs["x"])[-1] > 0 and not v.inputs.keys() - {"x"} \
        and _attr(spec, v, "variant") in (None, "canonical") and not _attr(spec, v, "unit_offset")


def _layer_norm(device, module: bool):
    def run(spec, v):
        eps, p = float(_attr(spec, v, "eps")), v.params
        if module:
            ln = nn.LayerNorm(np.shape(v.inputs["x"])[-1], eps=eps)
            ln.weight, ln.bias = _f32(p["gamma"]), _f32(p["beta"])
            return np.array(ln(_f32(v.inputs["x"])))
        return np.array(mx.fast.layer_norm(_f32(v.inputs["x"]), _f32(p["gamma"]), _f32(p["beta"]),
                                           eps, stream=_stream(device)))
    return run


def _rms_norm(device, module: bool):
    def run(spec, v):
        eps, gamma = float(_attr(spec, v, "eps")), _f32(v.params["gamma"])
        if module:
            rms = nn.RMSNorm(np.shape(v.inputs["x"])[-1], eps=eps)
            rms.weight = gamma
            return np.array(rms(_f32(v.inputs["x"])))
        return np.array(mx.fast.rms_norm(_f32(v.inputs["x"]), gamma, eps, stream=_stream(device)))
    return run


def _rope_expressible(spec, v) -> bool:
    x = np.asarray(v.inputs["x"])
    known = {"offset", "base", "convention"}
    return _finite(v) and x.ndim >= 2 and x.shape[-1] > 0 and not set(v.attributes) - known \
        and int(_attr(spec, v, "offset")) + x.shape[-2] <= FAR_POSITION


def _rope(device, module: bool):
    def run(spec, v):
        x = np.asarray(v.inputs["x"])  # (..., T, D)
        x = _f32(x if x.ndim >= 3 else x[None])  # MLX's rope wants a leading axis
        traditional = _attr(spec, v, "convention") == "interleaved"
        base, offset = float(_attr(spec, v, "base")), int(_attr(spec, v, "offset"))
        if module:
            out = nn.RoPE(x.shape[-1], traditional=traditional, base=base)(x, offset=offset)
        else:
            out = mx.fast.rope(x, x.shape[-1], traditional=traditional, base=base, scale=1.0,
                               offset=offset, stream=_stream(device))
        return np.array(out).reshape(np.shape(v.inputs["x"]))
    return run


# -- mha -----------------------------------------------------------------------------------

BIASES = ("b_q", "b_k", "b_v", "b_o")


def _mha_expressible(spec, v) -> bool:
    """nn.MultiHeadAttention: one width for the query and key projections, every bias or
    none, no GQA, a mask of rank 2 or 4 (MLX broadcasts a rank-3 mask as (H, T, S)) that
    keeps a key in every row, finite inputs."""
    p, x = v.params or {}, {n: np.asarray(a) for n, a in v.inputs.items()}
    kv = _attr(spec, v, "num_kv_heads")
    if not _finite(v) or (kv is not None and kv != v.attributes["num_heads"]) \
            or set(v.attributes) - {"num_heads", "num_kv_heads"}:
        return False
    if p["w_q"].shape[1] != p["w_k"].shape[1] or len({b in p for b in BIASES}) != 1:
        return False
    mask = x.get("mask")
    if mask is None:
        return True
    full = (x["query"].shape[0], v.attributes["num_heads"], x["query"].shape[1], x["key"].shape[1])
    return mask.ndim in (2, 4) and bool(np.broadcast_to(mask, full).any(-1).all())


def _mha(device):
    def run(spec, v):
        p, x = v.params, v.inputs
        m = nn.MultiHeadAttention(
            p["w_q"].shape[1], v.attributes["num_heads"], query_input_dims=p["w_q"].shape[0],
            key_input_dims=p["w_k"].shape[0], value_input_dims=p["w_v"].shape[0],
            value_dims=p["w_v"].shape[1], value_output_dims=p["w_o"].shape[1], bias="b_q" in p)
        for proj, w, b in (("query_proj", "w_q", "b_q"), ("key_proj", "w_k", "b_k"),
                           ("value_proj", "w_v", "b_v"), ("out_proj", "w_o", "b_o")):
            getattr(m, proj).weight = _f32(np.asarray(p[w]).T)  # MLX: (out, in)
            if b in p:
                getattr(m, proj).bias = _f32(p[b])
        mask = x.get("mask")
        return np.array(m(_f32(x["query"]), _f32(x["key"]), _f32(x["value"]),
                          mask=None if mask is None else mx.array(np.asarray(mask))))
    return run


# -- the documented differences, pinned ------------------------------------------------------

def pinned_sdpa_empty_row(device):
    """mlx.md: a row with nothing to attend to is the values' mean, not the spec's 0."""
    def check(spec):
        v = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)  # (B, H, S, V)
        keep = mx.array(np.array([[False, False, False]])[None, None])  # (1, 1, T=1, S)
        out = np.array(mx.fast.scaled_dot_product_attention(
            mx.array(v[:, :, :1]), mx.array(v), mx.array(v), scale=1.0, mask=keep,
            stream=_stream(device)))
        assert np.allclose(out[0, 0, 0], v[0, 0].mean(0)), (
            f"mx.fast.scaled_dot_product_attention's empty row is now {out[0, 0, 0]}, not the "
            f"values' mean: the difference mlx.md states is gone; update it")
    return check


def pinned_rope_width_zero(device):
    """mlx.md: mx.fast.rope refuses dims=0 (the spec's width-0 rope is the identity)."""
    def check(spec):
        try:
            mx.fast.rope(mx.zeros((1, 2, 0)), 0, traditional=False, base=10000.0, scale=1.0,
                         offset=0, stream=_stream(device))
        except ValueError:
            return
        raise AssertionError("mx.fast.rope now accepts width 0: mlx.md is stale; update it")
    return check


def builtin_checks(device):
    """The checks extras.extra_checks lacks (h/mlx2 judges mx.fast.scaled_dot_product_attention,
    rms_norm and layer_norm there; their agreement functions here are ``_sdpa``, ``_layer_norm``,
    ``_rms_norm``)."""
    return [
        ("agree/mx.softmax", _agree("mx.softmax", "softmax",
                                    lambda spec, v: _finite(v) and "mask" not in v.inputs,
                                    _softmax_run(device))),
        ("agree/nn.LayerNorm", _agree("nn.LayerNorm", "layer_norm", _norm_expressible,
                                      _layer_norm(device, module=True))),
        ("agree/nn.RMSNorm", _agree("nn.RMSNorm", "rms_norm", _norm_expressible,
                                    _rms_norm(device, module=True))),
        ("agree/mx.fast.rope", _agree("mx.fast.rope", "rope", _rope_expressible,
                                      _rope(device, module=False))),
        ("agree/nn.RoPE", _agree("nn.RoPE", "rope", _rope_expressible, _rope(device, module=True))),
        ("agree/nn.MultiHeadAttention", _agree("nn.MultiHeadAttention", "mha", _mha_expressible,
                                               _mha(device))),
        ("pinned/sdpa-empty-row", pinned_sdpa_empty_row(device)),
        ("pinned/rope-width-zero", pinned_rope_width_zero(device)),
    ]


def all_builtin_checks(device):
    """Every built-in judged here, the three h/mlx2 also judges included (for tests/mlx)."""
    return [*builtin_checks(device),
            ("agree/mx.fast.scaled_dot_product_attention", _agree(
                "mx.fast.scaled_dot_product_attention", "sdpa", _sdpa_expressible, _sdpa(device))),
            ("agree/mx.fast.layer_norm", _agree("mx.fast.layer_norm", "layer_norm", _norm_expressible,
                                                _layer_norm(device, module=False))),
            ("agree/mx.fast.rms_norm", _agree("mx.fast.rms_norm", "rms_norm", _norm_expressible,
                                              _rms_norm(device, module=False)))]
