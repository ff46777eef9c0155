"""RoPE inverse frequencies under the scaling rules of Hugging Face transformers'
``modeling_rope_utils`` (the reference for names and conventions), in arbitrary precision.

K = rotary width (even), b = base, i = 0..K/2-1, theta_i = b^(-2i/K) (the default rule).
Returns {"inv_freq": (K/2,) object array, "attention_factor": mpf}; the attention factor
multiplies cos and sin (1 except yarn and longrope).

    linear:   theta_i / factor                                  (position interpolation)
    dynamic:  theta_i with b' = b (factor L / L0 - (factor - 1))^(K / (K - 2)), L = max(seq_len, L0)
    yarn:     theta_i ((1 - g_i) / factor + g_i), g_i = 1 - clamp((i - lo) / (hi - lo), 0, 1),
              lo = floor(d(beta_fast)), hi = ceil(d(beta_slow)) (no rounding if truncate is False),
              d(r) = K ln(L0 / (2 pi r)) / (2 ln b), lo >= 0, hi <= K - 1, hi = lo + 0.001 if equal;
              attention factor 0.1 ln(factor) + 1 (or mscale ratio, or given)
    llama3:   wavelength w_i = 2 pi / theta_i; w_i < L0 / high_freq_factor: theta_i;
              w_i > L0 / low_freq_factor: theta_i / factor; otherwise with
              s = (L0 / w_i - low) / (high - low): (1 - s) theta_i / factor + s theta_i
    longrope: theta_i / f_i, f = long_factor if seq_len > L0 else short_factor;
              attention factor sqrt(1 + ln(s) / ln(L0)), s = factor, or max_position_embeddings / L0
              when factor is not given (1 if s <= 1)
    dynamic's L0 is max_position_embeddings (transformers' spelling); seq_len None means L0
"""

import mpmath
import numpy as np

RULES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")


def rope_frequencies(*, head_dim, base=10000.0, rope_type="default", seq_len=None, factor=None,
                     original_max_position_embeddings=None, max_position_embeddings=None,
                     beta_fast=32.0, beta_slow=1.0, mscale=None, mscale_all_dim=None,
                     attention_factor=None, low_freq_factor=None, high_freq_factor=None,
                     short_factor=None, long_factor=None, truncate=True):
    k, b = int(head_dim), mpmath.mpf(base)
    theta = [mpmath.power(b, -mpmath.mpf(2 * i) / k) for i in range(k // 2)]
    one = mpmath.mpf(1)
    l0 = None if original_max_position_embeddings is None else mpmath.mpf(original_max_position_embeddings)
    if rope_type == "default":
        out, att = theta, one
    elif rope_type == "linear":
        out, att = [t / mpmath.mpf(factor) for t in theta], one
    elif rope_type == "dynamic":
        out, att = _dynamic(k, b, mpmath.mpf(factor), mpmath.mpf(max_position_embeddings), seq_len), one
    elif rope_type == "yarn":
        out = _yarn(theta, k, b, mpmath.mpf(factor), l0, beta_fast, beta_slow, truncate)
        att = _yarn_attention(factor, mscale, mscale_all_dim, attention_factor)
    elif rope_type == "llama3":
        out, att = _llama3(theta, mpmath.mpf(factor), l0, low_freq_factor, high_freq_factor), one
    elif rope_type == "longrope":
        f = long_factor if seq_len is not None and seq_len > l0 else short_factor
        out = [t / mpmath.mpf(fi) for t, fi in zip(theta, f)]
        att = _longrope_attention(factor, max_position_embeddings, l0, attention_factor)
    else:
        raise ValueError(rope_type)
    return {"inv_freq": np.array(out, dtype=object), "attention_factor": np.array(att, dtype=object)}


def _dynamic(k, b, factor, l0, seq_len):
    # b' = b (factor L / L0 - (factor - 1))^(K / (K - 2)),  L = max(seq_len, L0)
    length = l0 if seq_len is None else max(mpmath.mpf(seq_len), l0)
    if k <= 2:  # theta_0 = 1 whatever the base (and K / (K - 2) undefined at K = 2)
        return [mpmath.mpf(1)] * (k // 2)
    b2 = b * mpmath.power(factor * length / l0 - (factor - 1), mpmath.mpf(k) / (k - 2))
    return [mpmath.power(b2, -mpmath.mpf(2 * i) / k) for i in range(k // 2)]


def _yarn(theta, k, b, factor, l0, beta_fast, beta_slow, truncate):
    def d(r):  # the dimension whose wavelength makes r turns over L0
        return k * mpmath.log(l0 / (2 * mpmath.pi * mpmath.mpf(r))) / (2 * mpmath.log(b))
    lo, hi = d(beta_fast), d(beta_slow)
    if truncate:
        lo, hi = mpmath.floor(lo), mpmath.ceil(hi)
    lo, hi = max(lo, 0), min(hi, k - 1)
    if lo == hi:
        hi = hi + mpmath.mpf("0.001")
    out = []
    for i, t in enumerate(theta):
        ramp = min(max((i - lo) / (hi - lo), 0), 1)
        g = 1 - ramp  # 1: extrapolate (keep theta_i), 0: interpolate (theta_i / factor)
        out.append(t / factor * (1 - g) + t * g)
    return out


def _yarn_attention(factor, mscale, mscale_all_dim, attention_factor):
    if attention_factor is not None:
        return mpmath.mpf(attention_factor)

    def m(s, c=1):
        s = mpmath.mpf(s)
        return one_if(s <= 1) or mpmath.mpf("0.1") * mpmath.mpf(c) * mpmath.log(s) + 1
    if mscale and mscale_all_dim:
        return m(factor, mscale) / m(factor, mscale_all_dim)
    return m(factor)


def one_if(cond):
    return mpmath.mpf(1) if cond else None


def _llama3(theta, factor, l0, low, high):
    low, high = mpmath.mpf(low), mpmath.mpf(high)
    low_wavelen, high_wavelen = l0 / low, l0 / high
    out = []
    for t in theta:
        w = 2 * mpmath.pi / t
        if w < high_wavelen:
            out.append(t)
        elif w > low_wavelen:
            out.append(t / factor)
        else:
            s = (l0 / w - low) / (high - low)
            out.append((1 - s) * t / factor + s * t)
    return out


def _longrope_attention(factor, max_pos, l0, attention_factor):
    if attention_factor is not None:
        return mpmath.mpf(attention_factor)
    s = mpmath.mpf(factor) if factor is not None else mpmath.mpf(max_pos) / l0
    if s <= 1:
        return mpmath.mpf(1)
    return mpmath.sqrt(1 + mpmath.log(s) / mpmath.log(l0))
