"""Routes from an sdpa vector to PyTorch's CPU attention kernels (issue 21.3), each a small
adapter: the vector's inputs and attributes become the kernel's call, its output comes
back as NumPy. A vector whose attributes the kernel cannot express raises :class:`Skip`
with the reason; anything else the kernel does is judged.

- ``flex``: ``torch.nn.attention.flex_attention`` under ``torch.compile(dynamic=True)``;
  causal and sliding windows as ``mask_mod`` (bottom-right), any other mask as a
  ``mask_mod`` reading it, the bias and the soft-cap as ``score_mod``, GQA as
  ``enable_gqa``.
- ``sdpa-math``, ``sdpa-flash``: ``F.scaled_dot_product_attention`` pinned to one CPU
  implementation with ``torch.nn.attention.sdpa_kernel`` (SDPBackend.MATH,
  SDPBackend.FLASH_ATTENTION); the mask (causal included, bottom-right) as a boolean
  ``attn_mask``, a bias as a float ``attn_mask`` with ``-inf`` where the mask drops.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import AuxRequest, flex_attention

from .vectors import Call

TORCH = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
         "bfloat16": torch.bfloat16}


class Skip(Exception):
    """The kernel cannot express this vector's attributes (the message says which)."""


def _t(a, dtype):
    return torch.from_numpy(np.ascontiguousarray(np.asarray(a, np.float64))).to(TORCH[dtype])


def _four_d(c: Call):
    """q, k, v as (N, H, T, K): batch dims broadcast and flattened; the head axis is -3
    with GQA, else 1. Returns the arrays and the batch shape of the scores."""
    if c.num_kv_heads is not None:
        lead = np.broadcast_shapes(c.q.shape[:-3], c.k.shape[:-3], c.v.shape[:-3])
        batch = (*lead, c.q.shape[-3])
        q = np.broadcast_to(c.q, (*lead, c.q.shape[-3], c.t, c.q.shape[-1]))
        k = np.broadcast_to(c.k, (*lead, c.k.shape[-3], c.s, c.k.shape[-1]))
        v = np.broadcast_to(c.v, (*lead, c.v.shape[-3], c.s, c.v.shape[-1]))
        n = int(np.prod(lead))
        return [x.reshape(n, x.shape[-3], x.shape[-2], x.shape[-1]) for x in (q, k, v)], batch
    batch = np.broadcast_shapes(c.q.shape[:-2], c.k.shape[:-2], c.v.shape[:-2])
    n = int(np.prod(batch))
    out = [np.broadcast_to(x, (*batch, *x.shape[-2:])).reshape(n, 1, *x.shape[-2:])
           for x in (c.q, c.k, c.v)]
    return out, batch


def _keep(c: Call, batch, shape):
    """The boolean (N, H, T, S) mask with causal/window applied, or None."""
    from attnspec.backends.numpy import attention as npa

    keep = None if c.mask is None else np.broadcast_to(c.mask, (*batch, c.t, c.s)).reshape(shape)
    if c.causal or c.window is not None:
        cm = (npa.causal_mask(t=c.t, s=c.s) if c.window is None
              else npa.sliding_window_mask(t=c.t, s=c.s, window=c.window))
        keep = cm if keep is None else keep & cm
    return None if keep is None else np.ascontiguousarray(np.broadcast_to(keep, shape))


def _scores_shape(c, batch, arrays):
    n, h = arrays[0].shape[:2]
    return batch, (n, h, c.t, c.s)


def _score_mod(score, b, h, i, j, bias, cap, keep):
    """cap = (scale, C, 1 if capped else 0): scale, then C tanh(s / C), then the bias; -inf
    where ``keep`` is False."""
    score = score * cap[0]
    capped = cap[1] * torch.tanh(score / cap[1])
    score = torch.where(cap[2] > 0, capped, score) + bias[b, h, i, j]
    return torch.where(keep[b, h, i, j], score, -float("inf"))


def _flex_call(q, k, v, bias, cap, keep):
    def score_mod(score, b, h, i, j):
        return _score_mod(score, b, h, i, j, bias, cap, keep)
    return flex_attention(q, k, v, score_mod=score_mod, scale=1.0, enable_gqa=True)


def _flex_call_lse(q, k, v, bias, cap, keep):
    """_flex_call with FlexAttention's log-sum-exp (natural log, (N, H, T))."""
    def score_mod(score, b, h, i, j):
        return _score_mod(score, b, h, i, j, bias, cap, keep)
    out, aux = flex_attention(q, k, v, score_mod=score_mod, scale=1.0, enable_gqa=True,
                              return_aux=AuxRequest(lse=True))
    return out, aux.lse


