"""The stress family: vectors at the sizes attention kernels tile on and at the magnitudes
where they break (issue 21). Each case is data: inputs as recipes (recipes.py), attributes,
cotangents; build.py computes the expected values with the fast exact oracle.

Ids are ``<component>/stress-<case>-NNN``; every vector carries the flag "stress".
"""

from __future__ import annotations

ALL = ["float64", "float32", "float16", "bfloat16"]
WIDE = ["float64", "float32"]
WIDE_NOTE = ("scores (or values) near 1e5 are not exact in float16 and lose every weight in "
             "bfloat16's 8 bits; the bug it targets shows at float32")


def u(shape, lo=-2.0, hi=2.0, step=2.0 ** -6, **extra) -> dict:
    return {"op": "uniform", "shape": list(shape), "lo": lo, "hi": hi, "step": step, **extra}


def mask(t, s, **kw) -> dict:
    return {"op": "mask", "t": t, "s": s, **kw}


def case(vid, function, description, *, inputs, attributes=None, params=None, cotangents=None,
         flags=(), dtypes=ALL, dtype_note=None) -> dict:
    c = {"id": vid, "function": function, "description": description,
         "flags": ["stress", *flags], "dtypes": list(dtypes),
         "expect": "gradient" if cotangents else "value", "attributes": dict(attributes or {}),
         "inputs": _streams(vid, inputs), "params": _streams(vid, params or {})}
    if dtype_note:
        c["dtype_note"] = dtype_note
    if cotangents:
        c["cotangents"] = _streams(vid, cotangents, "cot.")
    return c


def _streams(vid, recipes, prefix=""):
    """Give every uniform draw its own stream named after the vector and the input."""
    out = {}
    for name, r in recipes.items():
        r = dict(r)
        if r["op"] in ("uniform", "integers", "bools"):
            r.setdefault("stream", f"{vid}/{prefix}{name}")
        if "pow2" in r:
            r["pow2"] = {**r["pow2"], "stream": f"{vid}/{prefix}{name}/pow2"}
        r["set"] = [dict(e, uniform={**e["uniform"], "stream": f"{vid}/{prefix}{name}/set{i}"})
                    if "uniform" in e else e for i, e in enumerate(r.get("set", ()))]
        if not r["set"]:
            del r["set"]
        out[name] = r
    return out


def qkv(b, h, t, s, k, v, h_kv=None, lo=-2.0, hi=2.0, step=2.0 ** -6) -> dict:
    h_kv = h if h_kv is None else h_kv
    return {"q": u((b, h, t, k), lo, hi, step), "k": u((b, h_kv, s, k), lo, hi, step),
            "v": u((b, h_kv, s, v))}


def _far_below(b, h, t, s, k, v, causal=True, jitter=False):
    """q[..., 0] = 1024, k[..., 0] = -1024, the rest in [-1, 1] step 1/2, K = 64 (scale 1/8):
    every score is -131072 + (at most +-8), exact in float32. ``jitter``: k[..., 0] in
    -1024 + [-1/32, 1/32] (else dq[..., 0] is exactly 0, a sum of cancelling terms)."""
    x = qkv(b, h, t, s, k, v, lo=-1.0, hi=1.0, step=0.5)
    x["q"]["set"] = [{"index": [None, None, None, 0], "value": 1024.0}]
    x["k"]["set"] = [{"index": [None, None, None, 0], "value": -1024.0}]
    if jitter:
        x["k"]["set"] = [{"index": [None, None, None, 0],
                          "uniform": {"lo": -1024.0 - 2.0 ** -5, "hi": -1024.0 + 2.0 ** -5,
                                      "step": 2.0 ** -8}}]
    if causal:
        x["mask"] = mask(t, s, causal=True)
    return x


