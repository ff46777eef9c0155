"""Converters between spec parameters ({canonical path: array}, ``y = x @ W + b``) and
Keras' own built-in layers. Each layout difference is handled here and only here:

- ``keras.layers.MultiHeadAttention``: kernels (D, H, K) per projection and (H, V, Do)
  for the output; the spec's fused (D, H*K), head h owning columns h*K:(h+1)*K, is the
  same memory read row-major, so the conversion is a reshape. Keras has one
  ``use_bias`` for all four projections: all four spec biases or none.
- ``keras.layers.LayerNormalization``: gamma/beta as they are; epsilon is always set
  explicitly (Keras' default 1e-3 is not the spec's 1e-5).
- ``keras.layers.GRU(reset_after=True)`` / ``GRUCell``: gate blocks z, r, h in Keras,
  r, z, n in the spec (PyTorch/cuDNN): the column blocks are permuted; Keras' bias is
  (2, 3H) = [input bias; recurrent bias].
- ``keras.layers.AdditiveAttention``: no projections; its ``scale`` (use_scale=True) is
  the spec's ``v``, and the spec's ``w_q``/``w_k`` become bias-free ``Dense`` layers.
- ``keras.layers.Attention(use_scale=False)`` is Luong ``score="dot"``; it has no weights.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
from attnspec.spec.errors import ConfigError, ParameterError

from .. import _checks as check

MHA_BIASES = ("b_q", "b_k", "b_v", "b_o")


def _np(x) -> np.ndarray:
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


# ---- MultiHeadAttention ------------------------------------------------------------------

def mha_to_keras(params, *, num_heads: int, dtype="float64") -> keras.layers.MultiHeadAttention:
    """A built ``keras.layers.MultiHeadAttention`` holding the spec's ``mha`` parameters."""
    p = check.params_of(params)
    heads = check.integer("num_heads", num_heads, lo=1)
    w_q, w_k = _np(p.require("w_q", (None, None))), _np(p.require("w_k", (None, None)))
    w_v, w_o = _np(p.require("w_v", (None, None))), _np(p.require("w_o", (None, None)))
    k = check.divides(f"{p.path('w_q')}.shape[1]", heads, w_q.shape[1], "H*K")
    v = check.divides(f"{p.path('w_v')}.shape[1]", heads, w_v.shape[1], "H*V")
    present = [b for b in MHA_BIASES if b in p]
    if present and len(present) != 4:
        raise ParameterError(f"keras.layers.MultiHeadAttention has one use_bias for all four "
                             f"projections; got only {[p.path(b) for b in present]}")
    layer = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=k, value_dim=v,
                                            output_shape=w_o.shape[1],
                                            use_bias=bool(present), dtype=dtype)
    layer.build((None, None, w_q.shape[0]), (None, None, w_v.shape[0]),
                (None, None, w_k.shape[0]))
    for dense, w, b, shape in ((layer.query_dense, w_q, "b_q", (w_q.shape[0], heads, k)),
                               (layer.key_dense, w_k, "b_k", (w_k.shape[0], heads, k)),
                               (layer.value_dense, w_v, "b_v", (w_v.shape[0], heads, v))):
        dense.kernel.assign(w.reshape(shape))
        if present:
            dense.bias.assign(_np(p.require(b, (heads * shape[2],))).reshape(heads, shape[2]))
    layer.output_dense.kernel.assign(w_o.reshape(heads, v, w_o.shape[1]))
    # Keras casts the Python float 1/sqrt(K) through a float32 tensor, so in float64 its
    # scale is 1/sqrt(K) rounded to float32 (a relative error up to 6e-8 on every score).
    # A NumPy scalar of the layer's dtype keeps the spec's exact scale.
    if hasattr(layer, "_inverse_sqrt_key_dim"):
        layer._inverse_sqrt_key_dim = np.dtype(dtype).type(1.0 / np.sqrt(k))
    if present:
        layer.output_dense.bias.assign(_np(p.require("b_o", (w_o.shape[1],))))
    return layer


def mha_from_keras(layer: keras.layers.MultiHeadAttention) -> dict:
    """The spec's ``mha`` parameters (and ``num_heads``) of a built Keras MHA layer."""
    out = {}
    for name, dense in (("q", layer.query_dense), ("k", layer.key_dense),
                        ("v", layer.value_dense)):
        kernel = _np(dense.kernel)  # (D, H, K)
        out[f"w_{name}"] = kernel.reshape(kernel.shape[0], -1)
        if layer._use_bias:
            out[f"b_{name}"] = _np(dense.bias).reshape(-1)
    kernel = _np(layer.output_dense.kernel)  # (H, V, Do)
    out["w_o"] = kernel.reshape(-1, kernel.shape[-1])
    if layer._use_bias:
        out["b_o"] = _np(layer.output_dense.bias)
    return out


