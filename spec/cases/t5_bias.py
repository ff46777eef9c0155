"""t5_bias: T5's bucketed relative position bias (H, T, S), gathered from a learned
(num_buckets, H) table; log buckets, bidirectional (encoder) or causal (decoder)."""

from ..oracle.t5_bias import t5_bias as oracle
from ._build import Component, Fn, error, gradient, value

DEFAULTS = {"bidirectional": True, "num_buckets": 32, "max_distance": 128, "offset": 0}

COMPONENT = Component("t5_bias", {
    "t5_bias": Fn(module="positional", inputs=[], required=["t", "s"], attributes=DEFAULTS,
                  params=True, returns=["bias"], oracle=oracle),
})


def bias(rng, id, description, flags, *, heads=2, **attributes):
    n = attributes.get("num_buckets", DEFAULTS["num_buckets"])
    return value(f"t5_bias/{id}", "t5_bias", description, inputs={}, attributes=attributes,
                 params={"table": rng.weights((n, heads))}, flags=flags)


def cases(rng):
    yield bias(rng, "basic-001",
               "Bidirectional, N = 8 (4 per direction, E = 2 exact), M = 8, T = S = 6: |r| = 0, 1 "
               "exact; |r| = 2, 3 in bucket 2 (log(1.5)/log(4)*2 = 0.58 floors to 0: rounding "
               "gives 3); |r| >= 4 in bucket 3; keys after the query (r > 0) add 4.",
               ["basic", "direction", "clipping"],
               t=6, s=6, bidirectional=True, num_buckets=8, max_distance=8)
    yield bias(rng, "causal-001",
               "Causal (decoder self-attention), N = 8 (E = 4), M = 16, T = S = 8: every key after "
               "the query is bucket 0; n = 4 gives 4, n = 5 gives 4 (0.64 floored), n = 6, 7 give 5 "
               "(1.17, 1.61: rounding gives 6 for n = 7); a bidirectional split fails.",
               ["causal", "direction", "clipping"],
               t=8, s=8, bidirectional=False, num_buckets=8, max_distance=16, heads=3)
    yield value("t5_bias/defaults-001", "t5_bias",
                "Every attribute left out (bidirectional, N = 32, M = 128, offset 0), T = 3, S = 20: "
                "|r| up to 19 reaches the log buckets (8 -> 8, 11 -> 9, 16 -> 10 exactly: "
                "log(2)/log(16)*8 = 2); keys after the query add 16.",
                inputs={}, attributes={"t": 3, "s": 20}, params={"table": rng.weights((32, 2))},
                flags=["defaults", "boundary"], omit_defaults=True)
    yield bias(rng, "offset-001",
               "A decoding step: causal, T = 1 query at offset 7 over S = 8 keys (the cache and "
               "itself), N = 8, M = 16: the last row of causal-001's pattern, not its first.",
               ["offset", "decoder-step", "t-ne-s"],
               t=1, s=8, bidirectional=False, num_buckets=8, max_distance=16, offset=7)
    yield bias(rng, "clamp-001",
               "Bidirectional, N = 8, M = 3 (E = 2): n = 2 -> 2, n >= 3 -> log(n/2)/log(1.5)*2 >= 2, "
               "clamped at N/2 - 1 = 3 (not 4, which is the other direction's first bucket).",
               ["clipping", "edge"],
               t=7, s=7, bidirectional=True, num_buckets=8, max_distance=3)
    yield bias(rng, "boundary-001",
               "Bidirectional, N = 32, M = 128, T = 3 queries at offset 62, S = 4 keys: n = 59..64; "
               "n = 64 sits exactly on a boundary (log(8)/log(16)*8 = 6: bucket 14, a floor of a "
               "rounded-down float log gives 13); n = 63 -> 13.",
               ["boundary", "offset", "t-ne-s"],
               t=3, s=4, bidirectional=True, num_buckets=32, max_distance=128, offset=62)
    yield bias(rng, "odd-buckets-001",
               "Bidirectional, N = 11: 5 buckets per direction (E = 2, 3 log buckets), M = 10, "
               "T = 5, S = 7; table row 10 is never read (2 * floor(11 / 2) = 10 buckets used).",
               ["edge", "t-ne-s"],
               t=5, s=7, bidirectional=True, num_buckets=11, max_distance=10, heads=1)
    yield bias(rng, "empty-001", "T = 0 queries: an empty (2, 0, 4) bias.", ["edge"],
               t=0, s=4, bidirectional=True, num_buckets=8, max_distance=8)
    yield from errors(rng)


def errors(rng):
    def err(id, description, error_class, mentions, table=(8, 2), **attributes):
        return error(f"t5_bias/{id}", "t5_bias", description, inputs={},
                     attributes={"t": 3, "s": 3, **attributes},
                     params={"table": rng.weights(table)}, error=error_class, mentions=mentions)

    yield err("table-shape-001", "A (6, 2) table for num_buckets = 8.", "ParameterError",
              ["table", "(6, 2)"], table=(6, 2), num_buckets=8, max_distance=8)
    yield err("few-buckets-001", "Bidirectional num_buckets = 3: one bucket per direction, "
              "no exact bucket (E = 0, log(n / 0)).", "ConfigError", ["num_buckets"],
              table=(3, 2), num_buckets=3, max_distance=8)
    yield err("max-distance-001", "max_distance = 2 with E = 2 exact buckets (N = 8, "
              "bidirectional): log(M / E) = 0.", "ConfigError", ["max_distance"],
              num_buckets=8, max_distance=2)
    yield err("negative-offset-001", "offset = -1.", "ConfigError", ["offset"],
              num_buckets=8, max_distance=8, offset=-1)
    yield err("bidirectional-001", "bidirectional = 1, not a bool.", "ConfigError",
              ["bidirectional"], num_buckets=8, max_distance=8, bidirectional=1)


def grad_cases(r):
    def grad(id, description, flags, t, s, n, heads=2, omit=False, **attributes):
        attrs = {"t": t, "s": s, **({} if omit else {"num_buckets": n}), **attributes}
        return gradient(f"t5_bias/{id}", "t5_bias", description, inputs={}, attributes=attrs,
                        params={"table": r.weights((n, heads))},
                        cotangents={"bias": r.uniform((heads, t, s))}, flags=flags,
                        omit_defaults=omit)

    yield grad("grad-001", "Bidirectional, N = 8, M = 8, T = S = 5: dtable[b, h] sums dbias over "
               "every (i, j) in bucket b (overwriting keeps one term); unread buckets get 0.",
               ["gradient", "accumulation"], 5, 5, 8, max_distance=8)
    yield grad("grad-002", "Causal, N = 8, M = 16, T = S = 6: the 15 pairs with a key after the "
               "query all land in bucket 0.", ["gradient", "causal", "accumulation"], 6, 6, 8,
               bidirectional=False, max_distance=16)
    yield grad("grad-003", "Causal decoding rows: T = 2 at offset 4, S = 6, N = 8, M = 16.",
               ["gradient", "offset"], 2, 6, 8, bidirectional=False, max_distance=16, offset=4)
    yield grad("grad-004", "Defaults (bidirectional, N = 32, M = 128, offset 0) left out, "
               "T = 2, S = 12: the log buckets 8 and 9 collect several pairs.",
               ["gradient", "defaults"], 2, 12, 32, omit=True)