def sdpa_cases():
    yield case("sdpa/stress-tile-001", "sdpa",
               "T = 63 queries, S = 65 keys, head width K = V = 59 (B = 1, H = 2): one short of "
               "and one past a 64-wide tile, an odd width a kernel pads.",
               inputs=qkv(1, 2, 63, 65, 59, 59), flags=["tile-boundary", "odd-width", "t-ne-s"])
    yield case("sdpa/stress-tile-002", "sdpa",
               "T = 65 > S = 63, K = 111, V = 80, causal bottom-right: queries 0 and 1 see no key "
               "(zero rows), query i sees keys j <= i - 2.",
               inputs={**qkv(1, 1, 65, 63, 111, 80), "mask": mask(65, 63, causal=True)},
               flags=["tile-boundary", "causal", "t-ne-s", "k-ne-v", "fully-masked", "alignment"])
    yield case("sdpa/stress-tile-003", "sdpa",
               "T = 127, S = 129, K = 80, V = 96, causal bottom-right (query i sees j <= i + 2), "
               "H = 2: the diagonal crosses a 128-tile edge off its corner.",
               inputs={**qkv(1, 2, 127, 129, 80, 96), "mask": mask(127, 129, causal=True)},
               flags=["tile-boundary", "causal", "t-ne-s", "k-ne-v", "alignment"])
    yield case("sdpa/stress-tile-004", "sdpa",
               "T = S = 128, K = V = 128, causal: exactly two 64-tiles or one 128-tile.",
               inputs={**qkv(1, 1, 128, 128, 128, 128), "mask": mask(128, 128, causal=True)},
               flags=["tile-boundary", "causal"])
    yield case("sdpa/stress-tile-005", "sdpa",
               "T = 129, S = 255, K = 192, V = 256, sliding window of 64 keys (bottom-right): "
               "most key tiles are fully masked for a query tile.",
               inputs={**qkv(1, 1, 129, 255, 192, 256), "mask": mask(129, 255, window=64)},
               flags=["tile-boundary", "sliding-window", "t-ne-s", "k-ne-v"])
    yield case("sdpa/stress-local-001", "sdpa",
               "T = 97, S = 1025, K = 128, V = 64, local window left = 64, right = 32 "
               "(masks.local_window_mask, bottom-right: query i at p = i + 928 sees p - 64 .. "
               "p + 32, clipped at 1024): keys ahead of the query, a band across 64-tile edges.",
               inputs={**qkv(1, 1, 97, 1025, 128, 64),
                       "mask": mask(97, 1025, left=64, right=32)},
               flags=["tile-boundary", "sliding-window", "t-ne-s", "alignment", "long"])
    yield case("sdpa/stress-chunked-001", "sdpa",
               "T = S = 257, K = V = 64, chunked causal attention in chunks of 128 "
               "(masks.chunked_mask, Llama 4's local layers): query 128 sees only itself, "
               "query 256 only itself, in a chunk of one.",
               inputs={**qkv(1, 1, 257, 257, 64, 64),
                       "mask": mask(257, 257, causal=True, chunk=128)},
               flags=["tile-boundary", "causal", "boundary"])
    yield case("sdpa/stress-long-001", "sdpa",
               "T = 97 queries against S = 1025 keys, K = 128, V = 64, causal bottom-right "
               "(query i sees keys j <= i + 928): the last key tile holds one key.",
               inputs={**qkv(1, 1, 97, 1025, 128, 64), "mask": mask(97, 1025, causal=True)},
               flags=["tile-boundary", "causal", "t-ne-s", "long", "alignment"])
    yield case("sdpa/stress-long-002", "sdpa",
               "One decoding step (T = 1) over S = 2049 keys, multi-query: H = 4 query heads on "
               "one kv head, K = V = 64.",
               inputs=qkv(1, 4, 1, 2049, 64, 64, h_kv=1), attributes={"num_kv_heads": 1},
               flags=["tile-boundary", "decoding", "mqa", "long", "t-ne-s"])
    yield case("sdpa/stress-long-003", "sdpa",
               "T = 1025 queries over S = 63 keys, causal bottom-right: the first 962 query rows "
               "see no key (zero rows), K = V = 64.",
               inputs={**qkv(1, 1, 1025, 63, 64, 64), "mask": mask(1025, 63, causal=True)},
               flags=["tile-boundary", "causal", "fully-masked", "t-ne-s", "long"])
    yield case("sdpa/stress-long-004", "sdpa",
               "T = 1023 queries over S = 127 keys, K = 64, V = 80, no mask: the last query tile "
               "of a 128-row tiling holds 127 rows (1023 = 7 x 128 + 127) and the one key tile is "
               "partial.",
               inputs=qkv(1, 1, 1023, 127, 64, 80),
               flags=["tile-boundary", "t-ne-s", "long"])
    yield case("sdpa/stress-long-005", "sdpa",
               "T = 65 queries over S = 1023 keys, causal bottom-right (query i sees keys "
               "j <= i + 958), K = V = 64: the last key tile holds 127 of 128 keys and the "
               "diagonal crosses it.",
               inputs={**qkv(1, 1, 65, 1023, 64, 64), "mask": mask(65, 1023, causal=True)},
               flags=["tile-boundary", "causal", "t-ne-s", "long"])
    yield case("sdpa/stress-gqa-001", "sdpa",
               "GQA: H = 4 query heads over H_kv = 2, T = 64, S = 257, K = V = 128, sliding window "
               "of 32 keys (bottom-right).",
               inputs={**qkv(1, 4, 64, 257, 128, 128, h_kv=2), "mask": mask(64, 257, window=32)},
               attributes={"num_kv_heads": 2},
               flags=["tile-boundary", "gqa", "sliding-window", "head-grouping", "t-ne-s"])
    yield case("sdpa/stress-softcap-001", "sdpa",
               "softcap = 50 with q, k in [-4, 4] (K = V = 96, T = 65, S = 255, H = 2), causal "
               "bottom-right: scaled scores up to about 100 are capped.",
               inputs={**qkv(1, 2, 65, 255, 96, 96, lo=-4.0, hi=4.0, step=2.0 ** -4),
                       "mask": mask(65, 255, causal=True)},
               attributes={"softcap": 50.0}, flags=["softcap", "saturation", "tile-boundary", "causal"])
    yield case("sdpa/stress-far-below-001", "sdpa",
               "Every kept score is -131072 + (at most +-8) (q[..., 0] = 1024, k[..., 0] = -1024, "
               "K = 64, scale 1/8), causal T = 65, S = 129, H = 2: a row maximum started at a "
               "finite sentinel (-1e4, -65504) underflows every weight to 0 (0 or NaN rows).",
               inputs=_far_below(1, 2, 65, 129, 64, 64), dtypes=WIDE, dtype_note=WIDE_NOTE,
               flags=["finite-sentinel", "underflow", "stability", "causal", "tile-boundary"])
    x = _far_below(2, 1, 64, 129, 64, 64, causal=False)
    x["mask"] = mask(64, 129, causal=True, left_pad=[17, 33])
    x["k"]["set"] += [{"index": [0, None, [0, 17], 0], "value": 1024.0},
                      {"index": [1, None, [0, 33], 0], "value": 1024.0}]
    yield case("sdpa/stress-mask-above-001", "sdpa",
               "Left-padded batch (17 and 33 padded keys), causal, every kept score about "
               "-131072 and every padded key scoring +131072: a finite mask fill (-1e4, -1e9 "
               "added or put in) lets a masked key win.",
               inputs=x, dtypes=WIDE, dtype_note=WIDE_NOTE,
               flags=["finite-mask-fill", "left-padding", "mask", "padding", "causal"])
    x = qkv(3, 2, 129, 129, 64, 64)
    x["mask"] = mask(129, 129, causal=True, left_pad=[0, 64, 129])
    x["k"]["set"] = [{"index": [1, None, [0, 64], None], "value": "nan"},
                     {"index": [2, None, None, [0, 8]], "value": "inf"}]
    x["v"]["set"] = [{"index": [1, None, [0, 32], None], "value": "nan"},
                     {"index": [1, None, [32, 64], None], "value": "-inf"},
                     {"index": [2, None, None, None], "value": "inf"}]
    x["q"]["set"] = [{"index": [1, None, [0, 64], None], "value": "nan"}]
    x["bias"] = {**u((3, 1, 129, 129), -1.0, 1.0), "fill_masked": {"mask": "mask", "value": "-inf"}}
    yield case("sdpa/stress-nonfinite-001", "sdpa",
               "Left-padded batch of 3 (0, 64 and all 129 keys padded), causal T = S = 129: NaN "
               "and +-inf in the padded keys, values and fully masked query rows, -inf bias at "
               "every masked position; batch 2 is fully masked (zero output). Every output is "
               "finite.",
               inputs=x, flags=["masked-nan", "non-finite", "left-padding", "fully-masked", "bias"])
    x = qkv(1, 2, 64, 255, 64, 64, lo=-1.0, hi=1.0, step=0.5)
    x["q"]["set"] = [{"index": [None, None, None, 0], "value": 256.0}]
    x["k"]["set"] = [{"index": [None, None, None, 0], "uniform": {"lo": -320.0, "hi": 320.0, "step": 1.0}}]
    yield case("sdpa/stress-scores-1e4-001", "sdpa",
               "Scores near +-1e4 (q[..., 0] = 256, k[..., 0] in [-320, 320], K = 64): exp "
               "overflows unless the row maximum is subtracted; T = 64, S = 255.",
               inputs=x, dtypes=WIDE, dtype_note=WIDE_NOTE, flags=["overflow", "stability", "large-logits"])
    x = {"q": u((1, 2, 64, 64), 8.0, 10.0, 1.0, mul=8.0),
         "k": u((1, 2, 129, 1), -80.0, 80.0, 1.0, tile_last=64),
         "v": u((1, 2, 129, 64))}
    yield case("sdpa/stress-fp16-overflow-001", "sdpa",
               "q in {64, 72, 80}, each key a constant row in [-80, 80], K = 64: q k^T reaches "
               "409600 (float16 overflows past 65504) while the scaled scores stay below 51200; "
               "a kernel that scales after a float16 product gets inf - inf = NaN.",
               inputs=x, flags=["fp16-overflow", "overflow", "ties"])
    x = qkv(1, 2, 64, 129, 64, 64, lo=-1.0, hi=1.0, step=2.0 ** -7)
    x["q"]["pow2"] = {"lo": -6, "hi": 1}
    x["k"]["pow2"] = {"lo": -6, "hi": 1}
    x["v"] = {**u((1, 2, 129, 64), -1.0, 1.0, 2.0 ** -7), "pow2": {"lo": -20, "hi": 20}}
    yield case("sdpa/stress-bf16-spread-001", "sdpa",
               "bfloat16-exact inputs across many binades: v = m * 2**e with e in [-20, 20], q and "
               "k with e in [-6, 1] (T = 64, S = 129).",
               inputs=x, dtypes=["float64", "float32", "bfloat16"],
               dtype_note="values up to 2**20 and down to 2**-27 are outside float16's range",
               flags=["exponent-spread", "precision"])

    yield case("sdpa/stress-grad-001", "sdpa",
               "dq, dk, dv at T = 65, S = 129, K = 111, V = 80, causal bottom-right, H = 2.",
               inputs={**qkv(1, 2, 65, 129, 111, 80), "mask": mask(65, 129, causal=True)},
               cotangents={"output": u((1, 2, 65, 80))},
               flags=["gradient", "tile-boundary", "causal", "k-ne-v", "t-ne-s"])
    yield case("sdpa/stress-grad-002", "sdpa",
               "Gradients with GQA (H = 4 over H_kv = 2), softcap = 30, a 48-key window, T = 33, "
               "S = 65, K = V = 64: dk and dv sum over the query heads of a group.",
               inputs={**qkv(1, 4, 33, 65, 64, 64, h_kv=2, lo=-4.0, hi=4.0, step=2.0 ** -4),
                       "mask": mask(33, 65, window=48)},
               attributes={"num_kv_heads": 2, "softcap": 30.0},
               cotangents={"output": u((1, 4, 33, 64))},
               flags=["gradient", "gqa", "softcap", "sliding-window", "tile-boundary"])
    yield case("sdpa/stress-grad-003", "sdpa",
               "Gradients with every kept score about -131072 (causal T = 64, S = 65): a finite "
               "sentinel gives NaN or zero gradients.",
               inputs=_far_below(1, 1, 64, 65, 64, 64, jitter=True), cotangents={"output": u((1, 1, 64, 64))},
               dtypes=WIDE, dtype_note=WIDE_NOTE, flags=["gradient", "finite-sentinel", "causal"])
    yield case("sdpa/stress-grad-004", "sdpa",
               "Gradients at T = 17 queries over S = 1025 keys (K = 128, V = 64), causal "
               "bottom-right, cotangents on the output and the weights.",
               inputs={**qkv(1, 1, 17, 1025, 128, 64), "mask": mask(17, 1025, causal=True)},
               cotangents={"output": u((1, 1, 17, 64)), "weights": u((1, 1, 17, 1025))},
               flags=["gradient", "long", "causal", "t-ne-s", "weights-cotangent"])


