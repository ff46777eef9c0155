"""Input checks shared by every backend: they read only ``.shape`` and dtype names, so one
copy serves NumPy, torch, TensorFlow and JAX arrays alike, and every backend raises the
same error class with the same message for the same mistake.

The checks of a spec function's arrays take ``a``, the backend's ``_core`` module, for the
three things only a framework can do: ``a.floating(name, x)`` / ``a.boolean(name, x)``
(``x`` as the framework's array, DTypeError naming ``name`` unless of that kind) and
``a.same_device(name, x, like)`` (DeviceError, or nothing where there is one device)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Real

import numpy as np
from attnspec.spec.errors import ConfigError, DomainError, DTypeError, ParameterError, ShapeError


def shape(x) -> tuple:
    return tuple(int(d) for d in x.shape)


def rank(name: str, x, *, min_rank: int = 0, max_rank: int | None = None) -> tuple:
    s = shape(x)
    if len(s) < min_rank or (max_rank is not None and len(s) > max_rank):
        want = (f"rank {min_rank}" if max_rank == min_rank else
                f"rank >= {min_rank}" if max_rank is None else f"rank {min_rank}..{max_rank}")
        raise ShapeError(f"{name} must have {want}, got shape {s}")
    return s


def same(what: str, **dims: int) -> int:
    """All named sizes must be equal: ``same("key width", **{"q.shape[-1]": 4, ...})``."""
    values = set(dims.values())
    if len(values) > 1:
        detail = ", ".join(f"{k}={v}" for k, v in dims.items())
        raise ShapeError(f"{what} mismatch: {detail}")
    return values.pop()


def broadcastable(name: str, x, target: tuple) -> None:
    """``x`` must broadcast to ``target`` (it may not add dimensions or grow it)."""
    s = shape(x)
    ok = len(s) <= len(target) and all(
        a in (1, b) for a, b in zip(reversed(s), reversed(target)))
    if not ok:
        raise ShapeError(f"{name} of shape {s} does not broadcast to {tuple(target)}")


def batch_broadcast(what: str, **shapes: tuple) -> tuple:
    """Broadcast leading (batch) shapes, naming them in the error."""
    out: list[int] = []
    for s in shapes.values():
        s = tuple(s)
        width = max(len(out), len(s))
        a, b = (1,) * (width - len(out)) + tuple(out), (1,) * (width - len(s)) + s
        merged = []
        for x, y in zip(a, b):
            if x != y and 1 not in (x, y):
                detail = ", ".join(f"{k}={tuple(v)}" for k, v in shapes.items())
                raise ShapeError(f"{what}: batch dimensions do not broadcast: {detail}")
            merged.append(max(x, y))
        out = merged
    return tuple(out)


def dtype_name(x) -> str:
    """``x``'s dtype as NumPy names it (``float32``, ``bfloat16``), whatever the framework:
    its ``name`` (NumPy, JAX, TensorFlow), else its printed form without the module
    (``torch.float32``, ``mlx.core.float32``)."""
    name = getattr(x.dtype, "name", None)
    return name if isinstance(name, str) else str(x.dtype).rsplit(".", 1)[-1]


FLOATING = ("float64", "float32", "float16", "bfloat16")


def floating_dtype(name: str, x, supported: tuple = FLOATING):
    """``x`` if of a floating dtype this backend computes in (``supported``), else DTypeError
    naming the argument: a backend's ``floating`` calls this after converting ``x``."""
    dt = dtype_name(x)
    if dt not in FLOATING:
        raise DTypeError(f"{name} must be floating ({', '.join(FLOATING)}), got {dt} with "
                         f"shape {shape(x)}")
    if dt not in supported:
        raise DTypeError(f"{name} has dtype {dt} (shape {shape(x)}); this backend computes in "
                         f"{', '.join(supported)} only")
    return x


def like(a, name: str, x, like_name: str, other):
    """``x`` on ``other``'s device and of its dtype (DeviceError / DTypeError naming both)."""
    a.same_device(name, x, other)
    if dtype_name(x) != dtype_name(other):
        raise DTypeError(f"{name} has dtype {dtype_name(x)} but {like_name} has "
                         f"{dtype_name(other)}")
    return x


def mask_of(a, mask, target: tuple, other, name: str = "mask"):
    """An optional boolean mask on ``other``'s device, broadcasting to ``target``."""
    if mask is None:
        return None
    mask = a.boolean(name, mask)
    a.same_device(name, mask, other)
    broadcastable(name, mask, target)
    return mask


