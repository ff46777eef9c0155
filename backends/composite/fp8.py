"""sdpa on float8 inputs with descales (flash-attn 3's FP8 forward), written once: each of
q, k, v is checked on its format's grid through the backend's own float8 dtype (the
``fp8_grid`` of its attention module), dequantised in the computation dtype (the dtype the
values arrive in) and passed to the backend's own sdpa.

    q (B, H, T, K), k (B, H_kv, S, K), v (B, H_kv, S, V); a descale is None (1), a scalar
    (per tensor) or (B, H_kv) (per batch entry and kv head; query head h takes kv head
    h // (H / H_kv)'s, as flash-attn 3's q_descale).

Every backend dequantises explicitly (x * descale in the computation dtype, then sdpa): on
the CPU TensorFlow has no float8 matmul, torch's float8 `@` rounds its result to float8 and
its float32-accumulating `_scaled_mm` is 2-D only (spec/components/sdpa_fp8.md).
"""

from __future__ import annotations

import importlib

from attnspec.spec.errors import NotImplementedComponent, ShapeError

from .. import _checks as check
from . import Composite

FORMATS = ("e4m3fn", "e5m2")


def off_grid(name: str, fmt: str):
    """The message for ``name`` holding a value that float8 ``fmt`` cannot hold."""
    def message(x, back):
        bad = ~((back == x) | (x != x))  # NumPy arrays: NaN is a value of both formats
        at = tuple(int(i[0]) for i in bad.nonzero())
        return (f"{name} of shape {x.shape} holds {float(x[at])!r} at {at}, not a float8 {fmt} "
                f"value (its cast gives {float(back[at])!r}); fp8_format={fmt!r}")
    return message


def bad_descale(name: str):
    def message(d):
        return f"{name} must be finite and >= 0, got {d.tolist()}"
    return message


class Fp8(Composite):
    EXPORTS = ("sdpa_fp8",)

    def _shapes(self, q, k, v) -> tuple:
        for name, x in (("q", q), ("k", k), ("v", v)):
            if len(check.shape(x)) != 4:
                raise ShapeError(f"{name} must be (B, heads, length, width), got shape "
                                 f"{tuple(check.shape(x))}")
        qs, ks, vs = (tuple(check.shape(x)) for x in (q, k, v))
        if ks[:3] != vs[:3] or qs[0] != ks[0]:
            raise ShapeError(f"q of shape {qs}, k of shape {ks} and v of shape {vs} must share "
                             f"B; k and v (B, H_kv, S)")
        check.kv_divides(qs[1], ks[1])
        return qs[0], qs[1], ks[1]

    def _grid(self, name: str, x, fmt: str):
        grid = getattr(importlib.import_module(f"{self.k.package}.attention"), "fp8_grid", None)
        if grid is None:
            raise NotImplementedComponent(f"sdpa_fp8 needs {self.k.package}.attention.fp8_grid "
                                          f"(x through the framework's float8 dtype and back)")
        back = grid(x, fmt)  # through the framework's float8 dtype and back
        self.ops.value_check(self.ops.all_((back == x) | (x != x)), off_grid(name, fmt), x, back)

    def _descale(self, name: str, d, like, b: int, h_kv: int):
        if d is None:
            return None
        d = self.ops.floating(name, d, like=like)
        s = tuple(check.shape(d))
        if s not in ((), (b, h_kv)):
            raise ShapeError(f"{name} has shape {s}: a descale is per tensor, shape (), or per "
                             f"batch entry and kv head, (B, H_kv) = {(b, h_kv)}")
        self.ops.value_check(self.ops.all_((d >= 0) & (d < float("inf"))), bad_descale(name), d)
        return d

    def _per_head(self, d, heads: int, h_kv: int):
        """(B, H_kv) -> (B, heads, 1, 1), head h taking h // (heads / H_kv)'s; () as it is."""
        if d is None or len(check.shape(d)) == 0:
            return d
        cols = self.ops.unstack(d, 1)
        group = heads // h_kv
        return self.ops.stack([cols[h // group] for h in range(heads)], 1)[:, :, None, None]

    def plan(self, q, k, v, q_descale=None, k_descale=None, v_descale=None, *,
             fp8_format="e4m3fn", causal=False):
        """The checked inputs, the descales broadcast per head ((B, H or H_kv, 1, 1), a
        scalar or None) and the causal mask: ((q, k, v), (dq, dk, dv), mask)."""
        fmt = check.choice("fp8_format", fp8_format, FORMATS)
        q = self.ops.floating("q", q)
        k, v = self.ops.floating("k", k, like=q), self.ops.floating("v", v, like=q)
        b, h, h_kv = self._shapes(q, k, v)
        for name, x in (("q", q), ("k", k), ("v", v)):
            self._grid(name, x, fmt)
        given = [self._descale(n, d, q, b, h_kv)
                 for n, d in (("q_descale", q_descale), ("k_descale", k_descale),
                              ("v_descale", v_descale))]
        scales = (self._per_head(given[0], h, h_kv), self._per_head(given[1], h_kv, h_kv),
                  self._per_head(given[2], h_kv, h_kv))
        t, s = check.shape(q)[2], check.shape(k)[2]
        mask = self.k.causal_mask(t=t, s=s) if check.flag("causal", causal) else None
        return (q, k, v), scales, mask

    def sdpa_fp8(self, q, k, v, q_descale=None, k_descale=None, v_descale=None, *,
                 fp8_format="e4m3fn", scale=None, causal=False, num_kv_heads=None, softcap=None):
        """sdpa(q * q_descale, k * k_descale, v * v_descale): (B, H, T, V)."""
        xs, scales, mask = self.plan(q, k, v, q_descale, k_descale, v_descale,
                                     fp8_format=fp8_format, causal=causal)
        qh, kh, vh = (x if d is None else x * d for x, d in zip(xs, scales))  # dequantised
        out, _ = self.k.sdpa(qh, kh, vh, mask, scale=scale, num_kv_heads=num_kv_heads,
                             softcap=softcap)
        return out