def softmax_cases():
    yield case("softmax/stress-long-001", "softmax",
               "Rows of 2049 logits in [-8, 8] with a random mask (70% kept) and one fully "
               "masked row.",
               inputs={"x": u((4, 2049), -8.0, 8.0, 2.0 ** -4),
                       "mask": {"op": "bools", "shape": [4, 2049], "p_true": 0.7,
                                "set": [{"index": [2, None], "value": False}]}},
               flags=["long", "mask", "fully-masked", "tile-boundary"])
    yield case("softmax/stress-far-below-001", "softmax",
               "Every kept logit is -131072 + [-8, 8] and every masked one +131072 (rows of "
               "1025): a finite sentinel maximum or a finite mask fill fails.",
               inputs={"x": {**u((8, 1025), -8.0, 8.0, 2.0 ** -4, add=-131072.0),
                             "fill_masked": {"mask": "mask", "value": 131072.0}},
                       "mask": {"op": "bools", "shape": [8, 1025], "p_true": 0.6}},
               dtypes=WIDE, dtype_note=WIDE_NOTE, flags=["finite-sentinel", "finite-mask-fill", "mask"])
    yield case("softmax/stress-nonfinite-001", "softmax",
               "NaN at every masked position of rows of 1025 (60% kept): the output is finite.",
               inputs={"x": {**u((4, 1025), -8.0, 8.0, 2.0 ** -4),
                             "fill_masked": {"mask": "mask", "value": "nan"}},
                       "mask": {"op": "bools", "shape": [4, 1025], "p_true": 0.6}},
               flags=["masked-nan", "non-finite", "mask"])
    yield case("softmax/stress-grad-001", "softmax",
               "dx for rows of 1025 kept logits about -131072 (masked ones +131072).",
               inputs={"x": {**u((4, 1025), -8.0, 8.0, 2.0 ** -4, add=-131072.0),
                             "fill_masked": {"mask": "mask", "value": 131072.0}},
                       "mask": {"op": "bools", "shape": [4, 1025], "p_true": 0.6}},
               cotangents={"y": u((4, 1025))}, dtypes=WIDE, dtype_note=WIDE_NOTE,
               flags=["gradient", "finite-sentinel", "mask"])
    yield case("softmax/stress-grad-002", "softmax",
               "dx for (2, 3, 2049) logits in [-8, 8].",
               inputs={"x": u((2, 3, 2049), -8.0, 8.0, 2.0 ** -4)}, cotangents={"y": u((2, 3, 2049))},
               flags=["gradient", "long"])


