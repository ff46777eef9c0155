"""Planted bugs in the positional components that the vectors must catch at every dtype."""

import numpy as np
import pytest
from attnspec.backends.numpy import positional

from .mutants import assert_rejected, mutant, rejections

# -- sinusoidal_pe -------------------------------------------------------------


def _table(length, d_model, offset=0, *, base=10000.0, exponent=2.0, width=None, swap=False):
    width = d_model if width is None else width
    pos = np.arange(offset, offset + length, dtype=np.float64)[:, None]
    i = np.arange(d_model) // 2
    angle = pos / base ** (exponent * i / width)
    even = np.arange(d_model) % 2 == 0
    if swap:
        even = ~even
    return np.where(even, np.sin(angle), np.cos(angle))


def pe_sin_cos_swapped(*, length, d_model, offset=0):
    return _table(length, d_model, offset, swap=True)


def pe_concatenated(*, length, d_model, offset=0):
    """All sin columns, then all cos columns (some tutorials)."""
    pos = np.arange(offset, offset + length, dtype=np.float64)[:, None]
    freq = 10000.0 ** (-2.0 * np.arange((d_model + 1) // 2) / d_model)
    return np.concatenate([np.sin(pos * freq), np.cos(pos * freq)], axis=1)[:, :d_model]


def pe_exponent_i_over_d(*, length, d_model, offset=0):
    return _table(length, d_model, offset, exponent=1.0)


def pe_base_1000(*, length, d_model, offset=0):
    return _table(length, d_model, offset, base=1000.0)


def pe_offset_ignored(*, length, d_model, offset=0):
    return _table(length, d_model, 0)


def pe_odd_width_from_even_table(*, length, d_model, offset=0):
    """Odd D: build the table for D + 1 and drop its last column."""
    width = d_model + d_model % 2
    return _table(length, width, offset)[:, :d_model]


@pytest.mark.parametrize("broken", [pe_sin_cos_swapped, pe_concatenated, pe_exponent_i_over_d,
                                    pe_base_1000, pe_offset_ignored,
                                    pe_odd_width_from_even_table], ids=lambda f: f.__name__)
def test_sinusoidal_pe_mutant_is_rejected(broken):
    assert_rejected(mutant(sinusoidal_pe=broken), "sinusoidal_pe")


def test_sinusoidal_pe_float32_angles_fail_float32():
    """The Annotated Transformer's float32 table fails the large-offset vector in float32."""
    def annotated(*, length, d_model, offset=0):
        pos = np.arange(offset, offset + length, dtype=np.float32)[:, None]
        div = np.exp(np.arange(0, d_model, 2, dtype=np.float32)
                     * np.float32(-np.log(10000.0) / d_model))
        pe = np.zeros((length, d_model), dtype=np.float32)
        pe[:, 0::2] = np.sin(pos * div)
        pe[:, 1::2] = np.cos(pos * div)[:, : d_model // 2]
        return pe

    assert rejections(mutant(sinusoidal_pe=annotated), "sinusoidal_pe")["float32"] > 0


# -- learned_pe ----------------------------------------------------------------


def lpe_shift_up(positions, *, params):
    table = np.asarray(params["table"])
    return table[np.minimum(np.asarray(positions) + 1, table.shape[0] - 1)]


def lpe_shift_down(positions, *, params):
    table = np.asarray(params["table"])
    return table[np.maximum(np.asarray(positions) - 1, 0)]


def lpe_wraps_modulo(positions, *, params):
    """Rows counted from 1 with wrap-around (position p reads row (p + 1) mod max_len)."""
    table = np.asarray(params["table"])
    return table[(np.asarray(positions) + 1) % table.shape[0]]


@pytest.mark.parametrize("broken", [lpe_shift_up, lpe_shift_down, lpe_wraps_modulo],
                         ids=lambda f: f.__name__)
def test_learned_pe_mutant_is_rejected(broken):
    assert_rejected(mutant(learned_pe=broken), "learned_pe")


# -- relative_attention ----------------------------------------------------------


def _rel_attn(q, k, v, mask=None, *, max_distance, scale=None, params, rows=None,
              use_k=True, use_v=True, scale_rel=True):
    """The equations with one knob per planted bug; ``rows(t, s, m)`` picks table rows."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    rel_k, rel_v = np.asarray(params["rel_k"]), np.asarray(params["rel_v"])
    m, (t, s) = max_distance, (q.shape[1], k.shape[1])
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    idx = rows(t, s, m)
    rel = np.einsum("btk,tsk->bts", q, rel_k[idx]) if use_k else 0
    e = q @ k.swapaxes(-1, -2) * scale + rel * (scale if scale_rel else 1)
    keep = np.ones(e.shape, bool) if mask is None else np.broadcast_to(mask, e.shape)
    top = keep & (e == np.inf)  # kept +inf scores share the weight (the limit)
    e = np.where(top.any(-1, keepdims=True), np.where(top, 0, -np.inf), e)
    w = np.where(keep, np.exp(np.where(keep, e, -np.inf) - np.max(
        np.where(keep, e, -np.inf), -1, keepdims=True)), 0)
    w = np.nan_to_num(w / w.sum(-1, keepdims=True))
    vv = v[:, None] + (rel_v[idx] if use_v else 0)  # (B, T, S, V)
    z = np.sum(np.where((w != 0)[..., None], w[..., None] * vv, 0), -2)  # weight 0: left out
    return z, w


def _dist(t, s):
    return np.arange(s)[None, :] - np.arange(t)[:, None]  # j - i


def _rel_variant(**knobs):
    def broken(q, k, v, mask=None, *, max_distance, scale=None, params):
        with np.errstate(all="ignore"):
            return _rel_attn(q, k, v, mask, max_distance=max_distance, scale=scale,
                             params=params, **knobs)
    return broken


RIGHT_ROWS = {"rows": lambda t, s, m: np.clip(_dist(t, s), -m, m) + m}
REL_MUTANTS = {
    "not_clipped_wraps": {"rows": lambda t, s, m: (_dist(t, s) + m) % (2 * m + 1)},
    "clipped_at_m_minus_1": {"rows": lambda t, s, m: np.clip(_dist(t, s), -m + 1, max(m - 1, 0))
                             + m},
    "i_minus_j": {"rows": lambda t, s, m: np.clip(-_dist(t, s), -m, m) + m},
    "a_v_omitted": {**RIGHT_ROWS, "use_v": False},
    "a_k_omitted": {**RIGHT_ROWS, "use_k": False},
    "relative_term_unscaled": {**RIGHT_ROWS, "scale_rel": False},
}


@pytest.mark.parametrize("name", list(REL_MUTANTS))
def test_relative_attention_mutant_is_rejected(name):
    assert_rejected(mutant(relative_attention=_rel_variant(**REL_MUTANTS[name])),
                    "relative_attention")


def test_relative_attention_mutant_harness_is_sound():
    """The knob-free variant passes, so each rejection above is the planted bug's doing."""
    assert set(rejections(mutant(relative_attention=_rel_variant(**RIGHT_ROWS)),
                          "relative_attention").values()) == {0}


# -- rope ----------------------------------------------------------------------------


def _rope(x, offset=0, base=10000.0, convention="interleaved", *, sign=1.0, exponent=2.0):
    x = np.asarray(x)
    t, kw = x.shape[-2:]
    theta = base ** (-exponent * np.arange(kw // 2) / kw)
    angle = sign * np.arange(offset, offset + t)[:, None] * theta
    cos, sin = np.cos(angle), np.sin(angle)
    if convention == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        return np.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(x.shape)
    a, b = x[..., : kw // 2], x[..., kw // 2:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)


def rope_conventions_swapped(x, *, offset=0, base=10000.0, convention="interleaved"):
    other = {"interleaved": "half", "half": "interleaved"}[convention]
    return _rope(x, offset, base, other)


def rope_angle_sign_flipped(x, *, offset=0, base=10000.0, convention="interleaved"):
    return _rope(x, offset, base, convention, sign=-1.0)


def rope_offset_ignored(x, *, offset=0, base=10000.0, convention="interleaved"):
    return _rope(x, 0, base, convention)


def rope_exponent_i_over_k(x, *, offset=0, base=10000.0, convention="interleaved"):
    return _rope(x, offset, base, convention, exponent=1.0)


def rope_base_ignored(x, *, offset=0, base=10000.0, convention="interleaved"):
    return _rope(x, offset, 10000.0, convention)


@pytest.mark.parametrize("broken", [rope_conventions_swapped, rope_angle_sign_flipped,
                                    rope_offset_ignored, rope_exponent_i_over_k,
                                    rope_base_ignored], ids=lambda f: f.__name__)
def test_rope_mutant_is_rejected(broken):
    assert_rejected(mutant(rope=broken), "rope")


def test_rope_float32_angles_fail_float32():
    """Angles computed as float32 pos * float32 theta fail the large-offset vector in float32."""
    def float32_angles(x, *, offset=0, base=10000.0, convention="interleaved"):
        x = np.asarray(x)
        t, kw = x.shape[-2:]
        theta = (np.float32(base) ** (np.arange(0, kw, 2, dtype=np.float32) / -kw))
        angle = np.arange(offset, offset + t, dtype=np.float32)[:, None] * theta
        a, b = x[..., 0::2], x[..., 1::2]
        y = np.stack([a * np.cos(angle) - b * np.sin(angle),
                      a * np.sin(angle) + b * np.cos(angle)], -1).reshape(x.shape)
        return y if convention == "interleaved" else _rope(x, offset, base, convention)

    assert rejections(mutant(rope=float32_angles), "rope")["float32"] > 0


# -- alibi ---------------------------------------------------------------------


def _alibi(slopes, t, s, *, top_left=False, symmetric=False):
    m = np.asarray(slopes, dtype=np.float64)[:, None, None]
    p = np.arange(t)[:, None] + (0 if top_left else s - t)
    d = p - np.arange(s)[None, :]
    return -m * (np.abs(d) if symmetric else d)


def alibi_geometric_for_every_h(*, num_heads, t, s):
    """m_h = 2^(-8 (h + 1) / H) also when H is not a power of two."""
    return _alibi(2.0 ** (-8.0 * np.arange(1, num_heads + 1) / num_heads), t, s)


def alibi_halving_slopes(*, num_heads, t, s):
    """m_h = 2^-(h + 1) whatever H (the 8-head slopes)."""
    return _alibi(2.0 ** -np.arange(1, num_heads + 1.0), t, s)


def alibi_reversed_heads(*, num_heads, t, s):
    return positional.alibi_bias(num_heads=num_heads, t=t, s=s)[::-1]


def alibi_top_left(*, num_heads, t, s):
    m = -positional.alibi_bias(num_heads=num_heads, t=1, s=2)[:, 0, 0]
    return _alibi(m, t, s, top_left=True)


def alibi_symmetric(*, num_heads, t, s):
    """-m |p - j| (the encoder variant), equal to the spec below the diagonal only."""
    m = -positional.alibi_bias(num_heads=num_heads, t=1, s=2)[:, 0, 0]
    return _alibi(m, t, s, symmetric=True)


def alibi_sign_flipped(*, num_heads, t, s):
    return -positional.alibi_bias(num_heads=num_heads, t=t, s=s)


ALIBI = [alibi_geometric_for_every_h, alibi_halving_slopes, alibi_reversed_heads,
         alibi_top_left, alibi_symmetric, alibi_sign_flipped]


@pytest.mark.parametrize("broken", ALIBI, ids=lambda f: f.__name__)
def test_alibi_mutant_is_rejected(broken):
    assert_rejected(mutant(alibi_bias=broken), "alibi")


# -- the correct backend ---------------------------------------------------------


@pytest.mark.parametrize("component", ["sinusoidal_pe", "learned_pe", "relative_attention",
                                       "rope", "alibi"])
def test_correct_backend_is_not_rejected(component):
    assert set(rejections(mutant(), component).values()) == {0}


def test_numpy_positional_module_is_the_one_mutated():
    assert mutant().function("rope", "positional") is positional.rope
