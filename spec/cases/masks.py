"""masks: causal and sliding-window (bottom-right aligned), padding and combined boolean
masks."""

import numpy as np

from ..oracle.masks import (
    causal_mask,
    chunked_mask,
    combined_mask,
    local_window_mask,
    padding_mask,
    sliding_window_mask,
)
from ._build import Component, Fn, Rng, error, value

COMPONENT = Component("masks", {
    "causal_mask": Fn(required=["t", "s"], module="attention", inputs=[], attributes={},
                      returns=["mask"], oracle=causal_mask),
    "padding_mask": Fn(required=["pad_id"], module="attention", inputs=["ids"], attributes={},
                       returns=["mask"], oracle=padding_mask),
    "combined_mask": Fn(required=["pad_id", "t"], module="attention", inputs=["ids"],
                        attributes={"num_heads": 1, "causal": True}, returns=["mask"],
                        oracle=combined_mask),
    "sliding_window_mask": Fn(required=["t", "s", "window"], module="attention", inputs=[],
                              attributes={}, returns=["mask"], oracle=sliding_window_mask),
    "local_window_mask": Fn(required=["t", "s", "left", "right"], module="attention", inputs=[],
                            attributes={}, returns=["mask"], oracle=local_window_mask),
    "chunked_mask": Fn(required=["t", "s", "chunk"], module="attention", inputs=[],
                       attributes={"causal": True}, returns=["mask"], oracle=chunked_mask),
})