def masks_cases():
    yield case("masks/stress-causal-001", "causal_mask",
               "Causal T = 97, S = 1025, bottom-right: query i sees keys j <= i + 928.",
               inputs={}, attributes={"t": 97, "s": 1025}, flags=["causal", "t-ne-s", "alignment"])
    yield case("masks/stress-causal-002", "causal_mask",
               "Causal T = 1025 > S = 63: the first 962 rows are empty.",
               inputs={}, attributes={"t": 1025, "s": 63}, flags=["causal", "t-ne-s", "fully-masked"])
    yield case("masks/stress-window-001", "sliding_window_mask",
               "Sliding window of 128 keys, T = 129, S = 1025 (bottom-right).",
               inputs={}, attributes={"t": 129, "s": 1025, "window": 128},
               flags=["sliding-window", "t-ne-s", "tile-boundary"])
    yield case("masks/stress-local-001", "local_window_mask",
               "Local window left = 64, right = 32, T = 97, S = 1025 (bottom-right: query i at "
               "p = i + 928 sees keys p - 64 .. min(p + 32, 1024)).",
               inputs={}, attributes={"t": 97, "s": 1025, "left": 64, "right": 32},
               flags=["sliding-window", "t-ne-s", "tile-boundary", "alignment"])
    yield case("masks/stress-chunked-001", "chunked_mask",
               "Chunks of 128, causal, T = S = 257: chunks 0..127, 128..255 and the lone 256.",
               inputs={}, attributes={"t": 257, "s": 257, "chunk": 128, "causal": True},
               flags=["causal", "tile-boundary", "boundary"])


