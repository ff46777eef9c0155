"""Planted bugs in sdpa_varlen that its value vectors must catch at every dtype: the wrong
sequence length, a boundary one row off, causal aligned top-left, a sequence attending into
its neighbour. Each is a packed attention whose per-sequence key span or mask is wrong."""

import numpy as np
import pytest
from attnspec.backends.composite.varlen import local_band
from attnspec.backends.numpy import attention

from .mutants import assert_rejected, mutant


def _packed(key_span, top_left=False):
    """sdpa_varlen with key_span(b, ck) -> (start, stop) for sequence b's keys and, with
    top_left, the causal mask aligned top-left (j <= i)."""
    def broken(q, k, v, cu_seqlens_q, cu_seqlens_k, *, max_seqlen_q, max_seqlen_k, scale=None,
               causal=False, window=None, window_left=None, window_right=None):
        band = local_band(window_left, window_right, causal, window)
        cq, ck = [int(x) for x in cu_seqlens_q], [int(x) for x in cu_seqlens_k]
        out = np.zeros(q.shape[:2] + v.shape[2:], dtype=q.dtype)  # (total_q, H, V)
        g = q.shape[1] // k.shape[1]
        for b in range(len(cq) - 1):
            a, e = cq[b], cq[b + 1]
            c, d = key_span(b, ck)
            c, d = max(0, c), min(max(c, d), k.shape[0])
            t, s = e - a, d - c
            mask = None
            if band is not None:
                mask = attention.local_window_mask(t=t, s=s, left=band[0], right=band[1])
            elif window is not None:
                mask = attention.sliding_window_mask(t=t, s=s, window=window)
            elif causal:
                mask = np.arange(s)[None, :] <= np.arange(t)[:, None] + (0 if top_left else s - t)
            kb, vb = (np.repeat(x[c:d].transpose(1, 0, 2), g, axis=0) for x in (k, v))
            o, _ = attention.sdpa(q[a:e].transpose(1, 0, 2), kb, vb, mask, scale=scale)
            out[a:e] = o.transpose(1, 0, 2)
        return out
    return broken


CORRECT = _packed(lambda b, ck: (ck[b], ck[b + 1]))
VARLEN_BUGS = {
    "previous_sequence_key_length": _packed(
        lambda b, ck: (ck[b], ck[b] + (ck[b] - ck[b - 1] if b else ck[1]))),
    "boundary_one_off": _packed(lambda b, ck: (ck[b], ck[b + 1] - 1 if ck[b + 1] > ck[b] else ck[b])),
    "attends_into_neighbour": _packed(lambda b, ck: (ck[b] - 1, ck[b + 1])),
    "causal_top_left": _packed(lambda b, ck: (ck[b], ck[b + 1]), top_left=True),
}


@pytest.mark.parametrize("bug", sorted(VARLEN_BUGS))
def test_sdpa_varlen_mutant_is_rejected(bug):
    assert_rejected(mutant(sdpa_varlen=VARLEN_BUGS[bug]), "sdpa_varlen")


def test_the_mutants_harness_passes_a_correct_packed_attention():
    """The per-sequence sketch with the right spans passes every vector: the bugs above
    fail for their span or mask, not for the sketch."""
    from .mutants import rejections

    fails = rejections(mutant(sdpa_varlen=CORRECT), "sdpa_varlen")
    assert not any(fails.values()), fails