def cases(rng):
    yield value("masks/causal-001", "causal_mask",
                "Square causal mask, T = S = 4: lower triangle including the diagonal "
                "(excluding the diagonal is off by one).",
                inputs={}, attributes={"t": 4, "s": 4}, flags=["causal", "off-by-one"])
    yield value("masks/causal-002", "causal_mask",
                "T = 2 < S = 5 (two new queries after a cache of 3 keys): query i sees keys "
                "j <= i + 3. Top-left alignment (torch.tril(ones(2, 5))) gives a different mask.",
                inputs={}, attributes={"t": 2, "s": 5}, flags=["causal", "t-ne-s", "alignment"])
    yield value("masks/causal-003", "causal_mask",
                "T = 5 > S = 3: the first T - S = 2 queries attend nothing (all-False rows).",
                inputs={}, attributes={"t": 5, "s": 3},
                flags=["causal", "t-ne-s", "alignment", "fully-masked"])
    yield value("masks/causal-004", "causal_mask",
                "T = 1, S = 6: one decoding step with a cache sees every key.",
                inputs={}, attributes={"t": 1, "s": 6}, flags=["causal", "t-ne-s", "decoding"])
    yield value("masks/causal-005", "causal_mask",
                "T = 0 queries: an empty (0, 3) mask.",
                inputs={}, attributes={"t": 0, "s": 3}, flags=["causal", "empty"])
    yield value("masks/padding-001", "padding_mask",
                "ids (2, 5) with pad_id 0 at the end of row 0 and in the middle of row 1; "
                "shape (B, 1, 1, S), True = real token.",
                inputs={"ids": np.array([[5, 3, 7, 0, 0], [2, 0, 4, 1, 0]])},
                attributes={"pad_id": 0}, flags=["padding", "mask-polarity"])
    yield value("masks/padding-002", "padding_mask",
                "pad_id = 1 (fairseq's convention): token 0 is a real token.",
                inputs={"ids": np.array([[0, 4, 1], [1, 1, 1], [3, 0, 2]])},
                attributes={"pad_id": 1}, flags=["padding", "fully-masked"])
    yield value("masks/combined-001", "combined_mask",
                "Decoder self-attention: ids (2, 4), pad_id 0, t = 4, 2 heads, causal: "
                "padding and causal, materialised to (2, 2, 4, 4).",
                inputs={"ids": np.array([[6, 2, 9, 0], [3, 0, 0, 0]])},
                attributes={"pad_id": 0, "t": 4, "num_heads": 2, "causal": True},
                flags=["combined", "causal", "padding", "heads"])
    yield value("masks/combined-002", "combined_mask",
                "Memory mask for cross-attention: causal = False, t = 3 queries over S = 5 "
                "memory positions, 1 head.",
                inputs={"ids": np.array([[4, 8, 0, 0, 0], [1, 2, 3, 4, 5]])},
                attributes={"pad_id": 0, "t": 3, "num_heads": 1, "causal": False},
                flags=["combined", "padding", "t-ne-s"])
    yield value("masks/combined-003", "combined_mask",
                "Causal with t = 2 < S = 4 (bottom-right: query i sees j <= i + 2), 3 heads, "
                "one padded position.",
                inputs={"ids": np.array([[7, 7, 2, 0]])},
                attributes={"pad_id": 0, "t": 2, "num_heads": 3, "causal": True},
                flags=["combined", "causal", "alignment", "t-ne-s", "heads"])

    yield error("masks/negative-t-001", "causal_mask", "A negative query length t = -1.",
                inputs={}, attributes={"t": -1, "s": 3}, error="ConfigError", mentions=["t"])
    yield error("masks/negative-s-001", "causal_mask", "A negative key length s = -2.",
                inputs={}, attributes={"t": 2, "s": -2}, error="ConfigError", mentions=["s"])
    yield error("masks/ids-rank-001", "padding_mask", "ids of rank 1 (no batch axis).",
                inputs={"ids": np.array([1, 2, 0])}, attributes={"pad_id": 0},
                error="ShapeError", mentions=["ids", "(3,)"])
    yield error("masks/ids-dtype-001", "padding_mask", "Float ids are refused.",
                inputs={"ids": np.array([[1.0, 2.0, 0.0]])}, attributes={"pad_id": 0},
                error="DTypeError", mentions=["ids"])
    yield error("masks/combined-t-001", "combined_mask", "combined_mask with t = -1.",
                inputs={"ids": np.array([[1, 2, 0]])}, attributes={"pad_id": 0, "t": -1},
                error="ConfigError", mentions=["t"])
    yield error("masks/combined-heads-001", "combined_mask", "combined_mask with num_heads = 0.",
                inputs={"ids": np.array([[1, 2, 0]])},
                attributes={"pad_id": 0, "t": 3, "num_heads": 0},
                error="ConfigError", mentions=["num_heads"])
    yield error("masks/combined-rank-001", "combined_mask", "ids of rank 3.",
                inputs={"ids": np.zeros((1, 2, 3), dtype=np.int64)},
                attributes={"pad_id": 0, "t": 3}, error="ShapeError", mentions=["ids"])
    yield from defaults_cases()
    yield from window_cases()
    yield from local_window_cases()
    yield from chunked_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    ids = rd.integers(1, 9, (2, 5))
    ids[1, 3:] = 0
    yield value("masks/defaults-001", "combined_mask",
                "num_heads and causal left out (defaults 1 and True): a (2, 1, 5, 5) causal & "
                "key-padding mask, pad_id 0 (row 1 padded after 3).",
                inputs={"ids": ids}, attributes={"pad_id": 0, "t": 5}, flags=["defaults"],
                omit_defaults=True)


def window_cases():
    """Sliding-window masks (added in 1.1.0, after the released cases; no random inputs)."""
    def mask(id, t, s, w, description, flags):
        return value(f"masks/{id}", "sliding_window_mask", description, inputs={},
                     attributes={"t": t, "s": s, "window": w}, flags=["sliding-window", *flags])
    yield mask("window-001", 6, 6, 3,
               "T = S = 6, window 3: query i sees keys i-2, i-1, i (3 keys, itself included); "
               "q - k <= 3 (window + 1 keys, FlexAttention's example) is off by one.",
               ["off-by-one"])
    yield mask("window-002", 2, 7, 3,
               "T = 2 < S = 7 (a cache of 5 keys): query i sits at position i + 5 and sees keys "
               "i+3..i+5; a top-left window (positions 0, 1) gives a different mask.",
               ["t-ne-s", "alignment"])
    yield mask("window-003", 4, 4, 1,
               "window 1: each query sees only its own position (the diagonal).", ["edge"])
    yield mask("window-004", 3, 5, 9,
               "window 9 >= S = 5: the causal mask (bottom-right, T = 3 < S).",
               ["causal", "t-ne-s"])
    yield mask("window-005", 1, 8, 4,
               "T = 1, S = 8: one decoding step with a cache of 7 keys sees the last 4 keys, "
               "4..7 (itself at 7).", ["decoding", "t-ne-s"])
    yield mask("window-006", 5, 3, 2,
               "T = 5 > S = 3: the first T - S = 2 queries attend nothing; the others see 2 keys.",
               ["t-ne-s", "alignment", "fully-masked"])
    yield mask("window-007", 7, 10, 4,
               "T = 7, S = 10, window 4: a band of width 4 shifted right by S - T = 3.",
               ["t-ne-s", "alignment"])
    yield error("masks/window-zero-001", "sliding_window_mask",
                "window = 0 (a window must hold at least the query's own position).",
                inputs={}, attributes={"t": 3, "s": 3, "window": 0},
                error="ConfigError", mentions=["window"])
    yield error("masks/window-float-001", "sliding_window_mask",
                "A non-integer window = 2.5.",
                inputs={}, attributes={"t": 3, "s": 3, "window": 2.5},
                error="ConfigError", mentions=["window"])
    yield error("masks/window-negative-t-001", "sliding_window_mask",
                "A negative query length t = -1.",
                inputs={}, attributes={"t": -1, "s": 3, "window": 2},
                error="ConfigError", mentions=["t"])


