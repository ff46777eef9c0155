"""Attention core: softmax, masks, scaled dot-product, additive, Luong,
self- and multi-head attention, top-k attention, attention entropy."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from attnspec.spec.errors import DomainError

from .. import _checks as check
from . import _core
from . import _core as paths
from ._core import boolean, floating, integers


def softmax(x, mask=None, *, axis=-1):
    """softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), m = max over kept entries.

    Masked entries (mask False) and -inf get weight 0; a slice with nothing kept is all 0.
    Kept +inf entries share the slice equally (the limit); a kept NaN makes every kept
    weight of its slice NaN.
    """
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    if mask is None:
        if bool(torch.isfinite(x).all()):  # nothing masked: torch.softmax is the same equation
            return torch.softmax(x, dim=axis)
        keep = torch.ones_like(x, dtype=torch.bool)
    else:
        keep = boolean("mask", mask, x)
        check.broadcastable("mask", keep, s)
        keep = keep.expand(s)
    kept = keep & (x != -math.inf)  # entries that compete
    nan = (kept & torch.isnan(x)).any(dim=axis, keepdim=True)
    top = kept & (x == math.inf)
    live = torch.where(top.any(dim=axis, keepdim=True), top, kept & ~torch.isnan(x))
    x = torch.where(top, 0, x)  # each +inf entry: exp(0) = 1, an equal share
    # entries not live become -inf; a slice with nothing live becomes 0s (no NaN, even in
    # the gradient), then its weights are zeroed
    any_live = live.any(dim=axis, keepdim=True)
    fill = torch.where(any_live, -math.inf, 0).to(x.dtype)  # (two scalars make float32)
    y = torch.softmax(torch.where(live, x, fill), dim=axis)
    y = torch.where(live, y, 0)
    return torch.where(nan & kept, math.nan, y)


def weighted_sum(weights, v):
    """out[..., i, :] = sum over the j with weights[..., i, j] != 0 of weights[..., i, j] v[..., j, :].

    A key of weight 0 (masked) is left out, not multiplied by 0, so a NaN or inf in
    its value cannot reach the output (0 * NaN = NaN).
    """
    if bool(torch.isfinite(v).all()):
        return weights @ v  # (..., T, V)
    terms = weights[..., :, :, None] * v[..., None, :, :]  # (..., T, S, V)
    return torch.where((weights != 0)[..., None], terms, 0).sum(dim=-2)  # (..., T, V)


def causal_mask(*, t, s, device=None):
    """mask[i, j] = j <= i + (S - T): bottom-right aligned, as in decoding with a KV cache.

    When T > S the first T - S rows attend nothing. ``device`` (torch only): where the
    mask is made, default torch's default device.
    """
    t, s = check.size("t", t), check.size("s", s)
    i = torch.arange(t, device=device)[:, None]  # (T, 1)
    j = torch.arange(s, device=device)[None, :]  # (1, S)
    return j <= i + (s - t)  # (T, S)


def sliding_window_mask(*, t, s, window, device=None):
    """mask[i, j] = p - W < j <= p with p = i + (S - T): the causal mask limited to the W
    most recent keys (the query's own position included), bottom-right aligned.
    ``device`` (torch only): as for causal_mask."""
    t, s, w = check.window_mask_args(t, s, window)
    p = torch.arange(t, device=device)[:, None] + (s - t)  # (T, 1) absolute query positions
    j = torch.arange(s, device=device)[None, :]  # (1, S)
    return (j <= p) & (j > p - w)  # (T, S)


def local_window_mask(*, t, s, left, right, device=None):
    """mask[i, j] = p - left <= j <= p + right with p = i + (S - T), bottom-right aligned;
    left or right None: that side unbounded (flash-attn's window_size=(left, right), -1
    there being None here). ``device`` (torch only): as for causal_mask."""
    t, s, left, right = check.local_window_args(t, s, left, right)
    p = torch.arange(t, device=device)[:, None] + (s - t)  # (T, 1) absolute query positions
    j = torch.arange(s, device=device)[None, :]  # (1, S)
    keep = torch.ones((t, s), dtype=torch.bool, device=device)  # (T, S)
    if left is not None:
        keep &= j >= p - left
    if right is not None:
        keep &= j <= p + right
    return keep


def chunked_mask(*, t, s, chunk, causal=True, device=None):
    """mask[i, j] = (j // C == p // C) and (j <= p if causal), p = i + (S - T), floor division
    (Llama 4's attention_chunk_size). ``device`` (torch only): as for causal_mask."""
    t, s, c, causal = check.chunked_mask_args(t, s, chunk, causal)
    p = torch.arange(t, device=device)[:, None] + (s - t)  # (T, 1)
    j = torch.arange(s, device=device)[None, :]  # (1, S)
    keep = torch.div(j, c, rounding_mode="floor") == torch.div(p, c, rounding_mode="floor")
    return keep & (j <= p) if causal else keep  # (T, S)


def softcap(x, *, cap):
    """y = cap tanh(x / cap): logit soft-capping (Gemma 2), elementwise; cap > 0."""
    x = floating("x", x)
    c = check.eps(cap, "cap")
    return c * torch.tanh(x / c)


def padding_mask(ids, *, pad_id):
    """mask[b, 0, 0, j] = ids[b, j] != pad_id."""
    ids = integers("ids", ids)
    check.rank("ids", ids, min_rank=2, max_rank=2)
    pad_id = check.integer("pad_id", pad_id)
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def combined_mask(ids, *, pad_id, t, num_heads=1, causal=True):
    """mask[b, h, i, j] = padding[b, j] and causal[i, j] (causal over T x S, S = ids.shape[1])."""
    keep = padding_mask(ids, pad_id=pad_id)  # (B, 1, 1, S)
    t = check.size("t", t)
    h = check.integer("num_heads", num_heads, lo=1)
    causal = check.flag("causal", causal)
    b, s = keep.shape[0], keep.shape[-1]
    if causal:
        keep = keep & causal_mask(t=t, s=s, device=keep.device)  # (B, 1, T, S)
    return keep.expand(b, h, t, s).clone()  # (B, H, T, S)


def repeat_kv(q, k, v, num_kv_heads):
    """k, v (..., H_kv, S, .) -> (..., H, S, .), each kv head repeated H / H_kv times."""
    group = check.kv_group(num_kv_heads, q, k, v)
    return k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)


def sdpa(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None):
    """weights = softmax(cap(scale * q k^T) + bias, masked), output = weights v.

    scale defaults to 1/sqrt(K); masked keys get weight 0 and a row with no key
    left gives zero weights and a zero output. With num_kv_heads (grouped-query
    attention), axis -3 holds the heads and query head h reads kv head h // (H / H_kv);
    the fused path hands the unrepeated k, v to PyTorch's kernel with enable_gqa=True.
    With softcap = c, cap(s) = c tanh(s / c), before the bias and the mask (Gemma 2, ONNX);
    PyTorch's kernel has no soft-cap, so softcap always takes the explicit path.
    """
    k_kv, v_kv = k, v
    if num_kv_heads is not None:
        k, v = repeat_kv(q, k, v, num_kv_heads)
    q, k, v, mask, bias, full = check.attention_inputs(_core, q, k, v, mask, bias)
    c = check.scale(scale, q.shape[-1])
    cap = check.softcap(softcap)
    gqa = num_kv_heads is not None  # the kernel repeats the unrepeated k_kv, v_kv itself
    if cap is None and paths.skip_weights():  # the modules' fast path: no weights asked for
        return fused_sdpa(q, k_kv, v_kv, mask, bias, scale=c, enable_gqa=gqa), None
    weights = _weights(q, k, mask, bias, c, full, cap)  # (..., T, S)
    if cap is None and paths.current().attention == "fused":  # (non-finite: explicit)
        return fused_sdpa(q, k_kv, v_kv, mask, bias, scale=c, enable_gqa=gqa), weights
    paths.note("explicit")
    out = weighted_sum(weights, v)  # (..., T, V)
    return out, None if paths.skip_weights() else weights  # (..., T, S)


def _weights(q, k, mask, bias, c: float, full: tuple, cap: float | None = None):
    """softmax(cap(c * q k^T) + bias, mask), (..., T, S)."""
    scores = (q @ k.transpose(-1, -2)) * c  # (..., T, S)
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    if bias is not None:
        scores = scores + bias
    return softmax(scores.expand(full), mask)


def _fusable(q, k, v, bias) -> bool:
    """PyTorch's kernel multiplies masked keys by weight 0 (0 * NaN = NaN) and gives NaN
    for +inf scores, so it runs only on finite q, k, v and a bias without NaN or +inf.
    A sum is finite only if every term is (an overflowing sum of finite terms just sends
    the call to the explicit path): one read of each array, no (.., T, K) temporaries."""
    ok = torch.isfinite(q.sum()) & torch.isfinite(k.sum()) & torch.isfinite(v.sum())
    if bias is not None:
        ok = ok & ~(torch.isnan(bias) | (bias == math.inf)).any()
    return bool(ok)  # one device sync


def fused_sdpa(q, k, v, mask=None, bias=None, *, scale, enable_gqa=False):
    """The output of sdpa through torch.nn.functional.scaled_dot_product_attention.

    Same mask polarity (True = may attend); a bias becomes a float mask with -inf where
    masked; rows with nothing to attend to are set to 0 (PyTorch gives NaN there).
    The mask is handed over compact (never expanded to the scores' shape): a causal (T, T)
    mask becomes ``is_causal=True`` (no mask at all), any other one keeps its own shape, so
    memory stays linear in T where the mask is (or is no more than the mask itself).
    enable_gqa: k, v have H_kv heads on axis -3 (grouped-query attention, checked), and
    PyTorch's kernel maps query head h to kv head h // (H / H_kv).
    Inputs are assumed checked (this is the fast path of ``sdpa`` and the modules); inputs
    the kernel would get wrong (see ``_fusable``) take the explicit path instead.
    """
    if not _fusable(q, k, v, bias):
        paths.note("explicit")
        if enable_gqa:
            group = q.shape[-3] // k.shape[-3]
            k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
        full = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) + \
            (q.shape[-2], k.shape[-2])
        return weighted_sum(_weights(q, k, mask, bias, scale, tuple(full)), v)
    paths.note("fused")
    lead = -3 if enable_gqa else -2  # the head axis differs between q and k, v under GQA
    batch = torch.broadcast_shapes(q.shape[:lead], k.shape[:lead], v.shape[:lead])
    q, k, v = (x.expand(*batch, *x.shape[lead:]) for x in (q, k, v))  # views
    t, s = q.shape[-2], k.shape[-2]
    causal = bias is None and _is_causal(mask, t, s)
    keep, attn = (None, None) if causal else _compact_mask(mask, bias)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn, is_causal=causal, scale=scale,
                                         enable_gqa=enable_gqa)  # (..., T, V)
    if keep is None:
        return out
    any_key = keep.any(dim=-1, keepdim=True)  # (..., T, 1) at the mask's own batch shape
    return torch.where(any_key, out, 0)


