"""attnspec's torch modules against PyTorch's built-ins, same weights, same run.

    python benchmarks/bench_torch.py [--device cpu] [--repeats 30]

Encoder layer (float32, B=8, T=128, D=256, H=8, F=1024, eval, no grad) against
nn.TransformerEncoderLayer, and multi-head self-attention against
nn.MultiheadAttention, each on both attnspec paths: "explicit" (softmax(q k^T) v written
out, weights computed) and "fused" (F.scaled_dot_product_attention + F.layer_norm).
Prints the median time of each and the ratio attnspec / built-in (lower is better), the
functions timed in alternation so that machine load affects both alike.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from attnspec.backends.torch import convert
from attnspec.backends.torch.modules import EncoderLayer, MultiHeadAttention


def _once(fn, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def interleaved(fns: dict, repeats: int, device: str) -> dict:
    """Median ms of each function, timed in alternation (round r times every function once),
    so load from other processes hits all of them alike; also the median per-round ratio
    of each to the first."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            times[k].append(_once(fn, device))
    first = next(iter(fns))
    return {k: (statistics.median(v) * 1e3,
                statistics.median(a / b for a, b in zip(v, times[first])))
            for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=30)
    a = ap.parse_args()
    B, T, D, H, F = 8, 128, 256, 8, 1024
    dev = a.device
    torch.manual_seed(0)
    builtin = torch.nn.TransformerEncoderLayer(D, H, F, dropout=0.0, batch_first=True,
                                               device=dev).eval()
    ours = EncoderLayer.from_spec(convert.encoder_layer_from_torch(builtin), num_heads=H).eval()
    x = torch.randn(B, T, D, device=dev)
    builtin_mha = builtin.self_attn
    ours_mha = MultiHeadAttention.from_spec(convert.mha_from_torch(builtin_mha), num_heads=H)
    print(f"torch {torch.__version__}, device {dev}, threads {torch.get_num_threads()}, "
          f"float32, B={B} T={T} D={D} H={H} F={F}, eval, no_grad, median of {a.repeats}")
    rows = []
    with torch.no_grad():
        ref = builtin(x)
        for path, nw in (("explicit", True), ("fused", False)):
            err = (ours(x, need_weights=nw) - ref).abs().max().item()
            assert err < 1e-4, f"encoder layer ({path}) differs from the built-in by {err}"
        enc = interleaved({"built-in": lambda: builtin(x),
                           "explicit": lambda: ours(x, need_weights=True),
                           "fused": lambda: ours(x, need_weights=False)}, a.repeats, dev)
        att = interleaved({"built-in": lambda: builtin_mha(x, x, x, need_weights=False),
                           "explicit": lambda: ours_mha(x, need_weights=True),
                           "fused": lambda: ours_mha(x, need_weights=False)}, a.repeats, dev)
    for comp, res, name in (("encoder layer", enc, "nn.TransformerEncoderLayer"),
                            ("mha", att, "nn.MultiheadAttention(need_weights=False)")):
        for path in ("explicit", "fused"):
            rows.append((comp, path, res[path][0], name, res["built-in"][0], res[path][1]))
    print(f"{'component':15} {'path':9} {'attnspec ms':>12} {'built-in ms':>12} "
          f"{'ratio':>7}  built-in")
    for comp, path, t, name, tb, ratio in rows:
        print(f"{comp:15} {path:9} {t:12.3f} {tb:12.3f} {ratio:7.3f}  {name}")
    print("ratio: median over rounds of attnspec time / built-in time in the same round")


if __name__ == "__main__":
    main()