def attention_inputs(a, q, k, v, mask, bias) -> tuple:
    """sdpa's arrays checked: floating q, k, v and bias of q's dtype, a boolean mask, all on
    q's device, mask and bias broadcasting to the scores' shape. Returns (q, k, v, mask,
    bias, scores shape (*batch, T, S))."""
    q = a.floating("q", q)
    k, v = (like(a, n, a.floating(n, x), "q", q) for n, x in (("k", k), ("v", v)))
    full = attention_shapes(q, k, v)  # (..., T, S)
    mask = mask_of(a, mask, full, q)
    if bias is not None:
        bias = like(a, "bias", a.floating("bias", bias), "q", q)
        broadcastable("bias", bias, full)
    return q, k, v, mask, bias, full


def attention_states(a, outputs, lses) -> tuple:
    """merge_attention_states' arrays checked: floating outputs (N, ..., V) with N >= 1 and
    lses (N, ...) = outputs.shape[:-1], of outputs' dtype and device."""
    outputs = a.floating("outputs", outputs)
    lses = like(a, "lses", a.floating("lses", lses), "outputs", outputs)
    so = rank("outputs", outputs, min_rank=2)
    if so[0] < 1:
        raise ShapeError(f"outputs needs at least one part on axis 0, got shape {so}")
    if shape(lses) != so[:-1]:
        raise ShapeError(f"lses must have shape outputs.shape[:-1] = {so[:-1]}, got lses of "
                         f"shape {shape(lses)} for outputs of shape {so}")
    return outputs, lses


def sinks_of(a, sinks, scores_shape: tuple, q):
    """Attention sinks: floating (H,) of q's dtype and device, H = the scores' axis -3."""
    sinks = like(a, "sinks", a.floating("sinks", sinks), "q", q)
    if len(scores_shape) < 3:
        raise ShapeError(f"sinks need a head axis (-3) in the scores, but q has shape "
                         f"{shape(q)} (scores {scores_shape})")
    if shape(sinks) != (scores_shape[-3],):
        raise ShapeError(f"sinks must have shape ({scores_shape[-3]},), one per head on axis "
                         f"-3, got sinks of shape {shape(sinks)}")
    return sinks


def alignment_inputs(a, query, keys, values, mask) -> tuple:
    """Additive and Luong attention's arrays checked: query (B, T, Dq), keys (B, S, Dk),
    values (B, S, Dv) (None: the keys), floating, of query's dtype and device; mask
    broadcasting to (B, T, S). Returns (query, keys, values, mask)."""
    query = a.floating("query", query)
    keys = like(a, "keys", a.floating("keys", keys), "query", query)
    values = keys if values is None else like(a, "values", a.floating("values", values),
                                              "query", query)
    b, t, s, _, _ = sequences(query, keys, values, ("query", "keys", "values"),
                              same_width=False)
    return query, keys, values, mask_of(a, mask, (b, t, s), query)


def param(a, p, name: str, expected: tuple | None, other, like_name: str):
    """A required parameter ``p[name]``, shape-checked (ParameterError naming its path),
    floating, of ``other``'s dtype and device."""
    return like(a, p.path(name), a.floating(p.path(name), p.require(name, expected)),
                like_name, other)


def gru_weights(a, p, in_width: int, hidden: int | None = None) -> tuple:
    """The GRU's w_ih (I, 3H), w_hh (H, 3H) and optional b_ih, b_hh (3H,) under ``p``, all of
    w_hh's dtype and device; H from w_hh unless given. An absent bias is None."""
    if hidden is None:
        hidden = shape(p.require("w_hh", (None, None)))[0]
    w_hh = a.floating(p.path("w_hh"), p.require("w_hh", (hidden, 3 * hidden)))
    w_ih = param(a, p, "w_ih", (in_width, 3 * hidden), w_hh, p.path("w_hh"))
    b_ih, b_hh = (param(a, p, n, (3 * hidden,), w_hh, p.path("w_hh")) if n in p else None
                  for n in ("b_ih", "b_hh"))
    return w_ih, w_hh, b_ih, b_hh


def gru_state(a, name: str, h, batch: int, hidden: int, x):
    """A GRU state ``h`` (B, H): floating, of x's dtype and device; B from x, H from w_hh."""
    h = a.floating(name, h)
    rank(name, h, min_rank=2, max_rank=2)
    if shape(h) != (batch, hidden):
        raise ShapeError(f"{name} has shape {shape(h)}, expected (B, H) = {(batch, hidden)} "
                         f"(B from x, H from w_hh)")
    return like(a, name, h, "x", x)


def kv_group(num_kv_heads, q, k, v) -> int:
    """:func:`kv_heads` of the arrays q, k, v: the group size H / num_kv_heads."""
    return kv_heads(num_kv_heads, shape(q), shape(k), shape(v))


