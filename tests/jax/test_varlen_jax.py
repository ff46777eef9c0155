"""jax.nn.dot_product_attention's `query_seq_lengths` / `key_value_seq_lengths` against the
sdpa_varlen vectors (sdpa_varlen.md, "Conventions and how others differ"): a packed batch
padded to (B, T_max, N, H) with each sequence's lengths passes every vector without a
causal mask; with `is_causal` (top-left: query i sees keys j <= i) it passes exactly the
causal vectors whose sequences all have T_b = S_b, where top-left and the spec's
bottom-right agree. Asserted both ways, so the page goes stale loudly when JAX changes.
Judged at float32: its XLA path computes the scores in float32 even for float64 inputs
(7e-8 off at float64; the jax backend's fused path keeps float64 explicit for that)."""

import jax
import numpy as np
import pytest
from attnspec.spec.compare import compare
from attnspec.spec.vectors import default_spec

jax.config.update("jax_enable_x64", True)
SPEC = default_spec()


def _spans(cu):
    return [(int(a), int(b)) for a, b in zip(cu[:-1], cu[1:])]


def padded_attention(v) -> np.ndarray:
    """The vector's packed batch through jax.nn.dot_product_attention, unpacked to
    (total_q, H, V)."""
    x, attrs = v.inputs, {**SPEC.functions[v.function].attributes, **v.attributes}
    q_spans, k_spans = _spans(x["cu_seqlens_q"]), _spans(x["cu_seqlens_k"])
    t_max, s_max = max(b - a for a, b in q_spans), max(b - a for a, b in k_spans)
    # jax wants one head width: zero columns (exact; the scale is passed)
    b_n, width, v_width = len(q_spans), max(x["q"].shape[-1], x["v"].shape[-1]), x["v"].shape[-1]
    q = np.zeros((b_n, t_max, x["q"].shape[1], width), np.float32)
    k, val = (np.zeros((b_n, s_max, x[n].shape[1], width), np.float32) for n in ("k", "v"))
    for b, ((qa, qb), (ka, kb)) in enumerate(zip(q_spans, k_spans)):
        q[b, :qb - qa, :, :x["q"].shape[-1]] = x["q"][qa:qb]
        k[b, :kb - ka, :, :x["k"].shape[-1]] = x["k"][ka:kb]
        val[b, :kb - ka, :, :v_width] = x["v"][ka:kb]
    scale = x["q"].shape[-1] ** -0.5 if attrs["scale"] is None else attrs["scale"]
    out = jax.nn.dot_product_attention(
        q, k, val, scale=scale, is_causal=attrs["causal"], implementation="xla",
        query_seq_lengths=np.array([b - a for a, b in q_spans], np.int32),
        key_value_seq_lengths=np.array([b - a for a, b in k_spans], np.int32))
    out = np.asarray(out)[..., :v_width]
    return np.concatenate([out[b, :qb - qa] for b, (qa, qb) in enumerate(q_spans)])


def _judged(v) -> bool:
    """Whether jax's result is the vector's at float32 (every row; a row with no key is 0)."""
    return compare(padded_attention(v), v.outputs["output"], "float32", v.tolerances["float32"]).ok


def _cases():
    out = []
    for v in SPEC.vectors:
        if v.function != "sdpa_varlen" or v.expect != "value" or v.deprecated:
            continue
        a = {**SPEC.functions[v.function].attributes, **v.attributes}
        if a.get("window") is not None or a.get("window_left") is not None \
                or a.get("window_right") is not None:
            continue  # windows: local_window_size is judged by test_windows_jax.py
        spans = zip(_spans(v.inputs["cu_seqlens_q"]), _spans(v.inputs["cu_seqlens_k"]))
        square = all(qb - qa == kb - ka for (qa, qb), (ka, kb) in spans)
        out.append(pytest.param(v, not a["causal"] or square, id=v.id))
    return out


CASES = _cases()


def test_both_kinds_are_judged():
    assert any(agrees for _, agrees in (c.values for c in CASES))
    assert any(not agrees for _, agrees in (c.values for c in CASES))


@pytest.mark.parametrize("v, agrees", CASES)
def test_seq_lengths_agree_exactly_where_top_left_is_bottom_right(v, agrees):
    assert _judged(v) == agrees