def _at_least_2d(m):
    """The spec's masks broadcast from any rank (a (S,) key mask); PyTorch's needs (.., T, S)."""
    return m if m is None or m.dim() >= 2 else m.reshape((1,) * (2 - m.dim()) + tuple(m.shape))


def _is_causal(mask, t: int, s: int) -> bool:
    """Whether mask, broadcast, is exactly the causal (T, T) mask: then PyTorch's
    ``is_causal`` (top-left aligned, the same as the spec's bottom-right one when T = S)."""
    if mask is None or t != s or mask.shape[-2:] != (t, s) or mask.numel() != t * s:
        return False
    causal = torch.ones(t, s, dtype=torch.bool, device=mask.device).tril_()  # (T, S)
    return torch.equal(mask.reshape(t, s), causal)


def _compact_mask(mask, bias) -> tuple:
    """(keep, attn_mask): the kept keys and the mask for PyTorch, both at the broadcast
    shape of mask and bias only (a (T, S) mask stays (T, S))."""
    mask, bias = _at_least_2d(mask), _at_least_2d(bias)
    if bias is None:
        return mask, mask
    keep = bias != -math.inf
    if mask is None:
        return keep, bias
    return keep & mask, torch.where(mask, bias, -math.inf)


TIES = ("lower_index", "keep_all")