def norm_cases():
    big_mean = {"x": u((16, 1025), -1.0, 1.0, 2.0 ** -6, add=1024.0)}
    yield case("layer_norm/stress-large-mean-001", "layer_norm",
               "Rows of D = 1025 values 1024 + [-1, 1]: E[x^2] - E[x]^2 in float32 cancels to "
               "noise; the two-pass variance does not.",
               inputs=big_mean, params={"gamma": u((1025,), 0.5, 1.5, 2.0 ** -7),
                                        "beta": u((1025,), -1.0, 1.0, 2.0 ** -7)},
               dtypes=WIDE, dtype_note="1024 + k/64 needs 17 significant bits",
               flags=["large-mean", "cancellation", "tile-boundary"])
    yield case("layer_norm/stress-wide-001", "layer_norm",
               "Rows of D = 4097 (a tile past 4096).",
               inputs={"x": u((8, 4097))}, params={"gamma": u((4097,), 0.5, 1.5, 2.0 ** -7),
                                                   "beta": u((4097,), -1.0, 1.0, 2.0 ** -7)},
               flags=["tile-boundary", "long"])
    yield case("layer_norm/stress-grad-001", "layer_norm",
               "dx, dgamma, dbeta at D = 1025, 16 rows.",
               inputs={"x": u((16, 1025))}, params={"gamma": u((1025,), 0.5, 1.5, 2.0 ** -7),
                                                    "beta": u((1025,), -1.0, 1.0, 2.0 ** -7)},
               cotangents={"y": u((16, 1025))}, flags=["gradient", "tile-boundary"])
    yield case("rms_norm/stress-spread-001", "rms_norm",
               "Rows of D = 4097 with magnitudes 2**-8 to 2**8 (bfloat16-exact).",
               inputs={"x": {**u((8, 4097), -1.0, 1.0, 2.0 ** -7), "pow2": {"lo": -8, "hi": 8}}},
               params={"gamma": u((4097,), 0.5, 1.5, 2.0 ** -7)},
               dtypes=["float64", "float32", "bfloat16"],
               dtype_note="magnitudes down to 2**-15 and squares up to 2**16 leave float16's range",
               flags=["exponent-spread", "tile-boundary"])
    yield case("rms_norm/stress-grad-001", "rms_norm",
               "dx and dgamma at D = 1025, 16 rows.",
               inputs={"x": u((16, 1025))}, params={"gamma": u((1025,), 0.5, 1.5, 2.0 ** -7)},
               cotangents={"y": u((16, 1025))}, flags=["gradient", "tile-boundary"])


def loss_cases():
    tgt = {"op": "integers", "shape": [32], "lo": 0, "hi": 8191,
           "set": [{"index": [[5, 8]], "value": -100}]}
    yield case("cross_entropy/stress-vocab-001", "cross_entropy",
               "32 rows of 8191 logits in [-16, 16] (exp(16) overflows float16), 3 ignored rows.",
               inputs={"logits": u((32, 8191), -16.0, 16.0, 2.0 ** -4), "targets": tgt},
               flags=["long", "overflow", "ignore-index"])
    yield case("cross_entropy/stress-large-001", "cross_entropy",
               "Logits multiples of 64 in [-10240, 10240] (vocabulary 1025): log-sum-exp without "
               "the maximum overflows in every dtype.",
               inputs={"logits": u((16, 1025), -160.0, 160.0, 1.0, mul=64.0),
                       "targets": {"op": "integers", "shape": [16], "lo": 0, "hi": 1025}},
               dtypes=["float64", "float32", "bfloat16"],
               dtype_note="the sum of 16 losses of up to 20480 passes float16's 65504 before the mean",
               flags=["overflow", "large-logits", "stability"])
    yield case("cross_entropy/stress-grad-001", "cross_entropy",
               "dlogits for 16 rows of 8191 logits in [-16, 16], 2 ignored rows, dloss = 1.5.",
               inputs={"logits": u((16, 8191), -16.0, 16.0, 2.0 ** -4),
                       "targets": {**tgt, "shape": [16], "set": [{"index": [[3, 5]], "value": -100}]}},
               cotangents={"loss": {"op": "full", "shape": [], "value": 1.5}},
               flags=["gradient", "long", "ignore-index"])


