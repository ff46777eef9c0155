"""Beam search (spec/components/beam_search.md), one batch row at a time, in mpmath.

    K = num_beams, alpha = length_penalty, P = the prompt length (1 for the transformer: BOS)
    beams = [(prompt, 0)]                       only one live beam at the first step
    finished = []                               at most K (sequence, penalised score)
    repeat:
        lp_k = log_softmax(model(seq_k)[-1])    every live beam k, the prefix recomputed
        candidates (k, j) with score s_k + lp_k[j], ordered by score descending, ties by
            the lower beam slot k, then the lower token id j; top = the first 2K
        n = len(seq) + 1, g = n - P             (the generated length, EOS included)
        a candidate ends when j == eos_id or n == max_len
        ending candidates of rank < K join finished with score / g**alpha; finished keeps
            the best K (ties: the earlier; the ones already there, then by rank)
        beams = the first K candidates of top that do not end (in rank order)
        the row is done when n == max_len, or
            early_stopping True:     finished holds K
            otherwise:               finished holds K and best(beams) / h**alpha <= worst(finished)
                                     h = max_len - P if early_stopping == "never" and alpha > 0,
                                     else g
    ids = the best num_return_sequences finished, padded with pad_id; scores their scores
"""

import hashlib
import pickle

import mpmath
import numpy as np

from .core import mpa
from .decoder_only import decoder_only
from .llama import llama_decoder_only
from .transformer import decode, encode

_MEMO: dict = {}


def _key(args) -> str:
    return hashlib.sha256(pickle.dumps(args, protocol=4)).hexdigest()


def log_softmax(row) -> list:
    """x_j - log sum_i exp(x_i)."""
    lse = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in row))
    return [v - lse for v in row]


def _row_models(prompt, src_ids, model, bos_id, pad_id, num_layers, num_heads, norm, eps,
                activation, tie_embeddings, params, llama):
    """Per batch row b: (the first sequence, logits(list of sequences) -> last logits)."""
    if model == "transformer":
        src = np.asarray(src_ids)
        memory, m_src, _ = encode(src, pad_id, num_layers, num_heads, norm, eps, activation,
                                  params)
        memory = mpa(memory)

        def row(b):
            def last(seqs):
                n = len(seqs)
                mem = np.repeat(memory[b:b + 1], n, axis=0)
                mask = np.repeat(m_src[b:b + 1], n, axis=0)
                logits, _ = decode(np.array(seqs, dtype=np.int64), mem, mask, pad_id,
                                   num_layers, num_heads, norm, eps, activation,
                                   tie_embeddings, params)
                return logits[:, -1, :]
            return [int(bos_id)], last
        return [row(b) for b in range(len(src))]

    def last(seqs):
        ids = np.array(seqs, dtype=np.int64)
        if model == "llama_decoder_only":
            out = llama_decoder_only(ids, pad_id=pad_id, num_layers=num_layers,
                                     num_heads=num_heads, eps=eps, params=params, **llama)
        else:
            out = decoder_only(ids, pad_id=pad_id, num_layers=num_layers, num_heads=num_heads,
                               norm=norm, eps=eps, activation=activation, params=params,
                               tie_embeddings=tie_embeddings)
        return out["logits"][:, -1, :]
    return [([int(t) for t in row], last) for row in np.asarray(prompt)]


def _search_row(first, last, eos_id, max_len, k, alpha, early_stopping, note):
    """(finished [(sequence, score, g**-alpha)] best first, steps) of one row;
    ``note(kind, gap, scale)`` is told every comparison that decides the result (gap > 0: it
    went one way by that much; scale: the factor by which the length penalty multiplied the
    scores compared, so an error of e in a sum of log-probs moves them by e * scale)."""
    p = len(first)
    beams = [(list(first), mpmath.mpf(0))]
    finished: list = []
    n = p
    while True:
        logits = last([seq for seq, _ in beams])
        cands = []
        for slot, (_, s) in enumerate(beams):
            lp = log_softmax(list(logits[slot]))
            cands.extend((s + v, slot, j) for j, v in enumerate(lp))
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        top = cands[:2 * k]
        n += 1
        g = n - p
        ends = [j == eos_id or n == max_len for _, _, j in top]
        # which ending candidates are within the top K (EOS counted against the width)
        if n < max_len:
            for r, (c, _, j) in enumerate(cands):
                if j == eos_id:
                    note("eos-rank", c - cands[k][0] if r < k else cands[k - 1][0] - c, 1)
        else:  # every candidate ends: the top K finish, rank K does not
            note("length-cut", cands[k - 1][0] - cands[k][0], 1)
        scale = mpmath.mpf(g) ** -alpha  # what a score's error is multiplied by
        new = [(beams[slot][0] + [j], c * scale, scale)
               for (c, slot, j), e in list(zip(top, ends))[:k] if e]
        merged = sorted(finished + new, key=lambda h: -h[1])  # stable: earlier first on ties
        if len(merged) > k:
            note("finished-cut", merged[k - 1][1] - merged[k][1],
                 max(merged[k - 1][2], merged[k][2]))
        finished = merged[:k]
        # the live beams: the first K candidates that do not end (all candidates, in order)
        going = [c for c in cands if not (c[2] == eos_id or n == max_len)]
        beams, cut = [(beams[slot][0] + [j], c) for c, slot, j in going[:k]], going[k:k + 1]
        if n == max_len or _done(beams, finished, k, g, max_len - p, alpha, early_stopping,
                                 note):
            return finished, n - p
        if cut:  # the live beams of the next step
            note("beam-cut", beams[-1][1] - cut[0][0], 1)


