"""beam_search CPU seconds (docs/figures.md, issue 25 item 4): decoder_only, float32,
B = 2, K = 4 (R = 4), V = 512, max_len = 32, N = 2 layers, D = 64, H = 4, prompt length 4.

    OMP_NUM_THREADS=1 python benchmarks/beam_search_time.py numpy|torch [oldlp]

``oldlp`` times the cached search with the earlier (N, V, V) log-softmax. The "before"
figure ran this script with the tree of 0721163 first on PYTHONPATH. The ids are saved to
/tmp/beam_ids_<backend>.npy to compare runs.
"""

import sys
import time

import numpy as np

B, K, V, L, N, D, H, P = 2, 4, 512, 32, 2, 64, 4, 4


def params(rng):
    def w(*shape, scale=None):
        s = scale if scale is not None else 1 / np.sqrt(shape[0])
        return (rng.normal(size=shape) * s).astype(np.float32)

    def zeros(n):
        return np.zeros(n, np.float32)
    p = {"embed.table": w(V, D, scale=1.0), "pos.table": w(L, D, scale=0.5),
         "final_norm.gamma": np.ones(D, np.float32), "final_norm.beta": zeros(D),
         "lm_head.w": w(D, V, scale=0.5), "lm_head.b": zeros(V)}
    p["lm_head.b"][2] = -20.0  # EOS never likely: every row runs to max_len
    for i in range(N):
        for n in "qkvo":
            p[f"layers.{i}.self_attn.w_{n}"] = w(D, D)
            p[f"layers.{i}.self_attn.b_{n}"] = zeros(D)
        p[f"layers.{i}.ffn.w1"], p[f"layers.{i}.ffn.b1"] = w(D, 4 * D), zeros(4 * D)
        p[f"layers.{i}.ffn.w2"], p[f"layers.{i}.ffn.b2"] = w(4 * D, D), zeros(D)
        for j in (1, 2):
            p[f"layers.{i}.norm{j}.gamma"] = np.ones(D, np.float32)
            p[f"layers.{i}.norm{j}.beta"] = zeros(D)
    return p


def old_log_probs(self, logits):
    """The earlier form: -cross_entropy(logits, j) for every j through an (N, V, V) stack."""
    ops = self.ops
    n, v = logits.shape
    every = ops.stack([logits] * v, axis=1)
    targets = ops.arange(0, v, like=every)[None, :] + ops.full((n, 1), 0, like=every)
    return -self.k.cross_entropy(every, targets, reduction="none")


def main(backend: str, old: bool) -> None:
    rng = np.random.default_rng(0)
    p = params(rng)
    prompt = rng.integers(3, V, (B, P))
    prompt[:, 0] = 1
    a = dict(model="decoder_only", bos_id=1, eos_id=2, pad_id=0, max_len=L, num_beams=K,
             num_layers=N, num_heads=H, norm="pre", activation="gelu", num_return_sequences=K)
    if backend == "numpy":
        from attnspec.backends.numpy import decoding

        def conv(x):
            return x
    else:
        import torch
        from attnspec.backends.torch import decoding
        torch.set_num_threads(1)
        conv = torch.as_tensor
    if old:
        from attnspec.backends.composite.beam import BeamSearch
        BeamSearch._log_probs = old_log_probs
    pp = {k: conv(v) for k, v in p.items()}
    decoding.beam_search(conv(prompt), params=pp, **{**a, "max_len": P + 2})  # warm-up
    runs = []
    for _ in range(3):
        t = time.process_time()
        ids, _ = decoding.beam_search(conv(prompt), params=pp, **a)
        runs.append(time.process_time() - t)
    np.save(f"/tmp/beam_ids_{backend}.npy", np.asarray(ids))
    print(f"{decoding.__file__} {backend}: CPU s per beam_search, min {min(runs):.3f} "
          f"(runs {', '.join(f'{r:.3f}' for r in runs)})")


if __name__ == "__main__":
    main(sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "oldlp")