def rope_cases():
    yield case("rope/stress-far-position-001", "rope",
               "Positions 65530..65545 cross 2**16 (offset 65530), K = 64, interleaved: a "
               "float16 position or a 65536-entry cos/sin table fails.",
               inputs={"x": u((1, 2, 16, 64))}, attributes={"offset": 65530},
               flags=["far-position", "offset", "interleaved"])
    yield case("rope/stress-far-position-002", "rope",
               "Positions 1048570..1048577 (past 2**20), K = 128, half convention: p theta_0 "
               "needs more than float32's 24 bits of the position.",
               inputs={"x": u((1, 8, 128))}, attributes={"offset": 1048570, "convention": "half"},
               flags=["far-position", "offset", "half"])
    yield case("rope/stress-grad-001", "rope",
               "dx = R^T dy at positions 65530..65545 (crossing 2**16), K = 64, interleaved: "
               "rotating dy forward, or by a float16 position, fails.",
               inputs={"x": u((1, 2, 16, 64))}, attributes={"offset": 65530},
               cotangents={"y": u((1, 2, 16, 64))},
               flags=["gradient", "far-position", "offset", "interleaved"])


def _w(rows, cols, fan_in):
    """A projection weight (rows, cols) in [-a, a], a = 3/sqrt(fan_in) on a 2**-7 grid (so a
    projected value is about unit size), bfloat16-exact."""
    a = int(128 * 3 / fan_in ** 0.5) / 128
    return u((rows, cols), -a, a, 2.0 ** -7)