def topk_attention(q, k, v, mask=None, *, top_k, scale=None, ties="lower_index"):
    """Softmax over the top_k largest scores scale * q k^T of each query, 0 elsewhere.

    Only unmasked keys compete; with fewer than top_k unmasked keys all of them are
    kept. ties="lower_index": equal scores keep the lower key index first (exactly
    top_k kept); "keep_all": every key scoring >= the top_k-th largest is kept.
    A NaN among a row's unmasked scores makes its unmasked weights NaN.
    """
    q, k, v, mask, _, full = check.attention_inputs(_core, q, k, v, mask, None)
    top_k = check.integer("top_k", top_k, lo=1, hi=full[-1])
    ties = check.choice("ties", ties, TIES)
    c = check.scale(scale, q.shape[-1])
    scores = ((q @ k.transpose(-1, -2)) * c).expand(full)  # (..., T, S)
    allowed = (torch.ones(full, dtype=torch.bool, device=q.device) if mask is None
               else mask.expand(full))
    # a stable sort of -score ranks equal scores by key index; masked keys go last
    order = torch.argsort(torch.where(allowed, -scores, math.inf), dim=-1, stable=True)
    positions = torch.arange(full[-1], device=q.device).expand(full)
    rank = torch.empty_like(order).scatter_(-1, order, positions)
    chosen = allowed & (rank < top_k)  # (..., T, S)
    if ties == "keep_all":
        kth = torch.where(chosen, scores, math.inf).amin(dim=-1, keepdim=True)  # (..., T, 1)
        chosen = allowed & (scores >= kth)
    weights = softmax(scores, chosen)  # (..., T, S)
    nan = (allowed & torch.isnan(scores)).any(dim=-1, keepdim=True)
    weights = torch.where(nan & allowed, math.nan, weights)
    return weighted_sum(weights, v), weights  # (..., T, V), (..., T, S)


