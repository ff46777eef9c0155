"""attnspec's Keras layers against Keras' built-ins, same weights, same run, inside
tf.function, float32: MHA (B=8, T=128, D=256, H=8) and a post-norm encoder layer.

    python benchmarks/bench_tensorflow.py [--device cpu|gpu] [--repeat 30]

Prints the median time of each and the ratio attnspec / Keras (target <= 1.15).

    python benchmarks/bench_tensorflow.py --accuracy [--mode eager|graph|xla]
                                          [--json-in verify.json]

runs ``attnspec verify --backend tensorflow -k test_golden --json ...`` (or reads a
``--json`` file it wrote) and prints, per component, the max ULP error in float64 and
the max relative error in float32, where a vector's relative error is its
``max_abs_err`` (over its outputs) divided by the largest finite |expected| value of
those outputs (1 if all are zero), and a component's is the max over its vectors.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf
from attnspec.backends.tensorflow import convert, keras_layers

B, T, D, H, F = 8, 128, 256, 8, 1024


def timeit(fn, x, repeat):
    fn(x).numpy()  # trace and warm up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(x).numpy()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


class KerasEncoder(keras.layers.Layer):
    """A post-norm encoder layer from Keras parts, loaded from spec parameters."""

    def __init__(self, p):
        super().__init__(dtype="float32")
        sub = lambda s: {k[len(s) + 1:]: v for k, v in p.items() if k.startswith(s + ".")}  # noqa: E731
        self.mha = convert.mha_to_keras(sub("self_attn"), num_heads=H, dtype="float32")
        self.n1 = convert.layer_norm_to_keras(sub("norm1"), eps=1e-5, dtype="float32")
        self.n2 = convert.layer_norm_to_keras(sub("norm2"), eps=1e-5, dtype="float32")
        self.d1 = keras.layers.Dense(F, activation="relu", dtype="float32")
        self.d2 = keras.layers.Dense(D, dtype="float32")
        self.d1.build((None, D))
        self.d2.build((None, F))
        self.d1.kernel.assign(p["ffn.w1"])
        self.d1.bias.assign(p["ffn.b1"])
        self.d2.kernel.assign(p["ffn.w2"])
        self.d2.bias.assign(p["ffn.b2"])

    def call(self, x):
        r1 = self.n1(x + self.mha(x, x, x))
        return self.n2(r1 + self.d2(self.d1(r1)))


def accuracy(args) -> int:
    import subprocess
    import sys
    import tempfile

    from attnspec.conformance import results
    from attnspec.spec.vectors import default_spec

    path = args.json_in
    if path is None:
        path = tempfile.mkstemp(suffix=".json", prefix="attnspec-acc-")[1]
        cmd = [sys.executable, "-m", "attnspec.conformance.cli", "verify", "--backend",
               "tensorflow", "--device", args.device, "--backend-option", f"mode={args.mode}",
               "-k", "test_golden", "--json", path]
        subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
    doc = results.load(path)
    per = results.tally(doc["results"], scales=results.scales_of(default_spec()))
    print(f"tensorflow mode={doc['options'].get('mode', 'eager')} device={doc['device']} "
          f"(golden vectors; {len(doc['results'])} results)")
    print(f"{'component':22s} {'f64 pass':>9s} {'max ULP f64':>12s} {'f32 pass':>9s} "
          f"{'max rel f32':>12s}")
    empty = results.Tally()
    for comp in sorted({c for c, _ in per}):
        t64, t32 = per.get((comp, "float64"), empty), per.get((comp, "float32"), empty)
        print(f"{comp:22s} {t64['pass']:4d}/{t64.n:<4d} {results.fmt(t64.max_ulp):>12s} "
              f"{t32['pass']:4d}/{t32.n:<4d} {results.fmt(t32.max_rel):>12s}")
    bad = [r["id"] + f"[{r['dtype']}]" for r in doc["results"] if r["status"] != "pass"]
    if bad:
        print(f"not passing ({len(bad)}): {', '.join(bad[:20])}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--accuracy", action="store_true",
                    help="per-component max ULP (float64) and max relative error (float32)")
    ap.add_argument("--mode", default="eager", choices=("eager", "graph", "xla"))
    ap.add_argument("--json-in", default=None, help="read this verify --json file instead")
    args = ap.parse_args(argv)
    if args.accuracy:
        return accuracy(args)
    rng = np.random.default_rng(0)
    with tf.device(f"/{args.device.upper()}:0"):
        x = tf.constant(rng.normal(size=(B, T, D)).astype(np.float32))
        ours = keras_layers.MultiHeadAttention(D, H, dtype="float32")
        p = {k: (rng.normal(size=v.shape) / np.sqrt(v.shape[0])).astype(np.float32)
             for k, v in ours.spec_params().items()}
        ours.load_spec(p)
        theirs = convert.mha_to_keras(p, num_heads=H, dtype="float32")
        f_ours = tf.function(ours.__call__)
        f_theirs = tf.function(lambda x: theirs(x, x, x))
        err = float(tf.reduce_max(tf.abs(f_ours(x) - f_theirs(x))))
        t_ours, t_theirs = timeit(f_ours, x, args.repeat), timeit(f_theirs, x, args.repeat)
        print(f"device={args.device} float32 B={B} T={T} D={D} H={H} tf {tf.__version__} "
              f"keras {keras.__version__}")
        print(f"mha            attnspec {t_ours * 1e3:8.3f} ms  keras {t_theirs * 1e3:8.3f} ms  "
              f"ratio {t_ours / t_theirs:.3f}  max|diff| {err:.2e}")

        enc = keras_layers.EncoderLayer(D, H, F, dtype="float32")
        pe = {k: (rng.normal(size=v.shape) / np.sqrt(v.shape[0])).astype(np.float32)
              if v.ndim == 2 else np.zeros(v.shape, np.float32) + (k.endswith("gamma"))
              for k, v in enc.spec_params().items()}
        enc.load_spec(pe)
        kenc = KerasEncoder(pe)
        f_ours, f_theirs = tf.function(enc.__call__), tf.function(kenc.__call__)
        err = float(tf.reduce_max(tf.abs(f_ours(x) - f_theirs(x))))
        t_ours, t_theirs = timeit(f_ours, x, args.repeat), timeit(f_theirs, x, args.repeat)
        print(f"encoder_layer  attnspec {t_ours * 1e3:8.3f} ms  keras {t_theirs * 1e3:8.3f} ms  "
              f"ratio {t_ours / t_theirs:.3f}  max|diff| {err:.2e}")


if __name__ == "__main__":
    main()
