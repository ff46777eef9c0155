"""sdpa over a packed batch of variable-length sequences (flash-attn's varlen interface),
written once: each sequence's rows are sliced out and run through the backend's own sdpa.

    q (total_q, H, K), k (total_k, H_kv, K), v (total_k, H_kv, V); sequence b holds the
    query rows cu_seqlens_q[b]:cu_seqlens_q[b + 1] and the key rows cu_seqlens_k[b]:...[b + 1].

The offsets are read on the host with ``int()`` (they decide the slices), so a traced graph
cannot take them as tensors; flash-attn reads its max_seqlen_* on the host the same way.
"""

from __future__ import annotations

from attnspec.spec.errors import ConfigError, DomainError, ShapeError

from .. import _checks as check
from . import Composite


def host_ints(x) -> list[int]:
    """The offsets as Python ints (``int()`` of each element: copied off any device)."""
    return [int(x[i]) for i in range(check.shape(x)[0])]


def offsets(name: str, x, total: int, total_name: str) -> list[int]:
    """cu_seqlens checked: rank 1, at least one entry, 0 first, non-decreasing, last = total."""
    if len(check.shape(x)) != 1 or check.shape(x)[0] < 1:
        raise ShapeError(f"{name} must be a rank-1 array of B + 1 offsets, got shape "
                         f"{tuple(check.shape(x))}")
    cu = host_ints(x)
    if cu[0] != 0:
        raise DomainError(f"{name} must start at 0, got {name}[0] = {cu[0]}")
    for b in range(len(cu) - 1):
        if cu[b + 1] < cu[b]:
            raise DomainError(f"{name} is decreasing at {b + 1}: {cu[b]} then {cu[b + 1]}")
    if cu[-1] != total:
        raise ShapeError(f"{name} ends at {cu[-1]} but {total_name} has {total} rows "
                         f"(axis 0)")
    return cu


def maximum(name: str, value, cu: list[int]) -> None:
    longest = max((e - a for a, e in zip(cu, cu[1:])), default=0)
    if check.integer(name, value, lo=0) < longest:
        raise ConfigError(f"{name}={value} is smaller than the longest sequence, {longest}")


def local_band(left, right, causal: bool, window) -> tuple | None:
    """(left, right) of flash-attn's window_size=(left, right) met with causal (right 0) and
    window W (left <= W - 1, right 0); None when neither side is given."""
    left = None if left is None else check.integer("window_left", left, lo=0)
    right = None if right is None else check.integer("window_right", right, lo=0)
    if left is None and right is None:
        return None
    if causal or window is not None:
        right = 0
    if window is not None:
        left = window - 1 if left is None else min(left, window - 1)
    return left, right


class Varlen(Composite):
    EXPORTS = ("sdpa_varlen",)

    def _checked(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
        q = self.ops.floating("q", q)
        k, v = self.ops.floating("k", k, like=q), self.ops.floating("v", v, like=q)
        for name, x in (("q", q), ("k", k), ("v", v)):
            if len(check.shape(x)) != 3:
                raise ShapeError(f"{name} must be (total, heads, width), got shape "
                                 f"{tuple(check.shape(x))}")
        qs, ks, vs = (tuple(check.shape(x)) for x in (q, k, v))
        if ks[:2] != vs[:2] or qs[2] != ks[2]:
            raise ShapeError(f"k of shape {ks} and v of shape {vs} must share (total_k, H_kv), "
                             f"k.shape[-1] must be q's {qs[2]}")
        check.kv_divides(qs[1], ks[1])
        # the dtype checked by the backend; the values read from the argument as given (a
        # host array where a traced graph takes them as part of its key: TensorFlow's modes)
        self.ops.integers("cu_seqlens_q", cu_seqlens_q)
        self.ops.integers("cu_seqlens_k", cu_seqlens_k)
        cq = offsets("cu_seqlens_q", cu_seqlens_q, qs[0], f"q of shape {qs}")
        ck = offsets("cu_seqlens_k", cu_seqlens_k, ks[0], f"k of shape {ks}")
        if len(cq) != len(ck):
            raise ShapeError(f"cu_seqlens_q of shape ({len(cq)},) and cu_seqlens_k of shape "
                             f"({len(ck)},) must hold the same number of sequences")
        maximum("max_seqlen_q", max_seqlen_q, cq)
        maximum("max_seqlen_k", max_seqlen_k, ck)
        return q, k, v, cq, ck

    def _heads_first(self, x):
        """(T, H, .) -> (H, T, .), by heads (T may be 0)."""
        return self.ops.stack(self.ops.unstack(x, 1), 0)

    def _rows_first(self, x):
        """(H, T, .) -> (T, H, .)."""
        return self.ops.stack(self.ops.unstack(x, 0), 1)

    def _mask(self, t: int, s: int, causal: bool, window, band=None):
        if band is not None:
            return self.k.local_window_mask(t=t, s=s, left=band[0], right=band[1])
        if window is not None:
            return self.k.sliding_window_mask(t=t, s=s, window=window)
        return self.k.causal_mask(t=t, s=s) if causal else None

    def sdpa_varlen(self, q, k, v, cu_seqlens_q, cu_seqlens_k, *, max_seqlen_q, max_seqlen_k,
                    scale=None, causal=False, window=None, window_left=None, window_right=None):
        """output[rows of b] = sdpa(q_b, k_b, v_b, mask_b) per sequence b: (total_q, H, V)."""
        q, k, v, cq, ck = self._checked(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                        max_seqlen_k)
        causal = check.flag("causal", causal)
        if window is not None:
            check.integer("window", window, lo=1)
        band = local_band(window_left, window_right, causal, window)
        h, h_kv = check.shape(q)[1], check.shape(k)[1]
        parts = []
        for (a, e), (c, d) in zip(zip(cq, cq[1:]), zip(ck, ck[1:])):
            # T_b = 0 or S_b = 0 included: sdpa's own empty and fully-masked conventions
            out, _ = self.k.sdpa(self._heads_first(q[a:e]), self._heads_first(k[c:d]),
                                 self._heads_first(v[c:d]), self._mask(e - a, d - c, causal, window, band),
                                 scale=scale, num_kv_heads=None if h == h_kv else h_kv)
            parts.append(self._rows_first(out))  # (T_b, H, V)
        if not parts:  # B = 0
            return self.ops.zeros((check.shape(q)[0], h, check.shape(v)[2]), like=q)
        return parts[0] if len(parts) == 1 else self.ops.concat(parts, 0)