def gqa_to_keras(params, *, num_heads: int, num_kv_heads: int,
                 dtype="float64") -> keras.layers.GroupQueryAttention:
    """A built ``keras.layers.GroupQueryAttention`` (Keras 3's grouped-query attention,
    ``GroupedQueryAttention`` in the docs) holding the spec's ``mha`` parameters with
    ``num_kv_heads``: one ``head_dim`` for keys and values (K = V), an output as wide as the
    query (Do = Dq), and one ``use_bias`` for all four projections. Keras repeats kv head g
    for query heads g * H / H_kv .. (``ops.repeat`` on the head axis): the spec's grouping."""
    p = check.params_of(params)
    heads = check.integer("num_heads", num_heads, lo=1)
    w_q = _np(p.require("w_q", (None, None)))
    heads, kv_heads, hk, kv_k, hv = check.heads(p, heads, w_q.shape[0],
                                               check.shape(p.require("w_v", (None, None)))[0],
                                               num_kv_heads)
    w_k = _np(p.require("w_k", (None, kv_k)))
    w_v, w_o = _np(p["w_v"]), _np(p.require("w_o", (hv, None)))
    k, v = hk // heads, hv // heads
    if k != v or w_o.shape[1] != w_q.shape[0]:
        raise ConfigError(f"keras.layers.GroupQueryAttention has one head_dim (K = V) and an "
                          f"output as wide as the query; got K={k}, V={v}, "
                          f"{p.path('w_o')} of shape {w_o.shape} for a query of width "
                          f"{w_q.shape[0]}")
    present = [b for b in MHA_BIASES if b in p]
    if present and len(present) != 4:
        raise ParameterError(f"keras.layers.GroupQueryAttention has one use_bias for all four "
                             f"projections; got only {[p.path(b) for b in present]}")
    layer = keras.layers.GroupQueryAttention(head_dim=k, num_query_heads=heads,
                                             num_key_value_heads=kv_heads,
                                             use_bias=bool(present), dtype=dtype)
    layer.build((None, None, w_q.shape[0]), (None, None, w_v.shape[0]),
                (None, None, w_k.shape[0]))
    for dense, w, b, n in ((layer._query_dense, w_q, "b_q", heads),
                           (layer._key_dense, w_k, "b_k", kv_heads),
                           (layer._value_dense, w_v, "b_v", kv_heads)):
        dense.kernel.assign(w.reshape(w.shape[0], n, k))  # (D, heads, head_dim)
        if present:
            dense.bias.assign(_np(p.require(b, (n * k,))).reshape(n, k))
    layer._output_dense.kernel.assign(w_o.reshape(heads, k, w_o.shape[1]))
    if present:
        layer._output_dense.bias.assign(_np(p.require("b_o", (w_o.shape[1],))))
    if hasattr(layer, "_inverse_sqrt_head_dim"):  # the exact scale, as in mha_to_keras
        layer._inverse_sqrt_head_dim = np.dtype(dtype).type(1.0 / np.sqrt(k))
    return layer


# ---- LayerNormalization ------------------------------------------------------------------

def layer_norm_to_keras(params, *, eps: float, dtype="float64") -> keras.layers.LayerNormalization:
    p = check.params_of(params)
    gamma = _np(p.require("gamma", (None,)))
    beta = _np(p.require("beta", gamma.shape))
    layer = keras.layers.LayerNormalization(axis=-1, epsilon=float(eps), dtype=dtype)
    layer.build((None, gamma.shape[0]))
    layer.gamma.assign(gamma)
    layer.beta.assign(beta)
    return layer


def layer_norm_from_keras(layer: keras.layers.LayerNormalization) -> tuple[dict, float]:
    """(params, eps) of a Keras LayerNormalization over the last axis."""
    axis = layer.axis if isinstance(layer.axis, int) else tuple(layer.axis)
    if axis not in (-1, (-1,)) or not (layer.center and layer.scale) or layer.rms_scaling:
        raise ConfigError(f"only LayerNormalization(axis=-1, center=True, scale=True) maps "
                          f"to the spec's layer_norm, got axis={axis}")
    return {"gamma": _np(layer.gamma), "beta": _np(layer.beta)}, float(layer.epsilon)


# ---- GRU -----------------------------------------------------------------------------------