def mha_params(d_q, d_k, d_v, h, k, v, d_o, h_kv=None, bias=True) -> dict:
    """The recipes of w_q (Dq, H*K), w_k (Dk, H_kv*K), w_v (Dv, H_kv*V), w_o (H*V, Do) and the
    biases (spec/cases/mha.py's mha_params, as recipes)."""
    h_kv = h if h_kv is None else h_kv
    p = {"w_q": _w(d_q, h * k, d_q), "w_k": _w(d_k, h_kv * k, d_k), "w_v": _w(d_v, h_kv * v, d_v),
         "w_o": _w(h * v, d_o, h * v)}
    if bias:
        p.update(b_q=u((h * k,), -0.5, 0.5), b_k=u((h_kv * k,), -0.5, 0.5),
                 b_v=u((h_kv * v,), -0.5, 0.5), b_o=u((d_o,), -0.5, 0.5))
    return {n: p[n] for n in ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o") if n in p}


def x_in(*shape) -> dict:
    return u(shape, -1.0, 1.0, 2.0 ** -5)


def _mha_far_below(b, t, s, d, h, k, pads):
    """Cross-attention where column 0 of every head is Q = 1024 (w_q's column 0, b_q = 1024)
    and K = -1024 for a kept key, +1024 for a padded one (key[..., -1] is 1 on the ``pads``
    padded keys, 0 elsewhere; w_k's column 0 is 2048 on that feature, b_k = -1024): every kept
    score is -1048576/sqrt(K) plus the other columns' small sum, every padded key scores as far
    above."""
    x = {"query": x_in(b, t, d), "key": x_in(b, s, d), "value": x_in(b, s, d),
         "mask": mask(t, s, causal=True, left_pad=pads)}
    x["key"]["set"] = [{"index": [None, None, d - 1], "value": 0.0}] + [
        {"index": [i, [0, n], d - 1], "value": 1.0} for i, n in enumerate(pads)]
    p = mha_params(d, d, d, h, k, k, d)
    cols = [i * k for i in range(h)]
    p["w_q"]["set"] = [{"index": [None, c], "value": 0.0} for c in cols]
    p["b_q"]["set"] = [{"index": [c], "value": 1024.0} for c in cols]
    p["w_k"]["set"] = [{"index": [d - 1, None], "value": 0.0}] + [
        e for c in cols for e in ({"index": [None, c], "value": 0.0}, {"index": [d - 1, c], "value": 2048.0})]
    p["b_k"]["set"] = [{"index": [c], "value": -1024.0} for c in cols]
    return x, p


def mha_cases():
    x = {**x_in(1, 129, 96), "stream": "mha/stress-self-tile-001/x"}  # one array, three inputs
    yield case("mha/stress-self-tile-001", "mha",
               "Causal self-attention (query = key = value) at T = 129, one past a 128-tile, "
               "D = 96, H = 2 heads of K = V = 111 (an odd width a kernel pads), Do = 96, all "
               "biases.",
               inputs={"query": x, "key": x, "value": x, "mask": mask(129, 129, causal=True)},
               attributes={"num_heads": 2}, params=mha_params(96, 96, 96, 2, 111, 111, 96),
               flags=["tile-boundary", "self", "causal", "odd-width", "bias"])
    yield case("mha/stress-cross-001", "mha",
               "Cross-attention T = 97 != S = 129, Dq = 80, Dk = 64, Dv = 72, H = 2, K = 80, "
               "V = 59, Do = 64, causal bottom-right with 40 and 5 left-padded keys: rows 0..7 of "
               "batch 0 keep no key (their output is b_o).",
               inputs={"query": x_in(2, 97, 80), "key": x_in(2, 129, 64), "value": x_in(2, 129, 72),
                       "mask": mask(97, 129, causal=True, left_pad=[40, 5])},
               attributes={"num_heads": 2}, params=mha_params(80, 64, 72, 2, 80, 59, 64),
               flags=["tile-boundary", "cross", "t-ne-s", "k-ne-v", "left-padding", "fully-masked",
                      "causal", "bias"])
    x, p = _mha_far_below(2, 64, 65, 64, 2, 64, [17, 33])
    yield case("mha/stress-far-below-001", "mha",
               "Every kept score is about -131072 after the projections (Q = 1024 against "
               "K = -1024 in column 0 of each of H = 2 heads, K = 64) and every left-padded key "
               "(17 and 33) scores about +131072, causal T = 64, S = 65: a finite row-maximum "
               "sentinel or a finite mask fill inside mha fails.",
               inputs=x, attributes={"num_heads": 2}, params=p, dtypes=WIDE, dtype_note=WIDE_NOTE,
               flags=["finite-sentinel", "finite-mask-fill", "left-padding", "fully-masked", "causal"])
    x = {**x_in(1, 65, 64), "stream": "mha/stress-grad-001/x"}
    yield case("mha/stress-grad-001", "mha",
               "Gradients of query, key, value (the same array, each its own gradient) and of all "
               "eight parameters: causal self-attention T = 65, D = 64, H = 2, K = V = 64, Do = 64.",
               inputs={"query": x, "key": x, "value": x, "mask": mask(65, 65, causal=True)},
               attributes={"num_heads": 2}, params=mha_params(64, 64, 64, 2, 64, 64, 64),
               cotangents={"output": u((1, 65, 64))},
               flags=["gradient", "tile-boundary", "self", "causal", "bias"])
    yield case("mha/stress-grad-002", "mha",
               "Gradients of grouped-query cross-attention (H = 4 over H_kv = 2, K = 96, V = 64) "
               "at T = 33 != S = 65, Dq = 48, Dk = Dv = 40, Do = 32, no biases, causal "
               "bottom-right with 40 left-padded keys in batch 1 (its first 8 rows keep no key), "
               "cotangents on the output and the weights.",
               inputs={"query": x_in(2, 33, 48), "key": x_in(2, 65, 40), "value": x_in(2, 65, 40),
                       "mask": mask(33, 65, causal=True, left_pad=[0, 40])},
               attributes={"num_heads": 4, "num_kv_heads": 2},
               params=mha_params(48, 40, 40, 4, 96, 64, 32, h_kv=2, bias=False),
               cotangents={"output": u((2, 33, 32)), "weights": u((2, 4, 33, 65))},
               flags=["gradient", "gqa", "cross", "t-ne-s", "left-padding", "fully-masked",
                      "weights-cotangent", "no-bias", "tile-boundary"])


def ints(values, shape=None) -> dict:
    return {"op": "ints", "shape": list(shape or [len(values)]), "values": [int(v) for v in values]}


def lse_cases():
    yield case("sdpa_lse/stress-far-below-001", "sdpa_lse",
               "Every kept score is -131072 + (at most +-8), causal bottom-right T = 97 over "
               "S = 1025 (query i sees j <= i + 928), H = 2, K = V = 64: the log-sum-exp is "
               "about -131070; a row maximum started at a finite sentinel returns the "
               "sentinel's log-sum-exp (or -inf), a kernel that adds the row maximum back in "
               "float16 loses it.",
               inputs=_far_below(1, 2, 97, 1025, 64, 64), dtypes=WIDE, dtype_note=WIDE_NOTE,
               flags=["finite-sentinel", "underflow", "causal", "t-ne-s", "tile-boundary", "long"])
    yield case("sdpa_lse/stress-empty-rows-001", "sdpa_lse",
               "Causal bottom-right T = 129 over S = 65, GQA (H = 4 over H_kv = 2), K = V = 80: "
               "queries 0..63 see no key (log-sum-exp -inf, output 0), query 64 sees one key "
               "(log-sum-exp = its score), the rest cross a 64-key tile edge.",
               inputs={**qkv(1, 4, 129, 65, 80, 80, h_kv=2), "mask": mask(129, 65, causal=True)},
               attributes={"num_kv_heads": 2},
               flags=["fully-masked", "causal", "t-ne-s", "tile-boundary", "gqa", "odd-width"])
    yield case("sdpa_lse/stress-grad-001", "sdpa_lse",
               "Gradients (dq, dk, dv) of the output and the log-sum-exp together, every kept "
               "score near -131072 (k[..., 0] jittered so dq[..., 0] is not a cancelling 0), "
               "causal T = 17 over S = 129, H = 2, K = V = 64: d lse / dS = W, so a kernel whose "
               "backward reads the log-sum-exp it saved at a finite sentinel gets every "
               "gradient wrong.",
               inputs=_far_below(1, 2, 17, 129, 64, 64, jitter=True),
               cotangents={"output": u((1, 2, 17, 64)), "lse": u((1, 2, 17))},
               dtypes=WIDE, dtype_note=WIDE_NOTE,
               flags=["finite-sentinel", "underflow", "causal", "t-ne-s", "tile-boundary",
                      "gradient"])


SINKS = [12.0, -12.0, 0.0, 3.5]  # one far above every score, one far below, two in between


def _floats(values) -> dict:
    return {"op": "full", "shape": [len(values)], "value": 0.0,
            "set": [{"index": [i], "value": float(v)} for i, v in enumerate(values)]}


def sinks_cases():
    yield case("attention_sinks/stress-gqa-window-001", "sdpa_sinks",
               "GQA (H = 4 query heads over H_kv = 2), a different sink per query head (12, -12, "
               "0, 3.5 against scores of about +-4), T = 65 over S = 127, K = V = 64, a sliding "
               "window of 32 keys (bottom-right): the first head's sink takes nearly all the "
               "weight, the second's none; a sink read from the kv head's index or from head 0 "
               "is off everywhere.",
               inputs={**qkv(1, 4, 65, 127, 64, 64, h_kv=2), "sinks": _floats(SINKS),
                       "mask": mask(65, 127, window=32)},
               attributes={"num_kv_heads": 2},
               flags=["gqa", "per-head", "sliding-window", "t-ne-s", "tile-boundary"])
    x = _far_below(1, 2, 63, 129, 64, 64)
    x["sinks"] = {"op": "full", "shape": [2], "value": -131072.0,
                  "set": [{"index": [1], "value": -131080.0}]}
    yield case("attention_sinks/stress-far-below-001", "sdpa_sinks",
               "Every kept score is -131072 + (at most +-8) and the sinks are -131072 and "
               "-131080, causal T = 63 over S = 129, H = 2: the sink and the keys share the "
               "weight only when the row maximum is the true one; a finite sentinel gives the "
               "sink all of it (or NaN).",
               inputs=x, dtypes=WIDE, dtype_note=WIDE_NOTE,
               flags=["finite-sentinel", "underflow", "causal", "t-ne-s", "tile-boundary"])


# (T_b, S_b) per packed sequence: a single token, one short of a tile, an empty sequence,
# one past a tile, and a long one (97 new queries over 1025 keys).
PACKED = [(1, 1), (63, 63), (0, 0), (65, 65), (97, 1025)]


def _offsets(lengths):
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


def varlen_cases():
    tq, tk = sum(t for t, _ in PACKED), sum(s for _, s in PACKED)
    yield case("sdpa_varlen/stress-packed-001", "sdpa_varlen",
               "Five packed sequences of (T, S) = (1, 1), (63, 63), (0, 0), (65, 65), (97, 1025), "
               "causal bottom-right per sequence, GQA (H = 4 over H_kv = 2), K = V = 64: an empty "
               "sequence, tile edges on both sides, and one sequence 16 times longer than the "
               "rest (a kernel that reads max_seqlen_k for every sequence, or a neighbour's "
               "offsets, attends to the wrong keys).",
               inputs={"q": u((tq, 4, 64)), "k": u((tk, 2, 64)), "v": u((tk, 2, 64)),
                       "cu_seqlens_q": ints(_offsets(t for t, _ in PACKED)),
                       "cu_seqlens_k": ints(_offsets(s for _, s in PACKED))},
               attributes={"max_seqlen_q": 97, "max_seqlen_k": 1025, "causal": True},
               flags=["causal", "gqa", "t-ne-s", "tile-boundary", "empty", "long"])


PAGE = 16
# sequence 0: 1025 keys = 64 pages + 1 slot, its pages in a shuffled order; sequences 1 and 2
# share their first page (a common prefix) and end one past a page edge (17) and on one (32).
SEQ_LENS = [1025, 17, 32]


def _block_table():
    pool = [(7 * i + 3) % 71 for i in range(71)]  # a permutation of the 71 pages
    first = pool[:65]
    shared, rest = pool[65], pool[66:]
    rows = [first, [shared, rest[0]], [shared, rest[1]]]
    return [r + [0] * (65 - len(r)) for r in rows]


def paged_cases():
    yield case("paged_attention/stress-pages-001", "paged_attention",
               "Three sequences in a pool of 71 pages of 16 slots, T = 3 new queries each, causal "
               "bottom-right, GQA (H = 4 over H_kv = 2), K = V = 64: 1025 keys over 65 shuffled "
               "pages (the last holds one key), two sequences sharing their first page and "
               "ending one past a page edge (17) and on one (32).",
               inputs={"q": u((3, 3, 4, 64)), "k_cache": u((71, PAGE, 2, 64)),
                       "v_cache": u((71, PAGE, 2, 64)),
                       "block_table": ints(sum(_block_table(), []), (3, 65)),
                       "seq_lens": ints(SEQ_LENS)},
               attributes={"causal": True},
               flags=["paged", "shared-page", "causal", "gqa", "tile-boundary", "long"])


def every():
    from . import moecases

    for group in (sdpa_cases, softmax_cases, masks_cases, norm_cases, loss_cases, rope_cases,
                  mha_cases, lse_cases, sinks_cases, varlen_cases, paged_cases, moecases.every):
        yield from group()
