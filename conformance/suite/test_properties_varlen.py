"""Invariants of sdpa_varlen (hypothesis).

Each test name is the invariant; each uses only ``ops`` so it runs on any backend.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

pytestmark = pytest.mark.properties

# Each example is B sequences of new shapes, one sdpa call each (a compiling backend compiles
# per shape): a quarter of the profile's examples, as test_differential.py does.
_PROFILE = settings.default
_FEWER = settings(_PROFILE, max_examples=max(3, _PROFILE.max_examples // 4))

# multiples of 2**-6 in [-2, 2]: exact at every dtype, so both sides start equal
exact = st.integers(-128, 128).map(lambda i: i * 2.0**-6)


def arrays(shape):
    return hnp.arrays(np.float64, shape, elements=exact)


@st.composite
def packed(draw):
    """q (total_q, H, K), k, v (total_k, H_kv, .), lengths per sequence (zeros allowed),
    and the attributes (causal or a window)."""
    b = draw(st.integers(1, 4))
    tq = draw(st.lists(st.integers(0, 4), min_size=b, max_size=b))
    tk = draw(st.lists(st.integers(0, 4), min_size=b, max_size=b))
    h_kv, g = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    kw, vw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    q = draw(arrays((sum(tq), h_kv * g, kw)))
    k, v = draw(arrays((sum(tk), h_kv, kw))), draw(arrays((sum(tk), h_kv, vw)))
    attrs = draw(st.sampled_from([{}, {"causal": True}, {"window": 2}]))
    return q, k, v, tq, tk, attrs


def offsets(lengths):
    return np.cumsum([0, *lengths]).astype(np.int64)


def varlen(ops, q, k, v, tq, tk, attrs):
    return ops.sdpa_varlen(q=q, k=k, v=v, cu_seqlens_q=offsets(tq), cu_seqlens_k=offsets(tk),
                           max_seqlen_q=max(tq), max_seqlen_k=max(tk), **attrs)


def _mask(t, s, attrs):
    """The per-sequence mask, bottom-right aligned, built here (not by the backend)."""
    p = np.arange(t)[:, None] + (s - t)  # (T, 1) positions among the keys
    j = np.arange(s)[None, :]  # (1, S)
    if "window" in attrs:
        return (j <= p) & (j > p - attrs["window"])
    return j <= p if attrs.get("causal") else None


@_FEWER
@given(x=packed())
def test_packed_attention_equals_sdpa_run_on_each_sequence(ops, x):
    q, k, v, tq, tk, attrs = x
    out = varlen(ops, q, k, v, tq, tk, attrs)
    cq, ck = offsets(tq), offsets(tk)
    h, h_kv = q.shape[1], k.shape[1]
    for b in range(len(tq)):
        if tq[b] == 0:
            continue
        qb, kb, vb = (x[a:e].transpose(1, 0, 2) for x, (a, e) in
                      ((q, cq[b:b + 2]), (k, ck[b:b + 2]), (v, ck[b:b + 2])))
        mask = _mask(tq[b], tk[b], attrs)
        kw = {} if mask is None else {"mask": mask}
        want, _ = ops.sdpa(q=qb, k=kb, v=vb, **kw, num_kv_heads=None if h == h_kv else h_kv)
        ops.assert_close(out[cq[b]:cq[b + 1]], want.transpose(1, 0, 2), scale=4,
                         what=f"sequence {b}")


@_FEWER
@given(x=packed(), data=st.data())
def test_permuting_the_sequences_permutes_the_output_rows(ops, x, data):
    q, k, v, tq, tk, attrs = x
    order = data.draw(st.permutations(range(len(tq))))
    cq, ck = offsets(tq), offsets(tk)

    def gather(a, cu):
        parts = [a[cu[b]:cu[b + 1]] for b in order]
        return np.concatenate(parts) if parts else a

    out = varlen(ops, q, k, v, tq, tk, attrs)
    permuted = varlen(ops, gather(q, cq), gather(k, ck), gather(v, ck),
                      [tq[b] for b in order], [tk[b] for b in order], attrs)
    ops.assert_close(permuted, gather(out, cq), scale=4, what="permuted output")
