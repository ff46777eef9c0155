"""Known wrong conventions, to name a student's likely mistake (``attnspec check``).

Each :class:`Variant` is a NumPy implementation of a component with one convention the spec
does not follow (``-1e9`` fills, unbiased variance, tanh GELU...), and the page section that
explains it. When a vector fails, ``likely_mistakes`` runs the component's variants on the
vector's inputs; one whose outputs match what the user's code returned (within the vector's
tolerance) is named: "your output matches <variant> (see <page>#<anchor>)".
The planted mutants of tests/mutants.py test the backends; these live in the package,
because ``check`` runs them for users.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from attnspec.spec.compare import compare

CONVENTIONS = "conventions-and-how-others-differ"
EDGES = "edge-cases"


@dataclass(frozen=True)
class Variant:
    name: str  # what the code did, as the student would say it
    page: str  # spec/components/<component>.md
    anchor: str
    run: Callable  # (inputs, attributes, params) -> {output name: array}, or None if n/a

    @property
    def where(self) -> str:
        return f"{self.page}#{self.anchor}"


# ---- sdpa ---------------------------------------------------------------------------------

def _softmax(s: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(s, axis=axis, keepdims=True)
        e = np.exp(s - m)
        return e / np.sum(e, axis=axis, keepdims=True)


def _sdpa(fill=None, axis=-1, scale_by=None):
    def run(inputs, attributes, params):
        if attributes.get("num_kv_heads") or attributes.get("softcap"):
            return None
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        scale = attributes.get("scale")
        if scale is None:
            scale = 1.0 / np.sqrt((v if scale_by == "d_v" else q).shape[-1])
        if scale_by == "none":
            scale = 1.0
        with np.errstate(all="ignore"):
            s = scale * (q @ np.swapaxes(k, -1, -2))
            if inputs.get("bias") is not None:
                s = s + inputs["bias"]
            mask = inputs.get("mask")
            if mask is not None:
                s = np.where(mask, s, -np.inf if fill is None else fill)
            w = _softmax(s, axis)
            if fill is None and mask is not None:  # the spec's zeros on a fully masked row
                w = np.where(np.any(mask, axis=-1, keepdims=True) | np.zeros(w.shape, bool), w, 0)
            return {"output": w @ v, "weights": w}

    return run


def _sdpa_nan_times_zero(inputs, attributes, params):
    """Masked weights exactly 0, but a NaN value behind a masked key still poisons the row
    (0 * NaN = NaN), as a plain ``weights @ v`` does."""
    mask = inputs.get("mask")
    v = inputs["v"]
    if mask is None or not np.isnan(v).any():
        return None
    out = _sdpa()(inputs, attributes, params)
    if out is not None:
        with np.errstate(invalid="ignore"):
            out["output"] = (out["weights"][..., :, :, None] * v[..., None, :, :]).sum(-2)
    return out


SDPA = [
    Variant("-1e9 fills (masked_fill(-1e9)): a fully masked row averages the values "
            "instead of giving zeros", "spec/components/sdpa.md", EDGES, _sdpa(fill=-1e9)),
    Variant("-inf fills without a guard: a fully masked row is NaN", "spec/components/sdpa.md",
            EDGES, _sdpa(fill=-np.inf)),
    Variant("softmax over the wrong axis (the queries', axis=-2)", "spec/components/sdpa.md",
            CONVENTIONS, _sdpa(axis=-2)),
    Variant("scaling by 1/sqrt(d_v), the value width, instead of 1/sqrt(d_k)",
            "spec/components/sdpa.md", CONVENTIONS, _sdpa(scale_by="d_v")),
    Variant("no 1/sqrt(d_k) scaling", "spec/components/sdpa.md", CONVENTIONS,
            _sdpa(scale_by="none")),
    Variant("NaN from a masked value times 0 (weights @ v with a NaN behind a masked key)",
            "spec/components/sdpa.md", EDGES, _sdpa_nan_times_zero),
]


# ---- layer_norm -----------------------------------------------------------------------------

def _layer_norm(ddof=0, eps_outside=False, eps=None):
    def run(inputs, attributes, params):
        x = inputs["x"]
        e = attributes.get("eps", 1e-5) if eps is None else eps
        if attributes.get("variant", "canonical") != "canonical":
            return None
        with np.errstate(all="ignore"):
            mu = x.mean(axis=-1, keepdims=True)
            var = x.var(axis=-1, keepdims=True, ddof=ddof) if x.shape[-1] > ddof else np.nan * mu
            norm = (x - mu) / (np.sqrt(var) + e if eps_outside else np.sqrt(var + e))
        return {"y": norm * params.get("gamma", 1.0) + params.get("beta", 0.0)}

    return run


LAYER_NORM = [
    Variant("the Annotated Transformer's LayerNorm (unbiased std, eps outside the root): "
            "variant='annotated'", "spec/components/layer_norm.md", CONVENTIONS,
            _layer_norm(ddof=1, eps_outside=True)),
    Variant("unbiased variance (torch.var / x.std() default, ddof=1)",
            "spec/components/layer_norm.md", CONVENTIONS, _layer_norm(ddof=1)),
    Variant("eps added outside the square root ((x - mean) / (std + eps))",
            "spec/components/layer_norm.md", CONVENTIONS, _layer_norm(eps_outside=True)),
]


# ---- softmax, feedforward -----------------------------------------------------------------

def _softmax_axis(inputs, attributes, params):
    x, axis = inputs["x"], attributes.get("axis", -1)
    if x.ndim < 2 or inputs.get("mask") is not None:
        return None
    other = -2 if axis in (-1, x.ndim - 1) else -1
    return {"y": _softmax(x, other)}


def _feedforward(activation):
    def run(inputs, attributes, params):
        from math import erf, pi, sqrt

        if attributes.get("activation", "relu") not in ("gelu", "gelu_tanh"):
            return None
        h = inputs["x"] @ params["w1"] + params["b1"]
        if activation == "gelu_tanh":
            h = 0.5 * h * (1 + np.tanh(sqrt(2 / pi) * (h + 0.044715 * h**3)))
        else:
            h = 0.5 * h * (1 + np.vectorize(erf)(h / sqrt(2)))
        return {"y": h @ params["w2"] + params["b2"]}

    return run


SOFTMAX = [Variant("softmax over the wrong axis", "spec/components/softmax.md", CONVENTIONS,
                   _softmax_axis)]
FEEDFORWARD = [
    Variant("the tanh approximation of GELU where the spec's 'gelu' is the exact (erf) one",
            "spec/components/feedforward.md", CONVENTIONS, _feedforward("gelu_tanh")),
    Variant("the exact (erf) GELU where the vector asks for 'gelu_tanh'",
            "spec/components/feedforward.md", CONVENTIONS, _feedforward("gelu")),
]

# ---- rope -----------------------------------------------------------------------------------

def _rope(swap: bool = False, float32_angles: bool = False):
    def run(inputs, attributes, params):
        x = inputs["x"]
        k = x.shape[-1]
        if k == 0 or k % 2 or x.ndim < 2:
            return None
        convention = attributes.get("convention", "interleaved")
        if swap:
            convention = "half" if convention == "interleaved" else "interleaved"
        p = attributes.get("offset", 0) + np.arange(x.shape[-2])  # (T,)
        theta = attributes.get("base", 10000.0) ** (-2 * np.arange(k // 2) / k)  # (K/2,)
        if float32_angles:
            angle = (p.astype(np.float32)[:, None] * theta.astype(np.float32)).astype(np.float64)
        else:
            angle = p[:, None] * theta  # (T, K/2)
        c, s = np.cos(angle), np.sin(angle)
        a, b = (x[..., 0::2], x[..., 1::2]) if convention == "interleaved" else np.split(x, 2, -1)
        ya, yb = a * c - b * s, a * s + b * c
        if convention == "interleaved":
            return {"y": np.stack([ya, yb], axis=-1).reshape(x.shape)}
        return {"y": np.concatenate([ya, yb], axis=-1)}

    return run


ROPE = [
    Variant("the other pairing of RoPE (half where the vector asks for interleaved, or the "
            "reverse)", "spec/components/rope.md", "conventions", _rope(swap=True)),
    Variant("RoPE angles p * theta computed in float32 (wrong at large positions)",
            "spec/components/rope.md", "conventions", _rope(float32_angles=True)),
]

VARIANTS = {"sdpa": SDPA, "layer_norm": LAYER_NORM, "softmax": SOFTMAX,
            "feedforward": FEEDFORWARD, "rope": ROPE}


def likely_mistakes(function: str, v, got: dict, dtype: str) -> list[Variant]:
    """The known variants of ``function`` whose outputs on ``v``'s inputs match ``got`` (the
    user's outputs, NumPy, by name) within the vector's tolerance and differ from the spec."""
    tol = v.tolerances[dtype]
    found = []
    for variant in VARIANTS.get(function, ()):
        try:
            out = variant.run(dict(v.inputs), {**v.attributes}, dict(v.params))
        except Exception:
            continue
        names = [n for n in got if out and n in out]
        if not names:
            continue
        if all(compare(got[n], out[n].astype(np.float64), dtype, tol).ok for n in names) and \
                not all(compare(out[n], v.outputs[n], dtype, tol).ok for n in names):
            found.append(variant)
    return found
