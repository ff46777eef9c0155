"""Time and peak memory of attnspec's fused torch paths against the built-ins, against T.

    python benchmarks/bench_memory.py [--ts 256,1024,4096] [--rounds 3] [--threads 1] [--plot FILE]

Issue 27 item 2. float32, CPU, eval, no grad, one process per memory measurement:

- encoder layer: ``modules.EncoderLayer`` (need_weights=False) vs nn.TransformerEncoderLayer;
- mha: ``modules.MultiHeadAttention`` (need_weights=False) vs nn.MultiheadAttention;
- llama_layer: ``layers.llama_layer`` under ``attention_path("fused")`` (causal) vs
  transformers' LlamaDecoderLayer with ``attn_implementation="sdpa"`` (causal, no mask);
- llama_layer explicit: the default path (weights written out), T = 256 only.

At B=1, D=512, H=8 (llama: H_kv=4, F=1376) for every T, plus the encoder layer and mha at
B=8, T=128, D=256. Time: median of ``--rounds`` rounds, the two sides of a case timed in
alternation in this process, ratio = median over rounds of ours / built-in. Peak memory:
a fresh subprocess per (case, side, T) builds the module and input, runs one warm-up
forward, resets the kernel's peak-RSS mark (``/proc/self/clear_refs`` = 5), runs one forward
and reports VmHWM - VmRSS before it (so the inputs, weights and one-time buffers are not
counted; no tracemalloc, which cannot see torch's allocations). glibc's malloc runs with
MALLOC_MMAP_THRESHOLD_=65536, so every freed tensor goes back to the kernel and the second
forward's peak is its own. Linux only. ``--threads`` (default 1: the shared 2-core machine)
is torch's thread count in every process. ``--plot FILE`` (.png or .svg; the ``plot`` extra)
draws time and peak memory against T, ours and the built-in, one line per case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

D, H, H_KV, F_LLAMA = 512, 8, 4, 1376
TARGETS = {"encoder layer": 1.05, "mha": 1.05, "llama_layer": 1.5}  # time ratio
MEMORY_TARGET = 2.0  # peak memory ratio at T=4096 (llama_layer: at 1024 too)


def _encoder(t: int, b: int = 1, d: int = D, h: int = H):
    import torch
    from attnspec.backends.torch import convert
    from attnspec.backends.torch.modules import EncoderLayer
    builtin = torch.nn.TransformerEncoderLayer(d, h, 4 * d, dropout=0.0, batch_first=True).eval()
    ours = EncoderLayer.from_spec(convert.encoder_layer_from_torch(builtin), num_heads=h).eval()
    x = torch.randn(b, t, d)
    return (lambda: ours(x, need_weights=False)), (lambda: builtin(x))


def _mha(t: int, b: int = 1, d: int = D, h: int = H):
    import torch
    from attnspec.backends.torch import convert
    from attnspec.backends.torch.modules import MultiHeadAttention
    builtin = torch.nn.MultiheadAttention(d, h, batch_first=True).eval()
    ours = MultiHeadAttention.from_spec(convert.mha_from_torch(builtin), num_heads=h)
    x = torch.randn(b, t, d)
    return (lambda: ours(x, need_weights=False)[0]), (lambda: builtin(x, x, x, need_weights=False)[0])


def _llama(t: int, path: str = "fused"):
    import torch
    from attnspec.backends.torch import attention_path, hf, layers
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    config = LlamaConfig(hidden_size=D, intermediate_size=F_LLAMA, num_attention_heads=H,
                         num_key_value_heads=H_KV, rms_norm_eps=1e-6, attention_bias=False,
                         attn_implementation="sdpa")
    builtin = LlamaDecoderLayer(config, layer_idx=0).eval()
    attributes, params = hf.llama_layer_from_hf(builtin)
    params = {k: v.detach() for k, v in params.items()}
    x = torch.randn(1, t, D)
    positions = torch.arange(t)[None]
    rope = LlamaRotaryEmbedding(config)(x, positions)

    def ours():
        with attention_path(path):
            return layers.llama_layer(x, params=params, **attributes)

    def theirs():
        out = builtin(x, attention_mask=None, position_ids=positions, position_embeddings=rope)
        return out[0] if isinstance(out, tuple) else out
    return ours, theirs


CASES = {"encoder layer": _encoder, "mha": _mha, "llama_layer": _llama,
         "llama_layer explicit": lambda t: _llama(t, "explicit")}
SMALL = {"encoder layer": lambda: _encoder(128, 8, 256, 8), "mha": lambda: _mha(128, 8, 256, 8)}


def _kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(case: str, side: int, t: int, threads: int) -> None:
    """One forward in this fresh process: print its peak memory above the inputs, MiB."""
    import gc

    import torch
    torch.set_num_threads(threads)
    fn = CASES[case](t)[side]
    with torch.no_grad():
        fn()  # one-time buffers (thread pools, kernel workspaces) are not the case's peak
        gc.collect()
        before = _kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak-RSS mark restarts from the current RSS
        fn()
        peak = _kib("VmHWM")
    print(json.dumps({"peak_mib": (peak - before) / 1024}))


def peak_mib(case: str, side: int, t: int, threads: int) -> float:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run([sys.executable, __file__, "--child", case, str(side), str(t),
                          "--threads", str(threads)],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["peak_mib"]


def timed(ours, theirs, rounds: int) -> tuple[float, float, float]:
    """(ours ms, built-in ms, median per-round ratio), the two timed in alternation."""
    import torch
    a, b = [], []
    with torch.no_grad():
        ours(), theirs()  # warm-up
        for _ in range(rounds):
            for fn, times in ((ours, a), (theirs, b)):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
    return (statistics.median(a) * 1e3, statistics.median(b) * 1e3,
            statistics.median(x / y for x, y in zip(a, b)))


def agree(ours, theirs) -> float:
    import torch
    with torch.no_grad():
        return (ours() - theirs()).abs().max().item()


def verdict(case: str, t: int | None, ratio: float, mem: float | None) -> str:
    base = case.replace(" explicit", "")
    if case.endswith("explicit"):
        return "(the default explicit path: weights written out, quadratic)"
    gaps = []
    if ratio > TARGETS[base]:
        gaps.append(f"time {ratio:.2f} > {TARGETS[base]}")
    if mem is not None and mem > MEMORY_TARGET and (t == 4096 or base == "llama_layer"):
        gaps.append(f"memory {mem:.2f} > {MEMORY_TARGET}")
    return "target met" if not gaps else "GAP: " + ", ".join(gaps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ts", default="256,1024,4096")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--plot", metavar="FILE", help="draw time and memory against T (.png/.svg)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], int(a.child[1]), int(a.child[2]), a.threads)
    import torch
    import transformers
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    load = os.getloadavg()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, CPU, "
          f"{torch.get_num_threads()} threads, float32, eval, no_grad; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'case':22} {'T':>5} {'ours ms':>9} {'built-in ms':>11} {'ratio':>6} "
          f"{'ours MiB':>9} {'built-in MiB':>12} {'mem ratio':>9}  verdict")
    for case, make in SMALL.items():
        ours, theirs = make()
        ms, ms_b, ratio = timed(ours, theirs, 2 * a.rounds)
        print(f"{case:22} {'B8T128':>5} {ms:9.2f} {ms_b:11.2f} {ratio:6.2f} {'':9} {'':12} "
              f"{'':9}  {verdict(case, None, ratio, None)} (D=256)")
    rows = []
    for t in (int(s) for s in a.ts.split(",")):
        for case, make in CASES.items():
            if case.endswith("explicit") and t > 256:
                continue
            ours, theirs = make(t)
            err = agree(ours, theirs)
            assert err < 1e-3, f"{case} at T={t} differs from the built-in by {err}"
            rounds = max(2, a.rounds if t <= 1024 else a.rounds // 2)
            ms, ms_b, ratio = timed(ours, theirs, rounds)
            del ours, theirs
            mem, mem_b = peak_mib(case, 0, t, a.threads), peak_mib(case, 1, t, a.threads)
            mr = mem / max(mem_b, 1e-9)
            print(f"{case:22} {t:5} {ms:9.2f} {ms_b:11.2f} {ratio:6.2f} {mem:9.1f} "
                  f"{mem_b:12.1f} {mr:9.2f}  {verdict(case, t, ratio, mr)}", flush=True)
            rows.append((case, t, ms, ms_b, mem, mem_b))
    print("ratio: median over rounds of ours / built-in timed in alternation; memory: peak RSS "
          "above the inputs of one forward, a fresh process per cell")
    if a.plot:
        plot(rows, a.plot, f"torch {torch.__version__}, float32, CPU, {a.threads} thread(s), "
                           f"B=1, D={D}, H={H}")
        print(f"plot: {a.plot}")


def plot(rows: list, path: str, title: str) -> None:
    """Time (ms) and peak memory (MiB) against T, log-log: a colour per case, solid for
    attnspec and dashed for the built-in."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    cases = sorted({r[0] for r in rows}, key=[r[0] for r in rows].index)
    for i, case in enumerate(cases):
        mine = [r for r in rows if r[0] == case]
        ts = [r[1] for r in mine]
        for ax, (ours, theirs), unit in ((axes[0], (2, 3), "ms"), (axes[1], (4, 5), "MiB")):
            ax.plot(ts, [r[ours] for r in mine], "-o", color=f"C{i}", label=f"{case} (attnspec)")
            ax.plot(ts, [r[theirs] for r in mine], "--s", color=f"C{i}", label=f"{case} (built-in)")
            ax.set(xscale="log", yscale="log", xlabel="T", ylabel=unit)
            ax.set_xticks(ts, [str(t) for t in ts], minor=False)
            ax.set_xticks([], minor=True)
    axes[0].set_title("time of one forward")
    axes[1].set_title("peak memory above the inputs")
    axes[1].legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    main()