def attention_entropy(weights, *, axis=-1):
    """H = -sum_j w_j ln w_j along axis, with 0 ln 0 = 0 (nats)."""
    w = floating("weights", weights)
    s = check.rank("weights", w, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    ok = torch.isfinite(w) & (w >= 0)
    if not bool(torch.all(ok)):
        raise DomainError(f"weights must be finite and >= 0, got a value of "
                          f"{w[~ok].flatten()[0].item()} in shape {s}")
    positive = w > 0
    terms = torch.where(positive, w * torch.log(torch.where(positive, w, 1)), 0)
    return -torch.sum(terms, dim=axis)


# == log-sum-exp output and merging attention states (issue 22) ==========================

def logsumexp(x, keep, dim: int = -1):
    """ln sum_j exp(x_j) over the kept entries (keep and x_j != -inf); none kept -> -inf,
    a kept +inf -> +inf, a kept NaN -> NaN. The maximum m of the finite kept entries is
    subtracted first (and held constant: its gradient cancels); an empty row's log is taken
    of 1, then replaced, so no NaN reaches the gradient."""
    if x.shape[dim] == 0:  # an empty sum (amax refuses an empty axis)
        return torch.full(x.sum(dim=dim).shape, -math.inf, dtype=x.dtype, device=x.device)
    kept = keep & (x != -math.inf)
    nan = (kept & torch.isnan(x)).any(dim=dim)
    top = (kept & (x == math.inf)).any(dim=dim)
    live = kept & torch.isfinite(x)
    m = torch.where(live, x, -math.inf).amax(dim=dim, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, 0)
    total = torch.where(live, torch.exp(torch.where(live, x - m, 0)), 0).sum(dim=dim)
    some = total > 0
    lse = torch.where(some, m.squeeze(dim) + torch.log(torch.where(some, total, 1)), -math.inf)
    lse = torch.where(top, math.inf, lse)
    return torch.where(nan, math.nan, lse)


def sdpa_lse(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None):
    """sdpa's output and lse[..., i] = ln sum_j exp(scores[..., i, j]) over the kept keys
    (natural log; -inf for a row with nothing kept, whose output is 0). Always the explicit
    path: PyTorch's public kernel returns no log-sum-exp."""
    q, v, scores, keep, _ = _kept_scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    paths.note("explicit")
    return weighted_sum(softmax(scores, keep), v), logsumexp(scores, keep)  # (..., T, V), (..., T)


def _kept_scores(q, k, v, mask, bias, scale, num_kv_heads, softcap):
    """The checked arrays, the scaled, capped, biased scores and the kept keys, written out
    (sdpa_lse, sdpa_sinks): (q, v, scores (..., T, S), keep (..., T, S), that shape)."""
    if num_kv_heads is not None:
        k, v = repeat_kv(q, k, v, num_kv_heads)
    q, k, v, mask, bias, full = check.attention_inputs(_core, q, k, v, mask, bias)
    c = check.scale(scale, q.shape[-1])
    cap = check.softcap(softcap)
    scores = (q @ k.transpose(-1, -2)) * c  # (..., T, S)
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    if bias is not None:
        scores = scores + bias
    keep = torch.ones(full, dtype=torch.bool, device=q.device) if mask is None else mask.expand(full)
    return q, v, scores.expand(full), keep, full


def merge_attention_states(outputs, lses):
    """w = softmax over the parts (axis 0) of lses (a -inf part gets weight 0; all -inf: 0),
    output = sum_n w_n outputs_n over the parts with w_n != 0, lse = ln sum_n exp(lses_n)."""
    o, s = check.attention_states(_core, outputs, lses)  # (N, ..., V), (N, ...)
    w = softmax(s, axis=0)[..., None]  # (N, ..., 1)
    used = w != 0
    terms = w * torch.where(used, o, 0)  # an unused part's NaN never meets its weight 0
    return terms.sum(dim=0), logsumexp(s, torch.ones_like(s, dtype=torch.bool), dim=0)


# == attention sinks (issue 22 item 4) =====================================================

def sdpa_sinks(q, k, v, sinks, mask=None, bias=None, *, scale=None, num_kv_heads=None,
               softcap=None):
    """W = exp(S) / (exp(sinks[h]) + sum_kept exp(S)) per head h (axis -3), output = W v:
    the softmax over the scores with the sink column appended (gpt-oss), then dropped. The
    sink is neither scaled, capped nor biased; a fully masked row gives zeros."""
    q, v, scores, keep, full = _kept_scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    sinks = check.sinks_of(_core, sinks, full, q)  # (..., H, T, S) scores
    column = sinks[:, None, None].expand(*full[:-1], 1)  # (..., H, T, 1)
    kept = torch.cat([keep, torch.ones_like(column, dtype=torch.bool)], dim=-1)
    weights = softmax(torch.cat([scores, column], dim=-1), kept)[..., :-1]  # (..., H, T, S)
    paths.note("explicit")
    return weighted_sum(weights, v), weights


# == paged KV cache (issue 22 item 3) ======================================================

def _paged_kv(cache, index):
    """cache (N, P, H_kv, D) read at flat slots index (B, S) -> (B, H_kv, S, D)."""
    return cache.reshape((-1,) + tuple(cache.shape[2:]))[index].transpose(1, 2)


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, *, scale=None, causal=False):
    """sdpa of q (B, T, H, K) over the keys and values of each sequence gathered through its
    block table (key j of sequence b at block_table[b, j // P], offset j % P, j < seq_lens[b]);
    causal: query t sits at position seq_lens[b] - T + t. Output (B, T, H, V)."""
    q, kc, vc, index, keep = check.paged_attention_plan(_core, q, k_cache, v_cache, block_table,
                                                        seq_lens, causal)
    index = torch.as_tensor(index, device=q.device)
    keep = torch.as_tensor(keep, device=q.device)
    out, _ = sdpa(q.transpose(1, 2), _paged_kv(kc, index), _paged_kv(vc, index), keep[:, None],
                  scale=scale, num_kv_heads=kc.shape[2])  # (B, H, T, V)
    return out.transpose(1, 2)