@functools.cache
def compiled_flex(lse: bool = False):
    """Compiled with static shapes (torch 2.13's CPU FlexAttention template fails to build
    its C++ on a second shape under dynamic=True): every call is padded to a bucket
    (:func:`_bucket`) and passes every per-call tensor (bias, scale and cap, the mask) as an
    argument, so one program per dtype and bucket is compiled and nothing is captured. The
    mask is a ``-inf`` in ``score_mod``: a block mask's ``mask_mod`` closing over a tensor
    is guarded by identity, recompiles on every call and, past the recompile limit, runs
    eagerly without a word. A hit limit is made an error here."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.fail_on_recompile_limit_hit = True
    dynamo_config.recompile_limit = 64  # one program per dtype and bucket: 18 for the vectors
    return torch.compile(_flex_call_lse if lse else _flex_call, dynamic=False)


FLEX_DTYPES = ("float32", "float16", "bfloat16")


def _bucket(n: int, least: int) -> int:
    return max(least, 1 << max(0, n - 1).bit_length())


def _pad(x, shape):
    out = np.zeros(shape)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out


def flex(c: Call, dtype: str, *, compiled=True, lse=False):
    """FlexAttention on the CPU (float32, float16, bfloat16: compiled FlexAttention refuses
    float64 there). Padded keys are masked out, padded queries and columns dropped
    (zero columns change no score; the scale is passed). Returns {"output": ...}, and with
    ``lse`` its log-sum-exp {"lse": (..., T)} (sdpa_lse's output)."""
    (q, k, v), batch = _four_d(c)
    full_batch, shape = _scores_shape(c, batch, (q, k, v))
    if 0 in shape or v.shape[-1] == 0:
        raise Skip("empty T or S: compiled FlexAttention needs T, S >= 1 (not tried at 0)")
    keep = _keep(c, full_batch, shape)
    n, h, t, s = shape
    hk = k.shape[1]
    pn, pt, ps = _bucket(n, 8), _bucket(t, 8), _bucket(s, 8)
    pk, pv = _bucket(q.shape[-1], 16), _bucket(v.shape[-1], 16)
    keep_p = np.zeros((pn, h, pt, ps), bool)
    keep_p[:n, :, :t, :s] = True if keep is None else keep
    keep_t = torch.from_numpy(keep_p)
    bias = np.zeros((pn, h, pt, ps))
    if c.bias is not None:
        bias[:n, :, :t, :s] = np.broadcast_to(c.bias, (*full_batch, t, s)).reshape(shape)
    scale = 1 / np.sqrt(c.q.shape[-1]) if c.scale is None else c.scale
    cap = torch.tensor([scale, c.softcap or 1.0, 1.0 if c.softcap else 0.0], dtype=torch.float32)
    fn = compiled_flex(lse) if compiled else (_flex_call_lse if lse else _flex_call)
    out = fn(_t(_pad(q, (pn, h, pt, pk)), dtype), _t(_pad(k, (pn, hk, ps, pk)), dtype),
             _t(_pad(v, (pn, hk, ps, pv)), dtype), _t(bias, "float32"), cap, keep_t)
    out, rows = out if lse else (out, None)
    got = {"output": out[:n, :, :t, :v.shape[-1]].to(torch.float64).numpy()
           .reshape(*full_batch, t, v.shape[-1])}
    if lse:
        got["lse"] = rows[:n, :, :t].to(torch.float64).numpy().reshape(*full_batch, t)
    return got


def sdpa(c: Call, dtype: str, *, backend: SDPBackend):
    """F.scaled_dot_product_attention pinned to one CPU implementation."""
    if c.softcap is not None:
        raise Skip("softcap: F.scaled_dot_product_attention has no logit soft-cap")
    (q, k, v), batch = _four_d(c)
    width = v.shape[-1]
    if backend == SDPBackend.FLASH_ATTENTION:  # it needs K = V: zero columns, exact
        q, k, v = _same_width(q, k, v)
        scale = 1 / np.sqrt(c.q.shape[-1]) if c.scale is None else c.scale
        c = Call(c.q, c.k, c.v, c.mask, c.bias, scale, c.num_kv_heads, None, c.causal, c.window)
    full_batch, shape = _scores_shape(c, batch, (q, k, v))
    keep = _keep(c, full_batch, shape)
    mask = None
    if c.bias is not None:
        b = np.ascontiguousarray(np.broadcast_to(c.bias, (*full_batch, c.t, c.s)).reshape(shape))
        mask = _t(np.where(keep, b, -np.inf) if keep is not None else b, dtype)
    elif keep is not None:
        mask = torch.from_numpy(keep)
    with sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(_t(q, dtype), _t(k, dtype), _t(v, dtype),
                                             attn_mask=mask, scale=c.scale,
                                             enable_gqa=c.num_kv_heads is not None)
    out = out[..., :width]
    return {"output": out.to(torch.float64).numpy().reshape(*full_batch, c.t, width)}


def _same_width(q, k, v, multiple=1):
    """Zero columns to give q, k and v one width (the scores and the output's first V
    columns are unchanged; the scale is passed explicitly)."""
    w = -(-max(q.shape[-1], v.shape[-1]) // multiple) * multiple

    def pad(x):
        return np.concatenate([x, np.zeros((*x.shape[:-1], w - x.shape[-1]))], axis=-1)
    return pad(q), pad(k), pad(v)


DTYPES = {"flex": FLEX_DTYPES, "sdpa-math": tuple(TORCH), "sdpa-flash": tuple(TORCH)}
ROUTES = {
    "flex": flex,
    "sdpa-math": functools.partial(sdpa, backend=SDPBackend.MATH),
    "sdpa-flash": functools.partial(sdpa, backend=SDPBackend.FLASH_ATTENTION),
}