def attention_shapes(q, k, v) -> tuple:
    """q (..., T, K), k (..., S, K), v (..., S, V), batches broadcasting: the scores shape
    (*batch, T, S)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        rank(name, x, min_rank=2)
    qs, ks, vs = shape(q), shape(k), shape(v)
    same("key width", **{"q.shape[-1]": qs[-1], "k.shape[-1]": ks[-1]})
    same("key length", **{"k.shape[-2]": ks[-2], "v.shape[-2]": vs[-2]})
    if qs[-1] < 1:
        raise ShapeError(f"key width must be >= 1, got q of shape {qs}")
    batch = batch_broadcast("q, k, v", q=qs[:-2], k=ks[:-2], v=vs[:-2])
    return batch + (qs[-2], ks[-2])  # (..., T, S)


def sequences(q, k, v, names=("q", "k", "v"), same_width: bool = True) -> tuple:
    """q (B, T, Dq), k (B, S, K) (Dq = K unless not same_width), v (B, S, V):
    returns (B, T, S, K, V)."""
    nq, nk, nv = names
    b, t, kw = rank(nq, q, min_rank=3, max_rank=3)
    _, s, kw2 = rank(nk, k, min_rank=3, max_rank=3)
    _, s2, vw = rank(nv, v, min_rank=3, max_rank=3)
    same("batch size", **{f"{nq}.shape[0]": b, f"{nk}.shape[0]": shape(k)[0],
                          f"{nv}.shape[0]": shape(v)[0]})
    if same_width:
        same("key width", **{f"{nq}.shape[-1]": kw, f"{nk}.shape[-1]": kw2})
    same("key length", **{f"{nk}.shape[1]": s, f"{nv}.shape[1]": s2})
    return b, t, s, kw2, vw


def heads(p, num_heads, d_q: int, d_v: int, num_kv_heads=None) -> tuple:
    """Multi-head projections: w_q (Dq, H*K), w_k (Dk, H_kv*K), w_v (Dv, H_kv*V), w_o (H*V, .),
    with H_kv = num_kv_heads (None: H) dividing H (grouped-query attention).
    Returns (H, H_kv, H*K, H_kv*K, H*V)."""
    h = integer("num_heads", num_heads, lo=1)
    h_kv = h if num_kv_heads is None else kv_count(num_kv_heads)
    if h % h_kv:
        raise ConfigError(f"num_kv_heads={h_kv} does not divide num_heads={h}")
    hk = shape(p.require("w_q", (d_q, None)))[1]
    kv_v = shape(p.require("w_v", (d_v, None)))[1]
    divides(f"query/key width {p.path('w_q')}.shape[1]", h, hk, "H*K")
    if kv_v % h_kv:
        raise ConfigError(f"value width {p.path('w_v')}.shape[1]: num_kv_heads={h_kv} does "
                          f"not divide H_kv*V={kv_v}")
    return h, h_kv, hk, hk // h * h_kv, kv_v // h_kv * h


def integer(name: str, value, *, lo: int | None = None, hi: int | None = None) -> int:
    """An integer attribute within [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            if int(value) != value:
                raise ValueError
            value = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be an integer, got {value!r}") from None
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise ConfigError(f"{name} must be in {rng}, got {value}")
    return value


def size(name: str, value) -> int:
    """A length attribute (``t``, ``s``): an integer >= 0."""
    return integer(name, value, lo=0)


def flag(name: str, value) -> bool:
    """A True/False attribute (Python or NumPy bool), or ConfigError naming it."""
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _real(value) -> bool:
    """A real number that is not a bool (Python or NumPy) and not a string."""
    return isinstance(value, Real) and not isinstance(value, (bool, np.bool_))


def finite(value, name: str) -> float:
    """A finite real number (bool and str refused), as a Python float."""
    if not _real(value) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def eps(value, name: str = "eps") -> float:
    """A normaliser's eps: a finite real number > 0 (bool and str refused), as a Python float.

    Attributes are exact Python floats: the value is used as given, never rounded first.
    """
    if not _real(value) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def scale(value, width: int, name: str = "scale") -> float:
    """An attention scale: ``value``, a finite real number (bool and str refused), or
    1/sqrt(width) when None, as a Python float."""
    if value is None:
        # width = 0: every score is an empty sum, 0, whatever the scale
        return 1.0 / math.sqrt(width) if width > 0 else 1.0
    if not _real(value) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number or None, got {value!r}")
    return float(value)


def mla_scale(dn: int, dr: int, yarn_factor, mscale_all_dim) -> float:
    """MLA's softmax scale m^2 / sqrt(Dn + Dr), m = 0.1 mscale_all_dim ln(yarn_factor) + 1
    when yarn_factor > 1, else 1 (transformers' yarn_get_mscale); yarn_factor a finite
    number > 0, mscale_all_dim a finite number."""
    factor = eps(yarn_factor, "yarn_factor")
    if not _real(mscale_all_dim) or not math.isfinite(mscale_all_dim):
        raise ConfigError(f"mscale_all_dim must be a finite number, got {mscale_all_dim!r}")
    m = 0.1 * float(mscale_all_dim) * math.log(factor) + 1.0 if factor > 1 else 1.0
    return m * m / math.sqrt(dn + dr)


def mla_mscale_of(rope_scaling: dict, yarn_factor, mscale_all_dim) -> tuple:
    """(yarn_factor, mscale_all_dim) of MLA's softmax scale when rope_scaling is given:
    transformers' yarn_apply_mscale reads them from rope_parameters (rope_type not
    "default" and mscale_all_dim not 0: factor and mscale_all_dim; otherwise m = 1), so
    yarn_factor / mscale_all_dim given as well (not their defaults 1.0 / 0.0) is a
    ConfigError, and so is mscale_all_dim without factor."""
    if yarn_factor != 1.0 or mscale_all_dim != 0.0:
        raise ConfigError(f"yarn_factor={yarn_factor!r} / mscale_all_dim={mscale_all_dim!r} "
                          f"given with rope_scaling: with rope_scaling the mscale comes from "
                          f"rope_scaling's factor and mscale_all_dim (leave these at 1.0 / 0.0)")
    kind = rope_scaling.get("rope_type", "default")
    m_all = rope_scaling.get("mscale_all_dim") or 0.0
    if kind == "default" or not m_all:
        return 1.0, 0.0
    if rope_scaling.get("factor") is None:
        raise ConfigError(f"rope_scaling.mscale_all_dim={m_all!r} needs rope_scaling.factor "
                          f"(the mscale is 0.1 mscale_all_dim ln(factor) + 1)")
    return rope_scaling["factor"], m_all


def softcap(value, name: str = "softcap") -> float | None:
    """A logit soft-cap c (scores -> c tanh(scores / c)): None (no capping) or a finite
    real number > 0 (bool and str refused), as a Python float."""
    return None if value is None else eps(value, name)


def choice(name: str, value, options) -> str:
    if value not in options:
        raise ConfigError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def divides(what: str, heads: int, width: int, width_name: str) -> int:
    if heads < 1 or width % heads:
        raise ConfigError(f"{what}: num_heads={heads} does not divide {width_name}={width}")
    return width // heads


def kv_count(num_kv_heads) -> int:
    """num_kv_heads: an integer >= 1 (a bool is not a count)."""
    if isinstance(num_kv_heads, (bool, np.bool_)):
        raise ConfigError(f"num_kv_heads must be an integer, got {num_kv_heads!r}")
    return integer("num_kv_heads", num_kv_heads, lo=1)


def kv_heads(num_kv_heads, q_shape: tuple, k_shape: tuple, v_shape: tuple) -> int:
    """Grouped-query attention: axis -3 is the head axis; q has H heads, k and v have
    num_kv_heads, which must divide H. Returns the group size H / num_kv_heads."""
    h_kv = kv_count(num_kv_heads)
    for name, s in (("q", q_shape), ("k", k_shape), ("v", v_shape)):
        if len(s) < 3:
            raise ShapeError(f"with num_kv_heads, {name} needs a head axis (..., H, T, K), "
                             f"got shape {tuple(s)}")
    for name, s in (("k", k_shape), ("v", v_shape)):
        if s[-3] != h_kv:
            raise ShapeError(f"{name} of shape {tuple(s)} has {s[-3]} heads on axis -3, "
                             f"num_kv_heads={h_kv}")
    heads = q_shape[-3]
    if heads % h_kv:
        raise ConfigError(f"num_kv_heads={h_kv} does not divide the {heads} query heads "
                          f"(q of shape {tuple(q_shape)})")
    return heads // h_kv


def kv_divides(heads: int, kv: int) -> int:
    """Grouped-query attention: num_kv_heads divides num_heads; returns the group size."""
    if heads % kv:
        raise ConfigError(f"num_kv_heads={kv} does not divide num_heads={heads}")
    return heads // kv


class Params:
    """A view of a flat ``{canonical path: array}`` mapping under a prefix.

    ``p.scope("layers.1").scope("cross_attn")["w_k"]`` reads
    ``layers.1.cross_attn.w_k``, and every error names that whole path.
    """

    __slots__ = ("store", "prefix")

    def __init__(self, store: Mapping, prefix: str = ""):
        self.store, self.prefix = store, prefix

    def path(self, name: str) -> str:
        return self.prefix + name

    def scope(self, name: str) -> Params:
        return Params(self.store, f"{self.prefix}{name}.")

    def __contains__(self, name: str) -> bool:
        return self.path(name) in self.store

    def get(self, name: str, expected: tuple | None = None):
        if name not in self:
            return None
        return self.require(name, expected)

    def require(self, name: str, expected: tuple | None = None):
        """The parameter, its shape checked against ``expected`` (None = any size)."""
        path = self.path(name)
        if path not in self.store:
            raise ParameterError(f"missing parameter {path!r}")
        x = self.store[path]
        if expected is not None:
            s = shape(x)
            if len(s) != len(expected) or any(e is not None and a != e for a, e in zip(s, expected)):
                want = tuple("*" if e is None else e for e in expected)
                raise ParameterError(f"parameter {path!r} has shape {s}, expected {want}")
        return x

    __getitem__ = require

    def keys(self):
        return [k[len(self.prefix):] for k in self.store if k.startswith(self.prefix)]


def params_of(params) -> Params:
    if isinstance(params, Params):
        return params
    if params is None:
        return Params({})
    if not isinstance(params, Mapping):
        raise ParameterError(f"params must be a mapping of canonical paths to arrays, "
                             f"got {type(params).__name__}")
    return Params(params)


def ffn_params(get, d: int) -> tuple:
    """(w1, b1, w2, b2) of the position-wise feed-forward block: W1 (D, F) fixes F.
    ``get(path, shape)`` fetches and checks one parameter (``Params.require``, or a
    backend's wrapper that also converts it)."""
    w1 = get("w1", (d, None))
    f = shape(w1)[1]
    return w1, get("b1", (f,)), get("w2", (f, d)), get("b2", (d,))


def glu_params(get, d: int) -> tuple:
    """(w_gate, w_up, w_down) of the gated feed-forward block: W_gate (D, F) fixes F."""
    w_gate = get("w_gate", (d, None))
    f = shape(w_gate)[1]
    return w_gate, get("w_up", (d, f)), get("w_down", (f, d))


def alibi_slopes(num_heads) -> list:
    """ALiBi's head slopes m_h (Press et al. 2022), as Python floats: 2^(-8 (h + 1) / P) for
    the first P heads (P the largest power of two <= H), then the odd-numbered slopes
    2^(-8 (2k + 1) / 2P) of 2P heads for the other H - P. Each is a power of two with a
    rational exponent, computed once here so every backend uses the same float64 values."""
    h_ = integer("num_heads", num_heads, lo=1)
    p = 1 << (h_.bit_length() - 1)
    frac = [(h + 1) / p for h in range(p)] + [(2 * k + 1) / (2 * p) for k in range(h_ - p)]
    return [2.0 ** (-8.0 * f) for f in frac]


def window_mask_args(t, s, window) -> tuple:
    """(T, S, W) of a sliding-window mask: sizes >= 0, window >= 1."""
    return size("t", t), size("s", s), integer("window", window, lo=1)


def local_window_args(t, s, left, right) -> tuple:
    """(T, S, left, right) of a local-window mask: sizes >= 0; each side an integer >= 0, or
    None for unbounded (flash-attn's and ONNX's -1 is refused: it is spelled None here)."""
    sides = tuple(None if v is None else integer(n, v, lo=0) for n, v in (("left", left), ("right", right)))
    return (size("t", t), size("s", s), *sides)


def chunked_mask_args(t, s, chunk, causal) -> tuple:
    """(T, S, C, causal) of a chunked mask: sizes >= 0, chunk >= 1, causal a bool."""
    return size("t", t), size("s", s), integer("chunk", chunk, lo=1), flag("causal", causal)


REDUCTIONS = ("mean", "sum", "none")


def cross_entropy_args(logits_shape: tuple, targets_shape: tuple, targets_kind: str,
                       ignore_index, label_smoothing, reduction) -> tuple:
    """cross_entropy's checks that read no values: logits (..., L), integer targets of shape
    logits.shape[:-1], an integer ignore_index, label_smoothing in [0, 1], a known
    reduction. Returns (ignore_index, label_smoothing as a float, reduction)."""
    if len(logits_shape) < 1:
        raise ShapeError(f"logits must have a class axis (rank >= 1), got shape {logits_shape}")
    if targets_kind not in "iu":
        raise DTypeError(f"targets must hold integer class indices, got a {targets_kind!r}-kind "
                         f"array of shape {targets_shape}")
    if tuple(targets_shape) != tuple(logits_shape[:-1]):
        raise ShapeError(f"targets of shape {tuple(targets_shape)} for logits of shape "
                         f"{tuple(logits_shape)}: targets must be logits.shape[:-1] = "
                         f"{tuple(logits_shape[:-1])}")
    ignore_index = integer("ignore_index", ignore_index)
    if not _real(label_smoothing) or not 0 <= label_smoothing <= 1:
        raise ConfigError(f"label_smoothing must be a number in [0, 1], got {label_smoothing!r}")
    return ignore_index, float(label_smoothing), choice("reduction", reduction, REDUCTIONS)


# == paged KV cache (issue 22 item 3) ======================================================
# The block table and the lengths are checked by dtype and shape like any array; their
# values (the pages read, the room left) by paged_problem on NumPy copies: the eager
# backends read them with np.asarray (concrete even under jax.vjp and tf.GradientTape), a
# graph backend computes the same conditions in its own ops and takes the message from here.

def _table(name: str, x, rank_: int) -> tuple:
    kind = dtype_name(x)
    if not kind.startswith(("int", "uint")):
        raise DTypeError(f"{name} must hold integers, got {kind} with shape {shape(x)}")
    return rank(name, x, min_rank=rank_, max_rank=rank_)


def _pages(a, k_cache, v_cache, like_name: str, other) -> tuple:
    """k_cache (N, P, H_kv, K) and v_cache (N, P, H_kv, V), floating, of ``other``'s dtype."""
    k_cache = like(a, "k_cache", a.floating("k_cache", k_cache), like_name, other)
    v_cache = like(a, "v_cache", a.floating("v_cache", v_cache), like_name, other)
    kc, vc = rank("k_cache", k_cache, min_rank=4, max_rank=4), rank("v_cache", v_cache,
                                                                     min_rank=4, max_rank=4)
    if kc[:3] != vc[:3]:
        raise ShapeError(f"k_cache {kc} and v_cache {vc} must agree on (num_blocks, page_size, "
                         f"H_kv)")
    if kc[1] < 1:
        raise ShapeError(f"k_cache's page_size (axis 1) must be >= 1, got shape {kc}")
    return k_cache, v_cache, kc, vc


def _tables(block_table, seq_lens, batch: int) -> tuple:
    """block_table (B, M) and seq_lens (B,): integer, B rows."""
    ts, ls = _table("block_table", block_table, 2), _table("seq_lens", seq_lens, 1)
    if ts[0] != batch or ls[0] != batch:
        raise ShapeError(f"block_table {ts} and seq_lens {ls} must have B = {batch} rows")
    return ts


def paged_problem(table, lens, kc: tuple, extra: int = 0, writes=None) -> str | None:
    """The first value problem of a block table (B, M) and lengths (B,), NumPy, as its
    DomainError message, or None: each length in [0, M*P - extra]; each entry of the first
    ceil((L_b + extra) / P) of a row in [0, num_blocks); with ``writes`` (the flat slots
    written, (B*T,)), no slot written twice."""
    n, page = kc[0], kc[1]
    room = table.shape[1] * page - extra
    for b, length in enumerate(lens.tolist()):
        if not 0 <= length <= room:
            return (f"seq_lens[{b}] = {length} must be in [0, {room}]: block_table "
                    f"{table.shape} holds {table.shape[1]} pages of page_size {page}"
                    + (f", {extra} of them to append" if extra else ""))
        for m in range(-(-(length + extra) // page)):
            if not 0 <= table[b, m] < n:
                return (f"block_table[{b}, {m}] = {table[b, m]} is out of range [0, {n}) "
                        f"(k_cache {kc} has {n} blocks)")
    if writes is None:
        return None
    slots, counts = np.unique(writes, return_counts=True)
    if np.any(counts > 1):
        s = int(slots[counts > 1][0])
        rows = [divmod(int(i), extra) for i in np.flatnonzero(writes == s)]
        return (f"block_table writes block {s // page} offset {s % page} twice "
                f"((b, t) = {rows}): a page shared by two sequences must be copied "
                f"before appending to it")
    return None


def _write_slots(table, lens, t: int, page: int):
    """The flat slots of positions L_b .. L_b + T - 1, (B*T,) (columns clipped into the
    table: only read once paged_problem has passed, or by the message)."""
    pos = lens[:, None] + np.arange(t)  # (B, T)
    col = np.clip(pos // page, 0, max(table.shape[1] - 1, 0))
    return (np.take_along_axis(table, col, axis=1) * page + pos % page).reshape(-1)


def paged_attention_arrays(a, q, k_cache, v_cache, block_table, seq_lens, causal) -> tuple:
    """q (B, T, H, K) and the caches checked, the tables' dtypes and shapes: (q, k_cache,
    v_cache, causal)."""
    q = a.floating("q", q)
    qs = rank("q", q, min_rank=4, max_rank=4)  # (B, T, H, K)
    k_cache, v_cache, kc, vc = _pages(a, k_cache, v_cache, "q", q)
    if kc[3] != qs[3]:
        raise ShapeError(f"k_cache.shape[-1] = {kc[3]} must equal q's K = {qs[3]} (q {qs})")
    if qs[2] % kc[2]:
        raise ConfigError(f"k_cache's H_kv = {kc[2]} does not divide q's H = {qs[2]} "
                          f"(q {qs}, k_cache {kc})")
    _tables(block_table, seq_lens, qs[0])
    return q, k_cache, v_cache, flag("causal", causal)


def paged_attention_plan(a, q, k_cache, v_cache, block_table, seq_lens, causal) -> tuple:
    """The checked arrays, then the gather and the mask, both NumPy:
    index (B, M*P) int64, the flat slot block * P + offset of key j (0 where unused),
    keep (B, T, M*P) bool: j < L_b and, if causal, j <= L_b - T + t."""
    q, k_cache, v_cache, causal = paged_attention_arrays(a, q, k_cache, v_cache, block_table,
                                                         seq_lens, causal)
    qs, kc = shape(q), shape(k_cache)
    table, lens = np.asarray(block_table).astype(np.int64), np.asarray(seq_lens).astype(np.int64)
    problem = paged_problem(table, lens, kc)
    if problem:
        raise DomainError(problem)
    page, s = kc[1], table.shape[1] * kc[1]
    j = np.arange(s)  # (S,)
    index = np.where(j < lens[:, None], table[:, j // page] * page + j % page, 0)  # (B, S)
    keep = np.broadcast_to(j < lens[:, None, None], (qs[0], qs[1], s)).copy()  # (B, T, S)
    if causal:
        last = lens[:, None, None] - qs[1] + np.arange(qs[1])[None, :, None]  # (B, T, 1)
        keep = keep & (j <= last)
    return q, k_cache, v_cache, index, keep


def paged_append_arrays(a, k_cache, v_cache, block_table, seq_lens, k, v) -> tuple:
    """k (B, T, H_kv, K), v (B, T, H_kv, V) and the caches checked, the tables' dtypes and
    shapes: (k_cache, v_cache, k, v)."""
    k = a.floating("k", k)
    ks = rank("k", k, min_rank=4, max_rank=4)  # (B, T, H_kv, K)
    v = like(a, "v", a.floating("v", v), "k", k)
    vs = rank("v", v, min_rank=4, max_rank=4)
    k_cache, v_cache, kc, vc = _pages(a, k_cache, v_cache, "k", k)
    if ks[:3] != vs[:3] or ks[2:] != kc[2:] or vs[3] != vc[3]:
        raise ShapeError(f"k {ks} and v {vs} must be (B, T, H_kv, K) and (B, T, H_kv, V) with "
                         f"the caches' H_kv, K, V (k_cache {kc}, v_cache {vc})")
    _tables(block_table, seq_lens, ks[0])
    return k_cache, v_cache, k, v


def paged_append_plan(a, k_cache, v_cache, block_table, seq_lens, k, v) -> tuple:
    """The checked arrays, then where each new row goes: index (B*T,) int64 flat slots of
    positions L_b .. L_b + T - 1, and the new lengths (of seq_lens' dtype). Two rows written to
    one slot are refused: a page shared by two sequences is the caller's to copy first."""
    k_cache, v_cache, k, v = paged_append_arrays(a, k_cache, v_cache, block_table, seq_lens, k, v)
    t, kc = shape(k)[1], shape(k_cache)
    table, lens = np.asarray(block_table).astype(np.int64), np.asarray(seq_lens).astype(np.int64)
    index = _write_slots(table, lens, t, kc[1])
    problem = paged_problem(table, lens, kc, t, index)
    if problem:
        raise DomainError(problem)
    dtype = np.asarray(seq_lens).dtype
    return k_cache, v_cache, k, v, index, (lens + t).astype(dtype)  # (B,)


GROUP_SCORES = ("sum_top2", "max")


def moe_router(x_shape: tuple, bias_shape, top_k, scoring, renormalize, eps, n_group,
               topk_group, routed_scaling_factor, group_score="sum_top2") -> tuple:
    """The router's attributes against logits (N, E) and a bias (E,) (shapes; bias_shape
    None when absent): ``(top_k, n_group, topk_group)`` or ConfigError / ShapeError.
    group_score: a group scored by the sum of its two largest selection scores ("sum_top2",
    DeepSeek-V3; groups of at least 2) or by its largest ("max", DeepSeek-V2)."""
    if len(x_shape) != 2:
        raise ShapeError(f"logits must have rank 2 (N, E), got shape {tuple(x_shape)}")
    e = x_shape[1]
    if bias_shape is not None and tuple(bias_shape) != (e,):
        raise ShapeError(f"correction_bias must have shape ({e},) (one per expert of logits "
                         f"{tuple(x_shape)}), got {tuple(bias_shape)}")
    choice("scoring", scoring, ("softmax", "sigmoid"))
    flag("renormalize", renormalize)
    for name, v in (("eps", eps), ("routed_scaling_factor", routed_scaling_factor)):
        if not _real(v) or not math.isfinite(v) or v < 0:
            raise ConfigError(f"{name} must be a finite number >= 0, got {v!r}")
    choice("group_score", group_score, GROUP_SCORES)
    n_group = integer("n_group", n_group, lo=1)
    least = 2 if group_score == "sum_top2" else 1
    if e % n_group or (n_group > 1 and e // n_group < least):
        raise ConfigError(f"n_group={n_group} must divide the {e} experts of logits "
                          f"{tuple(x_shape)} into groups of at least {least}"
                          + (" (group_score 'sum_top2')" if least == 2 else ""))
    topk_group = integer("topk_group", topk_group, lo=1, hi=n_group)
    top_k = integer("top_k", top_k, lo=1, hi=topk_group * (e // n_group))
    return top_k, n_group, topk_group


def moe_aux_loss(z_shape: tuple, mask_shape, top_k) -> int:
    """router_logits (L, N, E), a mask (N,) (None when absent): top_k in [1, E], else
    ShapeError / ConfigError."""
    if len(z_shape) != 3:
        raise ShapeError(f"router_logits must have rank 3 (L, N, E): layers, tokens, experts; "
                         f"got shape {tuple(z_shape)}")
    if mask_shape is not None and tuple(mask_shape) != (z_shape[1],):
        raise ShapeError(f"mask must have shape ({z_shape[1]},) (one per token of router_logits "
                         f"{tuple(z_shape)}), got {tuple(mask_shape)}")
    return integer("top_k", top_k, lo=1, hi=z_shape[2])


def sampling(x_shape: tuple, temperature, top_k, top_p, min_p, min_tokens_to_keep) -> tuple:
    """The sampling filters' attributes against logits (N, V) (spec/components/sampling.md):
    ``(temperature, top_k or None, top_p, min_p, m)`` with top_k and m clipped to V, or
    ShapeError / ConfigError naming the attribute."""
    if len(x_shape) != 2:
        raise ShapeError(f"logits must have rank 2 (N, V), got shape {tuple(x_shape)}")
    v = x_shape[1]
    if not _real(temperature) or not math.isfinite(temperature) or temperature <= 0:
        raise ConfigError(f"temperature must be a finite number > 0, got {temperature!r}")
    if top_k is not None:
        top_k = integer("top_k", top_k, lo=1)
    if not _real(top_p) or not 0 < top_p <= 1:
        raise ConfigError(f"top_p must be a number in (0, 1] (1: no top-p), got {top_p!r}")
    if not _real(min_p) or not 0 <= min_p <= 1:
        raise ConfigError(f"min_p must be a number in [0, 1] (0: no min-p), got {min_p!r}")
    m = min(integer("min_tokens_to_keep", min_tokens_to_keep, lo=1), v)
    top_k = None if top_k is None or max(top_k, m) >= v else max(top_k, m)
    return float(temperature), top_k, float(top_p), float(min_p), m


def draws(u_shape: tuple, rows: int) -> None:
    """u of shape (N,) for logits of N rows, or ShapeError."""
    if tuple(u_shape) != (rows,):
        raise ShapeError(f"u must have shape ({rows},) (one uniform per row of logits), got "
                         f"{tuple(u_shape)}")


def t5_buckets(t, s, bidirectional, num_buckets, max_distance, offset) -> np.ndarray:
    """T5's relative position buckets (T, S), int64, for query i at offset + i and key j at j
    (spec/components/t5_bias.md): one copy for every backend, decided on integers."""
    t, s, offset = size("t", t), size("s", s), integer("offset", offset, lo=0)
    bidirectional = flag("bidirectional", bidirectional)
    n_buckets = integer("num_buckets", num_buckets, lo=1)
    half = n_buckets // 2 if bidirectional else n_buckets
    exact = half // 2
    if exact < 1:
        raise ConfigError(f"num_buckets={n_buckets} (bidirectional={bidirectional}) leaves no exact "
                          f"bucket: it needs >= {4 if bidirectional else 2}")
    m = integer("max_distance", max_distance)
    if m <= exact:
        raise ConfigError(f"max_distance={m} must exceed the {exact} exact buckets "
                          f"(num_buckets={n_buckets}, bidirectional={bidirectional}): log(M / E) <= 0")
    r = np.arange(s)[None, :] - (offset + np.arange(t))[:, None]  # (T, S) key - query position
    base = np.where(r > 0, half, 0) if bidirectional else np.zeros_like(r)
    n = np.abs(r) if bidirectional else np.maximum(-r, 0)
    large = exact + np.searchsorted(np.array(_t5_thresholds(exact, half, m), dtype=np.int64), n,
                                    side="right")
    return base + np.where(n < exact, n, np.minimum(large, half - 1))


def _t5_thresholds(exact: int, half: int, m: int) -> list:
    """The least n with E + floor(log(n/E) / log(M/E) (N' - E)) >= E + k, k = 1 .. N' - E:
    n^w E^k >= M^k E^w (w = N' - E), found exactly from a float first guess."""
    w = half - exact
    out = []
    for k in range(1, w + 1):
        def reached(n, k=k):
            return n ** w * exact ** k >= m ** k * exact ** w
        n = max(exact, int(exact * (m / exact) ** (k / w)) - 2)
        while not reached(n):
            n += 1
        while n > exact and reached(n - 1):
            n -= 1
        out.append(n)
    return out
