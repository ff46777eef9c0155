"""RoPE inverse frequencies under transformers' rope_type rules (spec/components/rope_frequencies.md),
shared by every backend: they are configuration numbers (no tensor input), so, like
``_checks.alibi_slopes``, they are computed once here in float64 and each backend wraps them.

K = rotary width, b = base, theta_i = b^(-2i/K), i = 0..K/2-1, L0 the original context length.
"""

from __future__ import annotations

import numpy as np
from attnspec.spec.errors import ConfigError, ShapeError

from . import _checks as check

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
# rope_frequencies' attributes besides head_dim and base: the keys of rope's `scaling`
SCALING_KEYS = ("rope_type", "seq_len", "factor", "original_max_position_embeddings",
                "max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                "attention_factor", "low_freq_factor", "high_freq_factor", "short_factor",
                "long_factor", "truncate")


def frequencies(*, head_dim, base=10000.0, rope_type="default", seq_len=None, factor=None,
                original_max_position_embeddings=None, max_position_embeddings=None,
                beta_fast=32.0, beta_slow=1.0, mscale=None, mscale_all_dim=None,
                attention_factor=None, low_freq_factor=None, high_freq_factor=None,
                short_factor=None, long_factor=None, truncate=True) -> tuple:
    """(inv_freq (K/2,) float64, attention factor m as a float)."""
    k = check.integer("head_dim", head_dim, lo=0)
    if k % 2:
        raise ConfigError(f"head_dim must be even (pairs of features), got {k}")
    rope_type = check.choice("rope_type", rope_type, ROPE_TYPES)
    base = positive("base", base)
    exponent = np.arange(0, k, 2, dtype=np.float64) / k  # (K/2,) = 2i / K
    theta = base ** -exponent
    if rope_type == "default":
        return theta, 1.0
    if rope_type == "dynamic":
        return _dynamic(k, base, exponent, positive("factor", factor),
                        positive("max_position_embeddings", max_position_embeddings), seq_len), 1.0
    if rope_type == "linear":
        return theta / positive("factor", factor), 1.0
    l0 = positive("original_max_position_embeddings", original_max_position_embeddings)
    if rope_type == "longrope":
        return _longrope(theta, l0, seq_len, factor, max_position_embeddings, attention_factor,
                         short_factor, long_factor)
    s = positive("factor", factor)
    if rope_type == "llama3":
        return _llama3(theta, s, l0, positive("low_freq_factor", low_freq_factor),
                       positive("high_freq_factor", high_freq_factor)), 1.0
    return (_yarn(theta, k, base, s, l0, positive("beta_fast", beta_fast),
                  positive("beta_slow", beta_slow), check.flag("truncate", truncate)),
            _yarn_attention(s, mscale, mscale_all_dim, attention_factor))


def scaled(scaling, *, rotary_dim, base, seq_len) -> tuple:
    """rope's `scaling` (a dict of rope_frequencies' attributes, transformers' rope_parameters
    without rope_theta): (inv_freq, m); seq_len defaults to the number of positions offset + T."""
    if scaling is None:
        return frequencies(head_dim=rotary_dim, base=base)
    if not isinstance(scaling, dict):
        raise ConfigError(f"scaling must be a dict of rope_parameters or None, got {scaling!r}")
    unknown = sorted(set(scaling) - set(SCALING_KEYS))
    if unknown:
        raise ConfigError(f"scaling has unknown keys {unknown}; known: {list(SCALING_KEYS)}")
    return frequencies(head_dim=rotary_dim, base=base, **{"seq_len": seq_len, **scaling})


