"""topk_attention: softmax over the top_k largest scaled scores of each query."""

import numpy as np

from ..oracle.topk_attention import topk_attention as oracle
from ._build import Component, Fn, error, value

COMPONENT = Component("topk_attention", {
    "topk_attention": Fn(required=["top_k"], module="attention", inputs=["q", "k", "v", "mask"],
                         optional=["mask"], attributes={"scale": None}, returns=["output",
                         "weights"], oracle=oracle),
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
