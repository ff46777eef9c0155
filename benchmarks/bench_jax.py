"""attnspec's JAX backend against JAX's built-in attention, same weights, same run, float32:
sdpa and MHA (B=8, T=128, D=256, H=8).

    python benchmarks/bench_jax.py [--device cpu|gpu] [--repeat 30] [--compile default|fast]

The built-in is ``jax.nn.dot_product_attention`` (layout (B, T, H, K)), jitted; for MHA it
is wrapped in the same projections, all in one ``jax.jit``. attnspec's functions are called
as a user calls them (argument checks in Python, then the jitted kernel), and they also
return the attention weights, which the built-in does not; "sdpa fused" is sdpa with no
weights asked for (as the composites call it under ``attention=fused``): the built-in itself.
Prints, for each, the first call (compilation included: nearly all of what a conformance
run spends), the median of the later calls, the ratio attnspec / built-in and the largest
difference.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from attnspec.backends import jax as spec_jax
from attnspec.backends.jax._core import skipping_weights

B, T, D, H = 8, 128, 256, 8
K = D // H


def timed(fn, repeat):
    """(first call in s, median of the next ``repeat`` calls in s, the result)."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times), out


@jax.jit
def builtin_sdpa(q, k, v):
    """(B, H, T, K) in and out, through jax.nn's (B, T, H, K) layout."""
    t = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731
    return t(jax.nn.dot_product_attention(t(q), t(k), t(v)))


@jax.jit
def builtin_mha(x, p):
    def heads(y):  # (B, T, H*K) -> (B, T, H, K)
        return y.reshape(B, T, H, K)
    q, k, v = (heads(x @ p[f"w_{n}"] + p[f"b_{n}"]) for n in "qkv")
    o = jax.nn.dot_product_attention(q, k, v).reshape(B, T, D)  # (B, T, H*K)
    return o @ p["w_o"] + p["b_o"]


def report(name, ours, theirs, err):
    (f1, t1), (f2, t2) = ours, theirs
    print(f"{name:10s} attnspec {t1 * 1e3:8.3f} ms (first {f1 * 1e3:6.0f} ms)  "
          f"jax.nn {t2 * 1e3:8.3f} ms (first {f2 * 1e3:6.0f} ms)  ratio {t1 / t2:.3f}  "
          f"max|diff| {err:.2e}")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--compile", default="default", choices=("default", "fast"),
                    help="XLA as configured (default), or the conformance runs' fast compile")
    args = ap.parse_args(argv)
    backend = spec_jax.JaxBackend(device=args.device, compile=args.compile)  # before XLA starts
    sdpa = backend.function("sdpa", "attention")
    mha = backend.function("mha", "multihead")
    rng = np.random.default_rng(0)
    put = lambda a: backend.asarray(a, dtype="float32", device=args.device)  # noqa: E731
    q, k, v = (put(rng.normal(size=(B, H, T, K))) for _ in range(3))
    f1, t1, (ours, _) = timed(lambda: sdpa(q, k, v), args.repeat)
    f2, t2, theirs = timed(lambda: builtin_sdpa(q, k, v), args.repeat)
    print(f"device={args.device} float32 B={B} T={T} D={D} H={H} jax {jax.__version__} "
          f"({backend.compile_note})")
    report("sdpa", (f1, t1), (f2, t2), float(jnp.max(jnp.abs(ours - theirs))))
    with skipping_weights():  # no weights asked for: the fused path of the composites
        f1, t1, (fused, _) = timed(lambda: sdpa(q, k, v), args.repeat)
    report("sdpa fused", (f1, t1), (f2, t2), float(jnp.max(jnp.abs(fused - theirs))))

    x = put(rng.normal(size=(B, T, D)))
    p = {f"w_{n}": put(rng.normal(size=(D, D)) / np.sqrt(D)) for n in "qkvo"}
    p |= {f"b_{n}": put(rng.normal(size=(D,)) * 0.1) for n in "qkvo"}
    f1, t1, (ours, _) = timed(lambda: mha(x, x, x, num_heads=H, params=p), args.repeat)
    f2, t2, theirs = timed(lambda: builtin_mha(x, p), args.repeat)
    report("mha", (f1, t1), (f2, t2), float(jnp.max(jnp.abs(ours - theirs))))


if __name__ == "__main__":
    main()
