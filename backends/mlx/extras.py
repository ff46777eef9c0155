"""The MLX backend's own conformance checks (``extra_checks``, run as ``test_extras``):
agreement of MLX's fused built-ins with the golden vectors, where they can express them
(spec/components/mlx.md states where they cannot):

- ``mx.fast.rms_norm`` and ``mx.fast.layer_norm`` (the canonical variant) on every finite
  rms_norm / layer_norm value vector;
- ``mx.fast.rope`` on the rope vectors of non-zero width at positions below FAR, and pinned
  to differ beyond them (its angles are float32);
- ``mx.fast.scaled_dot_product_attention`` on the sdpa value vectors of rank 4 with finite
  inputs, no softcap, no bias, and a key kept in every row (its fully masked row is the
  average of the values, not zero: pinned by tests/mlx).

Inputs are float32 (MLX's float64 is not claimed); the vectors' float32 tolerances apply.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from .. import _rope as rope_rules


def _f32(a):
    return mx.array(np.asarray(a, dtype=np.float32))


def _finite(v) -> bool:
    return all(np.asarray(a).dtype.kind != "f" or np.all(np.isfinite(a))
               for a in (*v.inputs.values(), *v.params.values()))


def _close(name, got, v, out_name):
    tol = v.tolerances["float32"]
    np.testing.assert_allclose(np.array(got.astype(mx.float32), dtype=np.float64), v.outputs[out_name],
                               rtol=tol["rtol"], atol=tol["atol"], err_msg=f"{name}: {v.id}")


def _values(spec, function):
    return [v for v in spec.vectors if v.function == function and v.expect == "value"
            and not v.deprecated and _finite(v)]


def agree_norms(device):
    def check(spec):
        compared = 0
        for v in _values(spec, "rms_norm"):
            x = _f32(v.inputs["x"])
            if x.shape[-1] == 0 or v.attributes.get("unit_offset"):  # mx.fast has no (1 + w)
                continue
            got = mx.fast.rms_norm(x, _f32(v.params["gamma"]), v.attributes.get("eps", 1e-6))
            _close("mx.fast.rms_norm", got, v, "y")
            compared += 1
        for v in _values(spec, "layer_norm"):
            x = _f32(v.inputs["x"])
            if v.attributes.get("variant", "canonical") != "canonical" or x.shape[-1] == 0:
                continue
            got = mx.fast.layer_norm(x, _f32(v.params["gamma"]), _f32(v.params["beta"]),
                                     v.attributes.get("eps", 1e-5))
            _close("mx.fast.layer_norm", got, v, "y")
            compared += 1
        assert compared, "no norm vector was compared with mx.fast"
    return check


def _sdpa_expressible(v) -> bool:
    if v.attributes.get("softcap") is not None or "bias" in v.inputs:
        return False
    q, k, vv = (np.asarray(v.inputs[n]) for n in ("q", "k", "v"))
    if not (q.ndim == k.ndim == vv.ndim == 4) or q.shape[0] != k.shape[0] or 0 in q.shape + k.shape:
        return False
    mask = v.inputs.get("mask")
    full = q.shape[:-1] + (k.shape[-2],)
    return mask is None or bool(np.broadcast_to(mask, full).any(axis=-1).all())


def agree_fast_sdpa(device):
    def check(spec):
        compared = 0
        for v in _values(spec, "sdpa"):
            if not _sdpa_expressible(v):
                continue
            q, k, vv = (_f32(v.inputs[n]) for n in ("q", "k", "v"))
            scale = v.attributes.get("scale") or 1 / np.sqrt(q.shape[-1])
            mask = v.inputs.get("mask")
            mask = None if mask is None else mx.array(np.asarray(mask, dtype=bool))
            got = mx.fast.scaled_dot_product_attention(q, k, vv, scale=float(scale), mask=mask)
            _close("mx.fast.scaled_dot_product_attention", got, v, "output")
            compared += 1
        assert compared, "no sdpa vector could be expressed with mx.fast.scaled_dot_product_attention"
    return check


FAR = 1024  # positions from here on: mx.fast.rope's float32 angles leave the float32 tolerance


def _fast_rope(v):
    """mx.fast.rope on a rope vector (traditional=True: the interleaved convention; dims: the
    rotary_dim; a scaling rule as mlx-lm spells it: freqs = 1 / theta_i, the rotated features
    multiplied by the attention factor first)."""
    x, a = _f32(v.inputs["x"]), v.attributes
    interleaved = a.get("convention", "interleaved") == "interleaved"
    r = x.shape[-1] if a.get("rotary_dim") is None else int(a["rotary_dim"])
    base, offset = float(a.get("base", 10000.0)), int(a.get("offset", 0))
    freq = {"base": base}
    if a.get("scaling") is not None:
        theta, m = rope_rules.scaled(a["scaling"], rotary_dim=r, base=base, seq_len=offset + x.shape[-2])
        freq = {"base": None, "freqs": mx.array((1.0 / theta).astype(np.float32))}
        x = mx.concatenate([x[..., :r] * m, x[..., r:]], axis=-1)
    y = mx.fast.rope(x[None] if x.ndim == 2 else x, r, traditional=interleaved,  # rank >= 3
                     scale=1.0, offset=offset, **freq)
    return y.reshape(v.outputs["y"].shape)


def _rope_vectors(spec, far: bool):
    """The rope vectors mx.fast.rope can take (width > 0: it refuses 0), near or far."""
    found = []
    for v in _values(spec, "rope"):
        shape = np.shape(v.inputs["x"])
        if len(shape) < 2 or 0 in shape:
            continue
        if (int(v.attributes.get("offset", 0)) + shape[-2] >= FAR) == far:
            found.append(v)
    return found


def agree_fast_rope(device):
    def check(spec):
        near = _rope_vectors(spec, far=False)
        for v in near:
            _close("mx.fast.rope", _fast_rope(v), v, "y")
        assert near, "no rope vector was compared with mx.fast.rope"
    return check


def pinned_fast_rope_far_positions(device):
    """mx.fast.rope computes its angles in float32: far positions differ (spec/components/mlx.md)."""
    def check(spec):
        far = _rope_vectors(spec, far=True)
        assert far, "no rope vector at a far position"
        for v in far:
            try:
                _close("mx.fast.rope", _fast_rope(v), v, "y")
            except AssertionError:
                return
        raise AssertionError("mx.fast.rope now agrees at far positions: update mlx.md")
    return check


def extra_checks(backend, device):
    from . import extras_builtins

    return [("agree/mx.fast.rms_norm+layer_norm", agree_norms(device)),
            ("agree/mx.fast.rope", agree_fast_rope(device)),
            ("pinned/mx.fast.rope-float32-angles", pinned_fast_rope_far_positions(device)),
            ("agree/mx.fast.scaled_dot_product_attention", agree_fast_sdpa(device)),
            *extras_builtins.builtin_checks(device)]