def local_window_cases():
    """Local windows (left, right), issue 22 item 5 (after the released cases; no random inputs)."""
    def mask(id, t, s, left, right, description, flags):
        return value(f"masks/{id}", "local_window_mask", description, inputs={},
                     attributes={"t": t, "s": s, "left": left, "right": right},
                     flags=["sliding-window", *flags])
    yield mask("local-001", 6, 6, 2, 1,
               "T = S = 6, left 2, right 1: query i sees keys i-2..i+1 (4 keys, one ahead). "
               "right ignored (causal band), left and right swapped, or either side off by one "
               "(q - k < left, flash-attn's bounds read as exclusive) gives a different mask.",
               ["off-by-one"])
    yield mask("local-002", 3, 8, 2, 2,
               "T = 3 < S = 8: query i sits at p = i + 5 and sees keys p-2..p+2 (clipped at 7). "
               "A top-left band (p = i, jax.nn.dot_product_attention's local_window_size, ONNX "
               "Attention without past_key) gives a different mask.", ["t-ne-s", "alignment"])
    yield mask("local-003", 5, 3, 1, 1,
               "T = 5 > S = 3: p = i - 2; row 0 (p = -2) sees nothing, row 1 (p = -1) sees key 0 "
               "through right = 1, row 4 (p = 2) sees keys 1, 2.",
               ["t-ne-s", "alignment", "fully-masked"])
    yield mask("local-004", 4, 6, None, 0,
               "left None (unbounded), right 0: exactly causal_mask(4, 6), bottom-right "
               "(flash-attn window_size=(-1, 0), its causal=True).", ["causal", "t-ne-s"])
    yield mask("local-005", 3, 5, None, None,
               "left and right None (flash-attn window_size=(-1, -1)): every key, all True.",
               ["edge"])
    yield mask("local-006", 5, 5, 0, None,
               "left 0, right None: query i sees keys i..4, itself and every later key (the "
               "transpose of the causal mask).", ["edge", "off-by-one"])
    yield mask("local-007", 4, 6, 0, 0,
               "left = right = 0: each query sees only its own position, the diagonal shifted "
               "right by S - T = 2.", ["edge", "t-ne-s"])
    yield mask("local-008", 1, 9, 3, 2,
               "T = 1, S = 9: a decoding step at p = 8 sees keys 5..8 (right = 2 runs past the "
               "last key and is clipped).", ["decoding", "t-ne-s"])
    yield mask("local-009", 7, 7, 2, 2,
               "Symmetric band left = right = 2 (|q - k| <= 2, 5 keys): Hugging Face's "
               "sliding_window_bidirectional_overlay(2), Gemma 3's bidirectional layers with "
               "config.sliding_window = 4 or 5; |q - k| < 2 is off by one.",
               ["off-by-one", "boundary"])
    yield error("masks/local-negative-left-001", "local_window_mask",
                "left = -1 (flash-attn's and ONNX's 'unbounded' is spelled None here).",
                inputs={}, attributes={"t": 3, "s": 3, "left": -1, "right": 0},
                error="ConfigError", mentions=["left"])
    yield error("masks/local-negative-right-001", "local_window_mask", "right = -2.",
                inputs={}, attributes={"t": 3, "s": 3, "left": 1, "right": -2},
                error="ConfigError", mentions=["right"])
    yield error("masks/local-float-left-001", "local_window_mask", "A non-integer left = 1.5.",
                inputs={}, attributes={"t": 3, "s": 3, "left": 1.5, "right": 0},
                error="ConfigError", mentions=["left"])
    yield error("masks/local-string-right-001", "local_window_mask", "right given as the string '2'.",
                inputs={}, attributes={"t": 3, "s": 3, "left": 1, "right": "2"},
                error="ConfigError", mentions=["right"])
    yield error("masks/local-negative-s-001", "local_window_mask", "A negative key length s = -1.",
                inputs={}, attributes={"t": 2, "s": -1, "left": 1, "right": 1},
                error="ConfigError", mentions=["s"])


