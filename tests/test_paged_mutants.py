"""Planted bugs in paged_attention and paged_kv_append (forward and backward) that the
vectors must catch at every dtype."""

import numpy as np
import pytest
from attnspec.backends import _checks as check
from attnspec.backends.numpy import _core, attention

from .mutants import assert_rejected, gradient_rejections, mutant
from .test_mutants_grad import assert_gradient_bug_fails


def _plan(table, lens, n, page, t, causal, *, roll=0, shift=0, offset=0, tail=False,
          top_left=False):
    """A (possibly wrong) gather index (B, S) and mask (B, T, S): rows of the table rolled by
    ``roll``, blocks moved by ``shift``, offsets by ``offset``; ``tail`` keeps the partial
    last page to its end, ``top_left`` aligns the causal diagonal at the first key."""
    table = np.roll(table, roll, axis=0)
    j = np.arange(table.shape[1] * page)  # (S,)
    blocks = np.mod(table[:, j // page] + shift, n)  # kept in range: a bug in values only
    index = blocks * page + (j + offset) % page  # (B, S)
    limit = -(-lens // page) * page if tail else lens  # (B,)
    keep = np.broadcast_to(j < limit[:, None, None], (len(lens), t, len(j)))
    if causal:
        first = 0 if top_left else lens[:, None, None] - t
        keep = keep & (j <= first + np.arange(t)[None, :, None])
    return np.where(j < limit[:, None], index, 0), keep


def _paged(**bug):
    def broken(q, k_cache, v_cache, block_table, seq_lens, *, scale=None, causal=False):
        q, kc, vc, _, _ = check.paged_attention_plan(_core, q, k_cache, v_cache, block_table,
                                                     seq_lens, causal)
        index, keep = _plan(np.asarray(block_table), np.asarray(seq_lens), kc.shape[0],
                            kc.shape[1], q.shape[1], causal, **bug)
        out, _ = attention.sdpa(np.swapaxes(q, 1, 2), attention._paged_kv(kc, index),
                                attention._paged_kv(vc, index), keep[:, None], scale=scale,
                                num_kv_heads=kc.shape[2])
        return np.swapaxes(out, 1, 2)
    return broken


PAGED_BUGS = {
    "block_table_row_of_another_sequence": _paged(roll=1),
    "block_after_the_right_one": _paged(shift=1),
    "partial_last_page_read_to_its_end": _paged(tail=True),
    "position_in_page_off_by_one": _paged(offset=1),
    "causal_diagonal_top_left": _paged(top_left=True),
}


def _append(*, back=0, roll=0, same_lens=False):
    """paged_kv_append writing at seq_lens - back through rows rolled by roll; same_lens: the
    lengths returned unchanged."""
    def broken(k_cache, v_cache, block_table, seq_lens, k, v):
        lens = np.asarray(seq_lens)
        table = np.roll(np.asarray(block_table), roll, axis=0)
        kc, vc, _ = attention.paged_kv_append(k_cache, v_cache, table, lens - back, k, v)
        return kc, vc, lens if same_lens else lens + np.shape(k)[1]
    return broken


APPEND_BUGS = {
    "append_at_seq_len_minus_one": _append(back=1),
    "append_through_another_row": _append(roll=1),
    "lengths_not_advanced": _append(same_lens=True),
}


@pytest.mark.parametrize("function,bug", [("paged_attention", b) for b in sorted(PAGED_BUGS)]
                         + [("paged_kv_append", b) for b in sorted(APPEND_BUGS)])
def test_paged_mutant_is_rejected(function, bug):
    bugs = PAGED_BUGS if function == "paged_attention" else APPEND_BUGS
    with np.errstate(all="ignore"):
        assert_rejected(mutant(**{function: bugs[bug]}), function)


def _vjp(*, assign=False, shift=0):
    """paged_attention's backward with the slot gradients assigned (a slot read twice keeps
    one reader's), or scattered to the block after the right one."""
    def broken(cotangents, q, k_cache, v_cache, block_table, seq_lens, *, scale=None,
               causal=False):
        grads, p = attention.paged_attention_vjp(cotangents, q, k_cache, v_cache, block_table,
                                                 seq_lens, scale=scale, causal=causal)
        q, kc, vc, index, keep = check.paged_attention_plan(_core, q, k_cache, v_cache,
                                                            block_table, seq_lens, causal)
        g, _ = attention.sdpa_vjp(
            {"output": np.swapaxes(np.asarray(cotangents["output"], q.dtype), 1, 2)},
            np.swapaxes(q, 1, 2), attention._paged_kv(kc, index), attention._paged_kv(vc, index),
            keep[:, None], scale=scale, num_kv_heads=kc.shape[2])
        used = keep.any(axis=1)
        n, page = kc.shape[:2]
        where = (index[used] + shift * page) % (n * page)
        for name, cache in (("k_cache", kc), ("v_cache", vc)):
            flat = np.zeros((n * page,) + cache.shape[2:], dtype=q.dtype)
            rows = np.swapaxes(g[name[0]], 1, 2)[used]
            if assign:
                flat[where] = rows
            else:
                np.add.at(flat, where, rows)
            grads[name] = flat.reshape(cache.shape)
        return grads, p
    return broken


GRAD_BUGS = {
    "shared_slot_gradient_not_summed": _vjp(assign=True),
    "slot_gradient_to_the_next_block": _vjp(shift=1),
}


@pytest.mark.parametrize("bug", sorted(GRAD_BUGS))
def test_paged_attention_backward_bug_fails_at_every_dtype(bug):
    with np.errstate(all="ignore"):
        assert_gradient_bug_fails(mutant(paged_attention_vjp=GRAD_BUGS[bug]), "paged_attention")


def test_paged_attention_correct_backward_passes():
    assert gradient_rejections(mutant(), "paged_attention") == dict.fromkeys(
        ("float64", "float32", "float16", "bfloat16"), 0)


def test_paged_mutant_sketch_without_a_bug_passes():
    """The sketch the forward bugs are planted in passes every vector when no bug is planted
    (so each rejection above is the bug's, not the sketch's)."""
    from .mutants import rejections
    assert rejections(mutant(paged_attention=_paged()), "paged_attention") == dict.fromkeys(
        ("float64", "float32", "float16", "bfloat16"), 0)
    assert rejections(mutant(paged_kv_append=_append()), "paged_kv_append") == dict.fromkeys(
        ("float64", "float32", "float16", "bfloat16"), 0)
