"""TensorFlow-specific conformance checks (``Backend.extra_checks``), run by the suite's
``test_extras.py``:

- agreement of the golden vectors with Keras' own built-ins, through ``convert.py``:
  ``MultiHeadAttention``, ``LayerNormalization``, ``GRU(reset_after=True)``/``GRUCell``,
  ``Attention`` (Luong dot) and ``AdditiveAttention``, within the spec's tolerances, on
  every vector where the built-in's semantics coincide with the spec's (see
  spec/components/keras.md for where and why they do not);
- gradients in float64: the tape against central finite differences
  (``tf.test.compute_gradient``) for sdpa, mha, layer_norm, feedforward, encoder_layer,
  in the backend's mode (eager; a ``tf.function`` in graph; compiled by XLA in xla).
The dtype contract (a wrong dtype raises DTypeError, in every mode) is the suite's
``test_contract_errors.py``, for every backend.

The Keras agreement checks run the Keras built-ins eagerly whatever the mode: they check
the converters and the built-ins' semantics, which do not depend on how our functions run
(the golden vectors check those in every mode).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from attnspec.spec.compare import compare

DTYPE = "float64"  # Keras layers run in float64 so the spec's tightest tolerance applies


def _ordinary(v) -> bool:
    """No NaN or inf and no size-0 input: the Keras layers multiply masked keys by 0
    (0 * NaN = NaN) and give NaN for +inf scores, a difference keras.md states."""
    arrays = [np.asarray(a) for a in v.inputs.values()]
    return all(a.size > 0 and (a.dtype.kind != "f" or np.all(np.isfinite(a))) for a in arrays)


def _vectors(spec, component, keep=lambda v: True):
    return [v for v in spec.vectors if v.component == component and v.expect == "value"
            and not v.deprecated and DTYPE in v.dtypes and _ordinary(v) and keep(v)]


def _agree(v, outputs: dict, device: str):
    tol = v.tolerances[DTYPE]
    for name, got in outputs.items():
        c = compare(np.asarray(got, dtype=np.float64), v.outputs[name], DTYPE, tol)
        assert c.ok, f"{v.id}: Keras built-in disagrees with the spec on {device}: " + \
            c.describe(f"output {name!r}")


def _head_independent_mask(mask, target):
    """The (B, T, S) mask a Keras layer can take, or None when the spec's mask differs per
    head or leaves a query row with nothing to attend (Keras then gives uniform weights)."""
    if mask is None:
        return np.ones(target[:1] + target[-2:], dtype=bool)
    full = np.broadcast_to(mask, target)
    if full.ndim == 4:
        if not (full == full[:, :1]).all():
            return None
        full = full[:, 0]
    if not full.any(axis=-1).all():
        return None
    return np.ascontiguousarray(full)


def _key_mask(mask, target):
    """(B, S) when the mask depends on the key only (Keras' value_mask), else None."""
    if mask is None:
        return np.ones((target[0], target[2]), dtype=bool)
    full = np.broadcast_to(mask, target)
    if not (full == full[:, :1]).all() or not full.any(axis=-1).all():
        return None
    return np.ascontiguousarray(full[:, 0])


def _run(device, fn):
    with tf.device(f"/{device.upper()}:0"):
        return fn()


def check_keras_mha(device):
    def run(spec):
        from . import convert

        done = 0
        for v in _vectors(spec, "mha"):
            q, k, val = (v.inputs[n] for n in ("query", "key", "value"))
            heads = v.attributes["num_heads"]
            target = (q.shape[0], heads, q.shape[1], k.shape[1])
            mask = _head_independent_mask(v.inputs.get("mask"), target)
            biases = [b for b in convert.MHA_BIASES if b in v.params]
            if mask is None or len(biases) not in (0, 4) or \
                    v.attributes.get("num_kv_heads", heads) != heads:  # no grouped query
                continue

            def call(v=v, q=q, k=k, val=val, mask=mask, heads=heads):
                layer = convert.mha_to_keras(v.params, num_heads=heads, dtype=DTYPE)
                return layer(q, val, k, attention_mask=mask, return_attention_scores=True)
            out, weights = _run(device, call)
            _agree(v, {"output": out, "weights": weights}, device)
            done += 1
        assert done >= 3, f"only {done} mha vectors fit keras.layers.MultiHeadAttention"
    return run


def check_keras_gqa(device):
    """keras.layers.GroupQueryAttention against the mha vectors with num_kv_heads that it can
    express (K = V, Do = Dq, all biases or none, a mask the same for every head)."""
    def run(spec):
        from attnspec.spec.errors import ConfigError

        from . import convert

        done = 0
        for v in _vectors(spec, "mha", lambda v: "num_kv_heads" in v.attributes):
            q, k, val = (v.inputs[n] for n in ("query", "key", "value"))
            heads, kv_heads = v.attributes["num_heads"], v.attributes["num_kv_heads"]
            target = (q.shape[0], heads, q.shape[1], k.shape[1])
            mask = _head_independent_mask(v.inputs.get("mask"), target)
            biases = [b for b in convert.MHA_BIASES if b in v.params]
            if mask is None or len(biases) not in (0, 4):
                continue
            try:
                layer = _run(device, lambda v=v, h=heads, g=kv_heads: convert.gqa_to_keras(
                    v.params, num_heads=h, num_kv_heads=g, dtype=DTYPE))
            except ConfigError:  # K != V or Do != Dq: not expressible
                continue
            out, weights = _run(device, lambda layer=layer, q=q, k=k, val=val, mask=mask: layer(
                q, val, k, attention_mask=mask, return_attention_scores=True))
            _agree(v, {"output": out, "weights": weights}, device)
            done += 1
        assert done >= 2, f"only {done} mha vectors fit keras.layers.GroupQueryAttention"
    return run


def check_keras_layer_norm(device):
    def run(spec):
        from . import convert

        vs = _vectors(spec, "layer_norm",
                      lambda v: v.attributes.get("variant", "canonical") == "canonical")
        for v in vs:
            def call(v=v):
                layer = convert.layer_norm_to_keras(v.params, eps=v.attributes.get("eps", 1e-5),
                                                    dtype=DTYPE)
                return layer(v.inputs["x"])
            _agree(v, {"y": _run(device, call)}, device)
        assert len(vs) >= 3, f"only {len(vs)} layer_norm vectors checked"
    return run


def check_keras_gru(device):
    def run(spec):
        from . import convert

        done = 0
        for v in _vectors(spec, "gru") + _vectors(spec, "gru_cell"):
            if v.function == "gru_cell":
                def call(v=v):
                    cell = convert.gru_to_keras(v.params, dtype=DTYPE, cell=True)
                    h, _ = cell(v.inputs["x"], [v.inputs["h"]])
                    return {"h": h}
            else:
                def call(v=v):
                    layer = convert.gru_to_keras(v.params, dtype=DTYPE)
                    x = v.inputs["x"]
                    if x.shape[1] == 0:
                        return None  # Keras cannot run an empty sequence
                    h0 = v.inputs.get("h0")
                    h0 = np.zeros((x.shape[0], layer.units)) if h0 is None else h0
                    outputs, h_last = layer(x, initial_state=[h0])
                    return {"outputs": outputs, "h_last": h_last}
            got = _run(device, call)
            if got is not None:
                _agree(v, got, device)
                done += 1
        assert done >= 3, f"only {done} GRU vectors checked"
    return run


def check_keras_attention(device):
    def run(spec):
        from . import convert

        done = 0
        for v in _vectors(spec, "luong_attention",
                          lambda v: v.attributes.get("score", "dot") == "dot") + \
                _vectors(spec, "additive_attention"):
            query, keys = v.inputs["query"], v.inputs["keys"]
            values = v.inputs.get("values", keys)
            key_mask = _key_mask(v.inputs.get("mask"),
                                 (query.shape[0], query.shape[1], keys.shape[1]))
            if key_mask is None:
                continue

            def call(v=v, query=query, keys=keys, values=values, key_mask=key_mask):
                if v.function == "luong_attention":
                    layer = convert.luong_dot_to_keras(dtype=DTYPE)
                    q, k = query, keys
                else:
                    dense_q, dense_k, layer = convert.additive_to_keras(v.params, dtype=DTYPE)
                    q, k = dense_q(query), dense_k(keys)
                return layer([q, values, k], mask=[None, key_mask],
                             return_attention_scores=True)
            context, weights = _run(device, call)
            _agree(v, {"context": context, "weights": weights}, device)
            done += 1
        assert done >= 4, f"only {done} Luong/additive vectors fit keras Attention layers"
    return run


# ---- gradients ------------------------------------------------------------------------------

def _rand(rng, *shape):
    return tf.constant(rng.uniform(-1, 1, shape), dtype=tf.float64)


def _grad_case(name, rng):
    from . import attention, feedforward, layers, multihead, norm

    B, T, S, D, H, F = 2, 3, 4, 4, 2, 6
    if name == "sdpa":
        args = [_rand(rng, B, T, 3), _rand(rng, B, S, 3), _rand(rng, B, S, 2)]
        return args, lambda q, k, v: attention.sdpa(q, k, v)[0]
    mha_p = {"w_q": (D, D), "w_k": (D, D), "w_v": (D, D), "w_o": (D, D), "b_q": (D,),
             "b_k": (D,), "b_v": (D,), "b_o": (D,)}
    ffn_p = {"w1": (D, F), "b1": (F,), "w2": (F, D), "b2": (D,)}
    if name == "mha":
        p = {k: _rand(rng, *s) for k, s in mha_p.items()}
        args = [_rand(rng, B, T, D), _rand(rng, B, S, D), p["w_q"], p["w_o"]]

        def f(x, m, w_q, w_o):
            return multihead.mha(x, m, m, num_heads=H, params={**p, "w_q": w_q, "w_o": w_o})[0]
        return args, f
    if name == "layer_norm":
        args = [_rand(rng, B, T, D), _rand(rng, D), _rand(rng, D)]
        return args, lambda x, g, b: norm.layer_norm(x, params={"gamma": g, "beta": b})
    if name == "feedforward":
        p = {k: _rand(rng, *s) for k, s in ffn_p.items()}
        args = [_rand(rng, B, T, D), p["w1"], p["w2"]]
        return args, lambda x, w1, w2: feedforward.feedforward(
            x, activation="gelu", params={**p, "w1": w1, "w2": w2})
    if name == "encoder_layer":
        p = {f"self_attn.{k}": _rand(rng, *s) for k, s in mha_p.items()}
        p.update({f"ffn.{k}": _rand(rng, *s) for k, s in ffn_p.items()})
        for n in ("norm1", "norm2"):
            p[f"{n}.gamma"], p[f"{n}.beta"] = _rand(rng, D) + 1, _rand(rng, D)
        args = [_rand(rng, B, T, D), p["self_attn.w_v"], p["ffn.w1"], p["norm1.gamma"]]

        def f(x, w_v, w1, g1):
            q = {**p, "self_attn.w_v": w_v, "ffn.w1": w1, "norm1.gamma": g1}
            return layers.encoder_layer(x, num_heads=H, activation="gelu", params=q)
        return args, f
    raise KeyError(name)


def check_gradient(name, device, mode="eager"):
    """The tape's gradient against finite differences; in mode graph/xla the function is
    a ``tf.function`` (``jit_compile=True`` for xla), so the graph's gradient is checked."""
    def run(spec):
        rng = np.random.default_rng(sum(map(ord, name)))

        def go():
            args, f = _grad_case(name, rng)
            if mode != "eager":
                f = tf.function(f, autograph=False, jit_compile=(mode == "xla"))
            theory, numeric = tf.test.compute_gradient(f, args, delta=1e-6)
            return theory, numeric
        theory, numeric = _run(device, go)
        for i, (a, b) in enumerate(zip(theory, numeric)):
            err = np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b)))
            assert err < 1e-7, (f"{name}: the tape's gradient w.r.t. argument {i} differs from "
                                f"finite differences by {err:.3g} (float64)")
    return run


def extra_checks(backend, device):
    out = [("agree/keras.layers.MultiHeadAttention", check_keras_mha(device)),
           ("agree/keras.layers.GroupQueryAttention", check_keras_gqa(device)),
           ("agree/keras.layers.LayerNormalization", check_keras_layer_norm(device)),
           ("agree/keras.layers.GRU", check_keras_gru(device)),
           ("agree/keras.layers.Attention+AdditiveAttention", check_keras_attention(device))]
    out += [(f"grad/{n}", check_gradient(n, device, backend.mode))
            for n in ("sdpa", "mha", "layer_norm", "feedforward", "encoder_layer")]
    return out