def _blocks(w, hidden: int, order) -> np.ndarray:
    """Permute the three gate column blocks of ``w`` (.., 3H) by ``order``."""
    parts = [w[..., i * hidden:(i + 1) * hidden] for i in range(3)]
    return np.concatenate([parts[i] for i in order], axis=-1)


_SPEC_TO_KERAS = (1, 0, 2)  # spec r, z, n -> Keras z, r, h (a swap: its own inverse)


def _gru_arrays(params):
    p = check.params_of(params)
    w_hh = _np(p.require("w_hh", (None, None)))
    hidden = w_hh.shape[0]
    w_ih = _np(p.require("w_ih", (None, 3 * hidden)))
    zero = np.zeros(3 * hidden, dtype=w_hh.dtype)
    b_ih = _np(p.require("b_ih", (3 * hidden,))) if "b_ih" in p else zero
    b_hh = _np(p.require("b_hh", (3 * hidden,))) if "b_hh" in p else zero
    kernel = _blocks(w_ih, hidden, _SPEC_TO_KERAS)
    recurrent = _blocks(w_hh, hidden, _SPEC_TO_KERAS)
    bias = np.stack([_blocks(b_ih, hidden, _SPEC_TO_KERAS), _blocks(b_hh, hidden, _SPEC_TO_KERAS)])
    return hidden, w_ih.shape[0], kernel, recurrent, bias


def gru_to_keras(params, *, dtype="float64", cell=False):
    """A built ``keras.layers.GRU(reset_after=True, return_sequences=True,
    return_state=True)`` (or ``GRUCell`` with ``cell=True``) with the spec's GRU weights."""
    hidden, inputs, kernel, recurrent, bias = _gru_arrays(params)
    kw = dict(activation="tanh", recurrent_activation="sigmoid", reset_after=True,
              use_bias=True, dtype=dtype)
    if cell:
        layer = keras.layers.GRUCell(hidden, **kw)
        layer.build((None, inputs))
        target = layer
    else:
        layer = keras.layers.GRU(hidden, return_sequences=True, return_state=True, **kw)
        layer.build((None, None, inputs))
        target = layer.cell
    target.kernel.assign(kernel)
    target.recurrent_kernel.assign(recurrent)
    target.bias.assign(bias)
    return layer


def gru_from_keras(layer) -> dict:
    cell = getattr(layer, "cell", layer)
    if not cell.reset_after:
        raise ConfigError("only GRU(reset_after=True) maps to the spec's GRU (reset applied "
                          "after the hidden matmul); reset_after=False is another recurrence")
    hidden = cell.units
    bias = _np(cell.bias)
    return {"w_ih": _blocks(_np(cell.kernel), hidden, _SPEC_TO_KERAS),
            "w_hh": _blocks(_np(cell.recurrent_kernel), hidden, _SPEC_TO_KERAS),
            "b_ih": _blocks(bias[0], hidden, _SPEC_TO_KERAS),
            "b_hh": _blocks(bias[1], hidden, _SPEC_TO_KERAS)}


# ---- Attention / AdditiveAttention -----------------------------------------------------------

def luong_dot_to_keras(*, dtype="float64") -> keras.layers.Attention:
    """Luong ``score="dot"`` (unscaled q.k): ``keras.layers.Attention(use_scale=False)``,
    called as ``layer([query, values, keys])``."""
    return keras.layers.Attention(use_scale=False, score_mode="dot", dtype=dtype)


def additive_to_keras(params, *, dtype="float64"):
    """(dense_q, dense_k, attention): the spec's ``additive_attention`` is
    ``attention([dense_q(query), values, dense_k(keys)])`` with ``attention.scale = v``."""
    p = check.params_of(params)
    w_q = _np(p.require("w_q", (None, None)))
    a = w_q.shape[1]
    w_k, v = _np(p.require("w_k", (None, a))), _np(p.require("v", (a,)))
    dense_q = keras.layers.Dense(a, use_bias=False, dtype=dtype)
    dense_k = keras.layers.Dense(a, use_bias=False, dtype=dtype)
    dense_q.build((None, w_q.shape[0]))
    dense_k.build((None, w_k.shape[0]))
    dense_q.kernel.assign(w_q)
    dense_k.kernel.assign(w_k)
    attention = keras.layers.AdditiveAttention(use_scale=True, dtype=dtype)
    attention.build([(None, None, a), (None, None, None), (None, None, a)])
    attention.scale.assign(v)
    return dense_q, dense_k, attention


def additive_from_keras(dense_q, dense_k, attention) -> dict:
    return {"w_q": _np(dense_q.kernel), "w_k": _np(dense_k.kernel), "v": _np(attention.scale)}
