"""topk_attention: softmax over the top_k largest scaled scores of each query."""

import numpy as np

from ..oracle.topk_attention import topk_attention as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("topk_attention", {
    "topk_attention": Fn(required=["top_k"], module="attention", inputs=["q", "k", "v", "mask"],
                         optional=["mask"], attributes={"scale": None}, returns=["output",
                         "weights"], added={"ties": "lower_index"}, oracle=oracle),
})


def qkv(rng, batch, t, s, k_width, v_width, lo=-2.0, hi=2.0):
    return {"q": rng.uniform(batch + (t, k_width), lo, hi),
            "k": rng.uniform(batch + (s, k_width), lo, hi),
            "v": rng.uniform(batch + (s, v_width))}


def cases(rng):
    yield value("topk_attention/basic-001", "topk_attention",
                "q (2, 3, 4), k and v (2, 6, 4), top_k = 2, default scale 0.5.",
                inputs=qkv(rng, (2,), 3, 6, 4, 4), attributes={"top_k": 2},
                flags=["basic", "scale"])
    yield value("topk_attention/top1-001", "topk_attention",
                "top_k = 1: each query copies the value row of its best key (hard attention).",
                inputs=qkv(rng, (2,), 3, 5, 4, 3), attributes={"top_k": 1}, flags=["top-1"])
    yield value("topk_attention/all-001", "topk_attention",
                "top_k = S = 5: identical to sdpa.", inputs=qkv(rng, (2,), 3, 5, 4, 4),
                attributes={"top_k": 5}, flags=["top-all"])
    yield value("topk_attention/ties-001", "topk_attention",
                "Scores [1, 1, 1] (K = 1, scale 1), top_k = 2: ties keep the lower key index "
                "first, so keys 0 and 1 get 1/2 each and key 2 gets 0.",
                inputs={"q": np.array([[1.0]]), "k": np.array([[1.0], [1.0], [1.0]]),
                        "v": np.array([[1.0, 0.0], [0.0, 1.0], [4.0, 4.0]])},
                attributes={"top_k": 2, "scale": 1.0}, flags=["ties"])
    yield value("topk_attention/ties-002", "topk_attention",
                "Ties at the cut: scores [2, 1, 3, 1, 1, 0.5] with top_k = 3 keep keys 2, 0 and "
                "1 (the first of the three equal scores 1); the second query (scores "
                "[1, 0.5, 1.5, 0.5, 0.5, 0.25], key 0 masked) keeps keys 2, 1 and 3.",
                inputs={"q": np.array([[1.0], [0.5]]),
                        "k": np.array([[2.0], [1.0], [3.0], [1.0], [1.0], [0.5]]),
                        "v": np.arange(12.0).reshape(6, 2) / 4,
                        "mask": np.array([[1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]], dtype=bool)},
                attributes={"top_k": 3, "scale": 1.0}, flags=["ties", "mask"])
    yield value("topk_attention/mask-001", "topk_attention",
                "The two largest scores sit on masked keys: only unmasked keys compete, so "
                "selecting the top_k among all keys and masking afterwards keeps too few.",
                inputs={"q": np.array([[1.0], [-1.0]]),
                        "k": np.array([[3.0], [2.5], [1.0], [0.5], [-1.0]]),
                        "v": rng.uniform((5, 3)),
                        "mask": np.array([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=bool)},
                attributes={"top_k": 2, "scale": 1.0}, flags=["mask", "mask-polarity"])
    yield value("topk_attention/few-unmasked-001", "topk_attention",
                "Fewer unmasked keys than top_k: row 0 keeps its 2 unmasked keys, row 1 is "
                "fully masked (zero weights, zero output).",
                inputs={**qkv(rng, (), 2, 5, 4, 3),
                        "mask": np.array([[0, 1, 0, 1, 0], [0, 0, 0, 0, 0]], dtype=bool)},
                attributes={"top_k": 3}, flags=["mask", "fully-masked"])
    big = np.zeros((2, 4))
    big[0, 0], big[1, 0] = 2.0, -2.0
    kbig = np.zeros((5, 4))
    kbig[:, 0] = [1000.0, 984.0, 996.0, 992.0, 1000.0]
    yield value("topk_attention/large-001", "topk_attention",
                "Scores exactly around +1000 and -1000 (K = 4, scale 0.5), top_k = 3: the "
                "softmax over the kept keys must subtract their maximum; the two scores 1000 "
                "tie (keys 0 and 4).",
                inputs={"q": big, "k": kbig, "v": rng.uniform((5, 3))},
                attributes={"top_k": 3}, flags=["overflow", "underflow", "stability", "ties"])
    yield value("topk_attention/scale-001", "topk_attention",
                "Explicit scale 0.25 with K = 4, K != V, batch dims (2, 2), top_k = 3.",
                inputs=qkv(rng, (2, 2), 3, 5, 4, 6, -4.0, 4.0),
                attributes={"top_k": 3, "scale": 0.25}, flags=["scale", "batch", "k-ne-v"])

    yield error("topk_attention/top-k-zero-001", "topk_attention", "top_k = 0.",
                inputs=qkv(rng, (), 3, 4, 4, 4), attributes={"top_k": 0},
                error="ConfigError", mentions=["top_k"])
    yield error("topk_attention/top-k-large-001", "topk_attention",
                "top_k = 5 with only S = 4 keys.",
                inputs=qkv(rng, (), 3, 4, 4, 4), attributes={"top_k": 5},
                error="ConfigError", mentions=["top_k"])
    yield error("topk_attention/key-width-001", "topk_attention", "q has K = 4, k has K = 2.",
                inputs={"q": rng.uniform((3, 4)), "k": rng.uniform((5, 2)),
                        "v": rng.uniform((5, 4))}, attributes={"top_k": 2},
                error="ShapeError", mentions=["q.shape[-1]", "k.shape[-1]"])
    yield error("topk_attention/mask-shape-001", "topk_attention",
                "A (3, 5) mask for scores of shape (3, 4).",
                inputs={**qkv(rng, (), 3, 4, 4, 4), "mask": np.ones((3, 5), dtype=bool)},
                attributes={"top_k": 2}, error="ShapeError", mentions=["mask", "(3, 5)"])
    yield from defaults_cases()
    yield from missed_cases()
    yield from _edges(Rng(f"{COMPONENT.id}/edges"))


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("topk_attention/defaults-001", "topk_attention",
                "scale left out (default None = 1/sqrt(K) = 1/2, K = 4), top_k = 3 of 6 keys.",
                inputs=qkv(rd, (2,), 3, 6, 4, 4), attributes={"top_k": 3}, flags=["defaults"],
                omit_defaults=True)


# -- missed bugs (issue 9): cases that kill mutation-testing survivors ---------------------

def missed_cases():
    rd = Rng(f"{COMPONENT.id}/missed")
    one = np.ones((1, 1))
    yield value("topk_attention/ties-003", "topk_attention",
                "Scores [1, 1, 2, 2, 0, 0] (K = 1, scale 1), top_k = 3: keys 2 and 3, then key "
                "0 (the lower of the tied 1s); taking key 1, or the two 0s' order, fails.",
                inputs={"q": one, "k": np.array([[1.0], [1], [2], [2], [0], [0]]),
                        "v": rd.uniform((6, 3))}, attributes={"top_k": 3, "scale": 1.0},
                flags=["ties"])
    scores = rd.integers(0, 3, (20, 1)).astype(np.float64)
    yield value("topk_attention/ties-004", "topk_attention",
                "S = 20 keys (torch.topk changes algorithm above 16) with scores in {0, 1, 2}, "
                "top_k = 9: the cut falls inside a run of equal scores, and the lowest indices "
                "of that run are kept.",
                inputs={"q": one, "k": scores, "v": rd.uniform((20, 3))},
                attributes={"top_k": 9, "scale": 1.0}, flags=["ties"])


def _edges(rng):
    """The ties attribute, non-finite inputs, empty axes (their own number stream)."""
    nan = np.nan
    # scale 1, K = 1: scores are k[j] * q; q = 1 gives scores 2, 1, 1, 1, 0.5 (three tie at
    # the 2nd place for top_k = 2)
    tie = {"q": np.array([[1.0], [-1.0]]), "k": np.array([[2.0], [1.0], [1.0], [1.0], [0.5]]),
           "v": rng.uniform((5, 3))}
    yield value("topk_attention/ties-lower-index-001", "topk_attention",
                "ties='lower_index' (the default, named): scores 2, 1, 1, 1, 0.5 and top_k = 2 "
                "keep keys 0 and 1 only (the lower index wins the tie); query 1 (scores negated) "
                "keeps keys 4 and 1.",
                inputs=tie, attributes={"top_k": 2, "scale": 1.0, "ties": "lower_index"},
                flags=["ties", "attribute"])
    yield value("topk_attention/ties-keep-all-001", "topk_attention",
                "ties='keep_all' (the Explicit Sparse Transformer code: keep every score >= the "
                "k-th largest): the same scores with top_k = 2 keep keys 0, 1, 2 and 3; query 1 "
                "keeps keys 4, 1, 2 and 3.",
                inputs=tie, attributes={"top_k": 2, "scale": 1.0, "ties": "keep_all"},
                flags=["ties-keep-all", "ties", "attribute"])
    x = qkv(rng, (2,), 3, 5, 4, 3)
    mask = np.array([[1, 1, 1, 0, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], dtype=bool)
    x["mask"] = mask
    yield value("topk_attention/ties-keep-all-002", "topk_attention",
                "ties='keep_all' without ties and with a mask: the same weights as the default "
                "(exactly top_k = 2 kept per row).",
                inputs=x, attributes={"top_k": 2, "ties": "keep_all"},
                flags=["ties-keep-all", "mask"], dtypes=["float64", "float32"],
                dtype_note="float16 and bfloat16 round some rows' 2nd and 3rd scores to one "
                           "value, and keep_all then keeps a third key: no tolerance covers that.")
    x = qkv(rng, (1,), 3, 5, 4, 3)
    x["k"][0, 4] = nan  # masked for every query
    x["v"][0, 4] = nan
    x["v"][0, 0] = np.inf  # kept by the mask; in the top 2 of some queries only
    yield value("topk_attention/masked-nan-001", "topk_attention",
                "NaN in the key and value of a masked key never shows, nor does the inf value "
                "of key 0, which is in no row's top 2 (outside the top k its weight is 0: left "
                "out, not multiplied).",
                inputs={**x, "mask": np.array([1, 1, 1, 1, 0], dtype=bool)},
                attributes={"top_k": 2}, flags=["masked-nan", "non-finite", "mask"])
    x = qkv(rng, (1,), 2, 4, 4, 3)
    x["k"][0, 1, 2] = nan
    yield value("topk_attention/nan-propagation-001", "topk_attention",
                "A NaN key score among a row's unmasked keys makes every unmasked weight of the "
                "row NaN (the ranking is undefined); row 1 masks that key and is ordinary.",
                inputs={**x, "mask": np.array([[1, 1, 1, 1], [1, 0, 1, 1]], dtype=bool)},
                attributes={"top_k": 2}, flags=["nan-propagation", "non-finite", "mask"])
    yield value("topk_attention/empty-queries-001", "topk_attention",
                "T = 0 queries: empty output (0, 3) and weights (0, 4).",
                inputs={"q": np.zeros((0, 4)), "k": rng.uniform((4, 4)), "v": rng.uniform((4, 3))},
                attributes={"top_k": 2}, flags=["empty-axis", "edge"])
    yield error("topk_attention/empty-keys-001", "topk_attention",
                "S = 0 keys: no top_k in [1, S] exists, a ConfigError (not an empty result).",
                inputs={"q": rng.uniform((3, 4)), "k": np.zeros((0, 4)), "v": np.zeros((0, 3))},
                attributes={"top_k": 1}, error="ConfigError", mentions=["top_k"])
    yield error("topk_attention/bad-ties-001", "topk_attention", "ties = 'upper_index'.",
                inputs=qkv(rng, (), 3, 4, 4, 3), attributes={"top_k": 2, "ties": "upper_index"},
                error="ConfigError", mentions=["ties", "upper_index"])
    yield error("topk_attention/bad-scale-001", "topk_attention", "scale = '0.5', a string.",
                inputs=qkv(rng, (), 3, 4, 4, 3), attributes={"top_k": 2, "scale": "0.5"},
                error="ConfigError", mentions=["scale"])
    yield value("topk_attention/ties-default-001", "topk_attention",
                "ties and scale left out (lower_index; 1/sqrt(K) = 1 at K = 1): the scores 2, 1, "
                "1, 1, 0.5 with top_k = 2 keep keys 0 and 1 only; a default of keep_all keeps "
                "keys 0 to 3.",
                inputs=tie, attributes={"top_k": 2}, flags=["defaults", "ties"],
                omit_defaults=True)


def grad_cases(r):
    yield gradient("topk_attention/grad-001", "topk_attention",
                   "dq, dk, dv with top_k = 2 of 5 keys: only the kept keys of each query get a "
                   "gradient through the scores (the kept set is held fixed); dv = W^T dO.",
                   inputs=qkv(r, (2,), 3, 5, 4, 3), attributes={"top_k": 2},
                   cotangents={"output": r.uniform((2, 3, 3))}, flags=["gradient", "basic"])
    yield gradient("topk_attention/grad-002", "topk_attention",
                   "Cotangents on the output and the weights, top_k = 3 of 4, scale 0.3: the "
                   "weights' cotangent of an unkept key is dropped.",
                   inputs=qkv(r, (1,), 4, 4, 2, 2), attributes={"top_k": 3, "scale": 0.3},
                   cotangents={"output": r.uniform((1, 4, 2)), "weights": r.uniform((1, 4, 4))},
                   flags=["gradient", "weights-cotangent", "scale"])
    mask = r.bools((3, 5))
    mask[:, 0] = True
    yield gradient("topk_attention/grad-003", "topk_attention",
                   "A (3, 5) mask broadcast over (2, 2) heads, top_k = 2: a masked key gets no "
                   "gradient, and a row with fewer than top_k unmasked keys keeps them all.",
                   inputs={**qkv(r, (2, 2), 3, 5, 4, 4), "mask": mask}, attributes={"top_k": 2},
                   cotangents={"output": r.uniform((2, 2, 3, 4))},
                   flags=["gradient", "mask", "broadcast"])
    yield gradient("topk_attention/grad-004", "topk_attention",
                   "top_k = S = 4: the gradient is sdpa's.", inputs=qkv(r, (2,), 2, 4, 3, 2),
                   attributes={"top_k": 4}, cotangents={"output": r.uniform((2, 2, 2))},
                   flags=["gradient", "top-all"])
    yield gradient("topk_attention/grad-005", "topk_attention",
                   "scale and ties left out (1/sqrt(K) = 1/2 for K = 4, lower_index), top_k = 2 of "
                   "5 keys; a default scale of 1 fails.", inputs=qkv(r, (2,), 3, 5, 4, 3),
                   attributes={"top_k": 2}, cotangents={"output": r.uniform((2, 3, 3))},
                   flags=["gradient", "defaults"], omit_defaults=True)