def _done(beams, finished, k, g, longest, alpha, early_stopping, note) -> bool:
    """Whether a row is done (before max_len): K finished and, unless early_stopping is
    True, no live beam can still beat the worst of them by the bound."""
    if len(finished) < k:
        return False
    if early_stopping is True:
        return True
    h = longest if (early_stopping == "never" and alpha > 0) else g
    best = beams[0][1] / mpmath.mpf(h) ** alpha
    note("stop", abs(best - finished[-1][1]), max(mpmath.mpf(h) ** -alpha, finished[-1][2]))
    return best <= finished[-1][1]


def run(prompt=None, src_ids=None, model="decoder_only", bos_id=1, eos_id=2, pad_id=0,
        max_len=8, num_beams=2, num_layers=1, num_heads=1, norm="pre", eps=1e-5,
        activation="gelu", tie_embeddings=False, length_penalty=1.0, early_stopping=False,
        num_return_sequences=1, params=None, note=None, **llama):
    """(ids (B, R, max_len), scores (B, R) of mpf); ``note(kind, gap, scale)`` as
    _search_row."""
    rows = _row_models(prompt, src_ids, model, bos_id, pad_id, num_layers, num_heads, norm,
                       eps, activation, tie_embeddings, params, llama)
    note = note or (lambda kind, gap, scale=1: None)
    alpha = mpmath.mpf(length_penalty)
    ids, scores = [], []
    for first, last in rows:
        finished, _ = _search_row(first, last, int(eos_id), max_len, num_beams, alpha,
                                  early_stopping, note)
        for a, b in zip(finished, finished[1:num_return_sequences + 1]):
            note("order", a[1] - b[1], max(a[2], b[2]))  # order and cut of the returned
        best = finished[:num_return_sequences]
        ids.append([seq + [int(pad_id)] * (max_len - len(seq)) for seq, _, _ in best])
        scores.append([s for _, s, _ in best])
    out_scores = np.empty((len(scores), num_return_sequences), dtype=object)
    for b, row in enumerate(scores):
        out_scores[b, :] = row
    return np.array(ids, dtype=np.int64), out_scores


def canonical(prompt=None, src_ids=None, model="decoder_only", bos_id=1, eos_id=2, pad_id=0,
              max_len=8, num_beams=2, num_layers=1, num_heads=1, norm="pre", eps=1e-5,
              activation="gelu", tie_embeddings=False, length_penalty=1.0,
              early_stopping=False, num_return_sequences=1, num_kv_heads=None,
              rope_base=10000.0, window=None, params=None) -> dict:
    """Every argument of run(), in one order (the memo's key)."""
    kwargs = dict(prompt=prompt, src_ids=src_ids, model=model, bos_id=bos_id, eos_id=eos_id,
                  pad_id=pad_id, max_len=max_len, num_beams=num_beams, num_layers=num_layers,
                  num_heads=num_heads, norm=norm, eps=eps, activation=activation,
                  tie_embeddings=tie_embeddings, length_penalty=length_penalty,
                  early_stopping=early_stopping, num_return_sequences=num_return_sequences,
                  params=params)
    if model == "llama_decoder_only":
        kwargs.update(num_kv_heads=num_kv_heads, rope_base=rope_base, window=window)
    kwargs["prompt"] = None if prompt is None else np.asarray(prompt, dtype=np.int64)
    kwargs["src_ids"] = None if src_ids is None else np.asarray(src_ids, dtype=np.int64)
    kwargs["params"] = {k: np.asarray(v, dtype=np.float64) for k, v in sorted(params.items())}
    return kwargs


def beam_search(**kwargs):
    kwargs = canonical(**kwargs)
    key = _key(kwargs)
    if key not in _MEMO:
        _MEMO[key] = run(**kwargs)
    ids, scores = _MEMO[key]
    return {"ids": ids, "scores": scores}


def remember(result, **kwargs):
    """Store a run's result so that the generator's oracle call does not repeat it."""
    _MEMO[_key(canonical(**kwargs))] = result