def chunked_cases():
    """Chunked local attention (Llama 4's local layers), issue 22 item 5."""
    def mask(id, t, s, chunk, causal, description, flags, **kw):
        attributes = {"t": t, "s": s, "chunk": chunk}
        if causal is not None:
            attributes["causal"] = causal
        return value(f"masks/{id}", "chunked_mask", description, inputs={},
                     attributes=attributes, flags=flags, **kw)
    yield mask("chunked-001", 8, 8, 3, True,
               "T = S = 8, chunk 3, causal: chunks {0,1,2}, {3,4,5}, {6,7}, a causal triangle in "
               "each. A chunk boundary off by one ((j + 1) // C, C + 1) or the causal part dropped "
               "gives a different mask.", ["causal", "boundary", "off-by-one"])
    yield mask("chunked-002", 8, 8, 3, False,
               "causal = False: full 3 x 3 blocks on the diagonal (the last one 2 x 2).",
               ["boundary"])
    yield mask("chunked-003", 3, 9, 4, True,
               "T = 3 < S = 9 (a cache of 6): p = 6, 7, 8; p = 6, 7 see keys 4..p, p = 8 opens "
               "chunk 2 and sees only key 8. A top-left alignment (p = i) differs.",
               ["causal", "t-ne-s", "alignment"])
    yield mask("chunked-004", 4, 6, 8, True,
               "chunk 8 >= S = 6: every position in chunk 0, exactly causal_mask(4, 6).",
               ["causal", "t-ne-s", "edge"])
    yield mask("chunked-005", 5, 3, 2, False,
               "T = 5 > S = 3, causal = False: p = i - 2; rows p = -2, -1 see nothing (floor "
               "division puts p = -1 in chunk -1; truncation toward zero puts it in chunk 0), "
               "p = 0, 1 see keys 0, 1 and p = 2 sees key 2.",
               ["t-ne-s", "alignment", "fully-masked"])
    yield mask("chunked-006", 4, 4, 1, True,
               "chunk 1: each query sees only itself (the diagonal).", ["edge"])
    yield mask("chunked-007", 1, 10, 4, True,
               "T = 1, S = 10: a decoding step at p = 9 sees only keys 8, 9 of its chunk.",
               ["decoding", "t-ne-s"])
    yield mask("chunked-008", 6, 6, 4, None,
               "causal left out (default True): chunks {0..3}, {4, 5}, causal in each; a default "
               "of False shows in every chunk.", ["defaults", "causal"], omit_defaults=True)
    yield error("masks/chunked-zero-001", "chunked_mask", "chunk = 0 (a chunk holds >= 1 position).",
                inputs={}, attributes={"t": 3, "s": 3, "chunk": 0},
                error="ConfigError", mentions=["chunk"])
    yield error("masks/chunked-float-001", "chunked_mask", "A non-integer chunk = 2.5.",
                inputs={}, attributes={"t": 3, "s": 3, "chunk": 2.5},
                error="ConfigError", mentions=["chunk"])
    yield error("masks/chunked-causal-type-001", "chunked_mask", "causal = 1 (not a bool).",
                inputs={}, attributes={"t": 3, "s": 3, "chunk": 2, "causal": 1},
                error="ConfigError", mentions=["causal"])
    yield error("masks/chunked-negative-t-001", "chunked_mask", "A negative query length t = -3.",
                inputs={}, attributes={"t": -3, "s": 3, "chunk": 2},
                error="ConfigError", mentions=["t"])