def tables(shape, offset, base, convention, rotary_dim, scaling) -> tuple:
    """rope's checks on x's shape and the attributes, then m cos(p theta_i), m sin(p theta_i)
    (T, R/2) in float64 (angles in float64, as the spec computes them) and R."""
    *_, t, kw = check.rank("x", _Shape(shape), min_rank=2)
    if kw % 2:
        raise ShapeError(f"rope needs an even feature width, x has shape {tuple(shape)}")
    offset = check.integer("offset", offset, lo=0)
    check.choice("convention", convention, ("interleaved", "half"))
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 0:
        raise ConfigError(f"base must be a positive number, got {base!r}")
    r = rotary_width(rotary_dim, kw)
    theta, m = scaled(scaling, rotary_dim=r, base=base, seq_len=offset + t)  # (R/2,)
    angle = np.arange(offset, offset + t, dtype=np.float64)[:, None] * theta  # (T, R/2)
    return m * np.cos(angle), m * np.sin(angle), r


class _Shape:
    def __init__(self, shape):
        self.shape = tuple(int(d) for d in shape)


def rotary_width(rotary_dim, kw: int) -> int:
    """rotary_dim: None (= K) or an even integer in [0, K]."""
    if rotary_dim is None:
        return kw
    r = check.integer("rotary_dim", rotary_dim, lo=0, hi=kw)
    if r % 2:
        raise ConfigError(f"rotary_dim must be even, got {r} (x's feature width {kw})")
    return r


def positive(name, v) -> float:
    """A finite real number > 0 (bool and str refused), as a Python float."""
    return check.eps(v, name)


def _dynamic(k, base, exponent, s, l0, seq_len):
    # b' = b (s L / L0 - (s - 1))^(K / (K - 2)),  L = max(seq_len, L0) (transformers' L0 is
    # max_position_embeddings; seq_len None: L0)
    length = l0 if seq_len is None else max(check.integer("seq_len", seq_len, lo=0), l0)
    b2 = base * (s * length / l0 - (s - 1)) ** (k / (k - 2)) if k > 2 else base
    return b2 ** -exponent


def _llama3(theta, s, l0, low, high):
    if not high > low:
        raise ConfigError(f"high_freq_factor ({high}) must exceed low_freq_factor ({low})")
    w = 2 * np.pi / theta                                   # wavelengths (K/2,)
    sigma = (l0 / w - low) / (high - low)
    smooth = (1 - sigma) * theta / s + sigma * theta
    return np.where(w < l0 / high, theta, np.where(w > l0 / low, theta / s, smooth))


def _yarn(theta, k, base, s, l0, beta_fast, beta_slow, truncate):
    def d(r):  # the pair index whose wavelength turns r times over L0
        return k * np.log(l0 / (2 * np.pi * r)) / (2 * np.log(base))
    lo, hi = d(beta_fast), d(beta_slow)
    if truncate:
        lo, hi = np.floor(lo), np.ceil(hi)
    lo, hi = max(lo, 0), min(hi, k - 1)
    hi = hi + 0.001 if lo == hi else hi
    gamma = 1 - np.clip((np.arange(k // 2) - lo) / (hi - lo), 0, 1)  # 1: keep theta_i
    return theta / s * (1 - gamma) + theta * gamma


def _yarn_attention(s, mscale, mscale_all_dim, attention_factor):
    if attention_factor is not None:
        return positive("attention_factor", attention_factor)

    def mu(c=1.0):
        return 1.0 if s <= 1 else 0.1 * c * np.log(s) + 1.0
    return float(mu(mscale) / mu(mscale_all_dim)) if mscale and mscale_all_dim else float(mu())


def _longrope(theta, l0, seq_len, factor, max_pos, attention_factor, short, long):
    use_long = seq_len is not None and check.integer("seq_len", seq_len, lo=0) > l0
    name, f = ("long_factor", long) if use_long else ("short_factor", short)
    if not isinstance(f, (list, tuple)) or len(f) != len(theta):
        raise ConfigError(f"{name} must be a list of K/2 = {len(theta)} numbers, got {f!r}")
    f = np.array([positive(f"{name}[{i}]", v) for i, v in enumerate(f)])
    s = positive("factor", factor) if factor is not None else \
        positive("max_position_embeddings", max_pos) / l0
    if attention_factor is not None:
        m = positive("attention_factor", attention_factor)
    else:
        m = 1.0 if s <= 1 else float(np.sqrt(1 + np.log(s) / np.log(l0)))
    return theta / f, m
