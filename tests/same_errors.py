"""The same bad input, the same error class and message, in every backend.

``outcomes(backend_name)`` calls spec functions of one backend with bad inputs (each built
with that backend's ``asarray``) and returns ``{case: "ErrorClass: message"}``; the tests
compare each framework's with NumPy's in the framework's own environment (tests/torch,
tests/jax, tests/tensorflow).
"""

from __future__ import annotations

import numpy as np

F64, F32 = "float64", "float32"


def _cases():
    """name -> (spec function, module, {argument: (NumPy value, dtype or None)}, attributes)."""
    q, k = np.ones((1, 2, 4)), np.ones((1, 3, 4))
    gru = {"w_ih": (np.ones((2, 6)), F64), "w_hh": (np.ones((2, 6)), F64)}
    align = {"w_q": (np.ones((4, 5)), F64), "w_k": (np.ones((4, 5)), F64),
             "v": (np.ones(5), F64)}
    mha_p = {n: (np.eye(4), F64) for n in ("w_q", "w_k", "w_v", "w_o")}
    cache = np.ones((3, 2, 1, 4))  # (N, P, H_kv, K)
    fp8 = {n: (np.full((1, 2, 2, 4), 0.75), F64) for n in ("q", "k", "v")}  # (B, H, T, K)
    off_grid = np.full((1, 2, 2, 4), 0.75)
    off_grid[0, 1, 0, 2] = 1.0625  # not an e4m3fn value
    paged = {"q": (np.ones((1, 1, 2, 4)), F64), "k_cache": (cache, F64), "v_cache": (cache, F64),
             "block_table": (np.array([[0, 1]]), None), "seq_lens": (np.array([3]), None)}
    return {
        "sdpa-bias-float32": ("sdpa", "attention", {"q": (q, F64), "k": (k, F64), "v": (k, F64),
                                                    "bias": (np.zeros((2, 3)), F32)}, {}),
        "sdpa-k-float32": ("sdpa", "attention", {"q": (q, F64), "k": (k, F32), "v": (k, F64)},
                           {}),
        "sdpa-v-float32": ("sdpa", "attention", {"q": (q, F64), "k": (k, F64), "v": (k, F32)},
                           {}),
        "sdpa-q-int": ("sdpa", "attention", {"q": (q.astype(np.int64), None), "k": (k, F64),
                                             "v": (k, F64)}, {}),
        "sdpa-mask-float": ("sdpa", "attention", {"q": (q, F64), "k": (k, F64), "v": (k, F64),
                                                  "mask": (np.ones((2, 3)), F64)}, {}),
        "sdpa-mask-shape": ("sdpa", "attention", {"q": (q, F64), "k": (k, F64), "v": (k, F64),
                                                  "mask": (np.ones((5, 3), bool), None)}, {}),
        "sdpa-bias-shape": ("sdpa", "attention", {"q": (q, F64), "k": (k, F64), "v": (k, F64),
                                                  "bias": (np.ones((2, 4)), F64)}, {}),
        "sdpa-kv-heads": ("sdpa", "attention", {"q": (np.ones((1, 4, 2, 4)), F64),
                                                "k": (np.ones((1, 3, 3, 4)), F64),
                                                "v": (np.ones((1, 3, 3, 4)), F64)},
                          {"num_kv_heads": 3}),
        "sdpa_lse-k-float32": ("sdpa_lse", "attention", {"q": (q, F64), "k": (k, F32),
                                                        "v": (k, F64)}, {}),
        "sdpa_lse-mask-float": ("sdpa_lse", "attention", {"q": (q, F64), "k": (k, F64),
                                                          "v": (k, F64),
                                                          "mask": (np.ones((2, 3)), F64)}, {}),
        "merge-lses-float32": ("merge_attention_states", "attention",
                               {"outputs": (np.ones((2, 3, 4)), F64),
                                "lses": (np.ones((2, 3)), F32)}, {}),
        "merge-lses-shape": ("merge_attention_states", "attention",
                             {"outputs": (np.ones((2, 3, 4)), F64),
                              "lses": (np.ones((2, 4)), F64)}, {}),
        "merge-no-parts": ("merge_attention_states", "attention",
                           {"outputs": (np.ones((0, 3, 4)), F64),
                            "lses": (np.ones((0, 3)), F64)}, {}),
        "merge-outputs-int": ("merge_attention_states", "attention",
                              {"outputs": (np.ones((2, 3, 4), dtype=np.int64), None),
                               "lses": (np.ones((2, 3)), F64)}, {}),
        "sinks-shape": ("sdpa_sinks", "attention", {"q": (q, F64), "k": (k, F64), "v": (k, F64),
                                                    "sinks": (np.zeros(2), F64)}, {}),
        "sinks-float32": ("sdpa_sinks", "attention", {"q": (q, F64), "k": (k, F64),
                                                      "v": (k, F64), "sinks": (np.zeros(1), F32)},
                          {}),
        "sinks-rank": ("sdpa_sinks", "attention", {"q": (q[0], F64), "k": (k[0], F64),
                                                   "v": (k[0], F64), "sinks": (np.zeros(1), F64)},
                       {}),
        "paged-k_cache-float32": ("paged_attention", "attention", {**paged, "k_cache": (cache, F32)},
                                  {}),
        "paged-table-float": ("paged_attention", "attention",
                              {**paged, "block_table": (np.zeros((1, 2)), F64)}, {}),
        "paged-block-range": ("paged_attention", "attention",
                              {**paged, "block_table": (np.array([[0, 3]]), None)}, {}),
        "append-shared-write": ("paged_kv_append", "attention",
                                {"k_cache": (cache, F64), "v_cache": (cache, F64),
                                 "block_table": (np.array([[0, 1], [0, 2]]), None),
                                 "seq_lens": (np.array([1, 1]), None),
                                 "k": (np.ones((2, 1, 1, 4)), F64),
                                 "v": (np.ones((2, 1, 1, 4)), F64)}, {}),
        "additive-keys-float32": ("additive_attention", "alignment",
                                  {"query": (q, F64), "keys": (k, F32)}, {"params": align}),
        "additive-w_q-float32": ("additive_attention", "alignment",
                                 {"query": (q, F64), "keys": (k, F64)},
                                 {"params": {**align, "w_q": (np.ones((4, 5)), F32)}}),
        "additive-mask-shape": ("additive_attention", "alignment",
                                {"query": (q, F64), "keys": (k, F64),
                                 "mask": (np.ones((1, 3, 2), bool), None)}, {"params": align}),
        "mha-mask-shape": ("mha", "multihead", {"query": (q, F64), "key": (k, F64),
                                                "value": (k, F64),
                                                "mask": (np.ones((1, 1, 3, 2), bool), None)},
                           {"num_heads": 2, "params": mha_p}),
        "mha-mask-int": ("mha", "multihead", {"query": (q, F64), "key": (k, F64),
                                              "value": (k, F64),
                                              "mask": (np.ones((1, 1, 2, 3), np.int64), None)},
                         {"num_heads": 2, "params": mha_p}),
        "gru-w_ih-float32": ("gru_cell", "rnn", {"x": (np.ones((1, 2)), F64),
                                                 "h": (np.ones((1, 2)), F64)},
                             {"params": {**gru, "w_ih": (np.ones((2, 6)), F32)}}),
        "gru-b_hh-float32": ("gru_cell", "rnn", {"x": (np.ones((1, 2)), F64),
                                                 "h": (np.ones((1, 2)), F64)},
                             {"params": {**gru, "b_hh": (np.ones(6), F32)}}),
        "gru-h-float32": ("gru_cell", "rnn", {"x": (np.ones((1, 2)), F64),
                                              "h": (np.ones((1, 2)), F32)}, {"params": gru}),
        "gru-h-shape": ("gru_cell", "rnn", {"x": (np.ones((1, 2)), F64),
                                            "h": (np.ones((2, 2)), F64)}, {"params": gru}),
        "gru-w_ih-shape": ("gru_cell", "rnn", {"x": (np.ones((1, 2)), F64),
                                               "h": (np.ones((1, 2)), F64)},
                           {"params": {**gru, "w_ih": (np.ones((3, 6)), F64)}}),
        "fp8-q-off-grid": ("sdpa_fp8", "attention", {**fp8, "q": (off_grid, F64)}, {}),
        "fp8-descale-float32": ("sdpa_fp8", "attention",
                                {**fp8, "k_descale": (np.array(0.5), F32)}, {}),
        "fp8-descale-negative": ("sdpa_fp8", "attention",
                                 {**fp8, "v_descale": (np.array([[0.5, -0.5]]), F64)}, {}),
        "fp8-descale-shape": ("sdpa_fp8", "attention",
                              {**fp8, "q_descale": (np.ones((1, 3)), F64)}, {}),
    }


def outcomes(name: str) -> dict[str, str]:
    from attnspec.backends import get_backend

    backend = get_backend(name)
    out = {}
    for case, (fn, module, arrays, attributes) in _cases().items():
        def conv(value, dtype):
            return backend.asarray(value, dtype=dtype, device="cpu")

        args = {n: conv(*a) for n, a in arrays.items()}
        attrs = dict(attributes)
        if "params" in attrs:
            attrs["params"] = {n: conv(*a) for n, a in attrs["params"].items()}
        try:
            backend.function(fn, module)(**args, **attrs)
        except Exception as exc:  # the class and message are what is compared
            out[case] = f"{type(exc).__name__}: {exc}"
        else:
            out[case] = "no error"
    return out