def _written(cache, index, new):
    """A copy of cache (N, P, H_kv, D) with flat slots index (B*T,) set to new (B, T, H_kv, D)."""
    flat = cache.reshape((-1,) + tuple(cache.shape[2:])).clone()  # (N*P, H_kv, D)
    flat[torch.as_tensor(index, device=cache.device)] = new.reshape((-1,) + tuple(new.shape[2:]))
    return flat.reshape(cache.shape)


def paged_kv_append(k_cache, v_cache, block_table, seq_lens, k, v):
    """The caches with k, v (B, T, H_kv, .) written at positions seq_lens[b] .. + T - 1 through
    the block table, and seq_lens + T; the inputs are not modified."""
    kc, vc, k, v, index, lens = check.paged_append_plan(_core, k_cache, v_cache, block_table,
                                                        seq_lens, k, v)
    return _written(kc, index, k), _written(vc, index, v), torch.as_tensor(lens, device=kc.device)


# sdpa over a packed batch of variable-length sequences: the shared composite over this sdpa.
from ..composite.varlen import Varlen  # noqa: E402

(sdpa_varlen,) = Varlen.bind(__package__, "sdpa_varlen")


# == float8 inputs with descales (issue 22 item 6) =========================================

def fp8_grid(x, fp8_format):
    """x cast to torch's float8 of the format and back (no gradient: a check of values)."""
    f8 = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fp8_format]
    return x.detach().to(f8).to(x.dtype)


# sdpa on float8 inputs: the shared composite over this sdpa. torch's CPU float8 `@` rounds
# its result to float8 and _scaled_mm (float32 accumulation) is 2-D only: the inputs are
# checked through torch's float8 and dequantised explicitly (x * descale), then this sdpa.
from ..composite.fp8 import Fp8  # noqa: E402

(sdpa_fp8,) = Fp8.bind(__package__, "sdpa_fp8")
