"""Greedy decoding: extend each row by the arg-max token until EOS or max_len.

    seq_0 = prompt (decoder_only, llama_decoder_only)  or  [bos_id] (transformer;
            memory = Encoder(src) once)
    repeat while len(seq) < max_len and some row is unfinished:
        l = model(seq)[:, -1, :]                  the full prefix recomputed every step
        next_b = min { j : l_bj = max_k l_bk }     (ties: the lowest id)
        a finished row appends pad_id instead; a row is finished once it has appended eos_id
    the result is padded with pad_id to (B, max_len)

No key/value cache here: the oracle recomputes the prefix, which is the definition a
cached implementation must reproduce.
"""

import hashlib
import pickle

import numpy as np

from .core import mpa
from .decoder_only import decoder_only
from .llama import llama_decoder_only
from .transformer import decode, encode

_MEMO: dict = {}


def _key(args) -> str:
    return hashlib.sha256(pickle.dumps(args, protocol=4)).hexdigest()


def run(prompt=None, src_ids=None, model="decoder_only", bos_id=1, eos_id=2, pad_id=0,
        max_len=8, num_layers=1, num_heads=1, norm="pre", eps=1e-5, activation="gelu",
        tie_embeddings=False, params=None, accept=None, **llama):
    """(ids, [(top1, top2) per generated token of an unfinished row]) or None when
    ``accept(top1, top2, token)`` rejects a step (then decoding stops at once)."""
    if model == "transformer":
        b = len(src_ids)
        seq = [[int(bos_id)] for _ in range(b)]
        memory, m_src, _ = encode(np.asarray(src_ids), pad_id, num_layers, num_heads, norm, eps,
                                  activation, params)
        memory = mpa(memory)

        def last_logits(ids):
            logits, _ = decode(ids, memory, m_src, pad_id, num_layers, num_heads, norm, eps,
                               activation, tie_embeddings, params)
            return logits[:, -1, :]
    elif model == "llama_decoder_only":  # llama: num_kv_heads, rope_base, window
        seq = [[int(t) for t in row] for row in np.asarray(prompt)]
        b = len(seq)

        def last_logits(ids):
            return llama_decoder_only(ids, pad_id=pad_id, num_layers=num_layers,
                                      num_heads=num_heads, eps=eps, params=params,
                                      **llama)["logits"][:, -1, :]
    else:
        seq = [[int(t) for t in row] for row in np.asarray(prompt)]
        b = len(seq)

        def last_logits(ids):
            return decoder_only(ids, pad_id=pad_id, num_layers=num_layers, num_heads=num_heads,
                                norm=norm, eps=eps, activation=activation, params=params,
                                tie_embeddings=tie_embeddings)["logits"][:, -1, :]
    done = [False] * b
    tops = []
    while len(seq[0]) < max_len and not all(done):
        logits = last_logits(np.array(seq, dtype=np.int64))
        for r in range(b):
            if done[r]:
                seq[r].append(int(pad_id))
                continue
            row = list(logits[r])
            best = max(row)
            nxt = row.index(best)  # the first (lowest) id reaching the maximum
            second = max(v for j, v in enumerate(row) if j != nxt)
            if accept is not None and not accept(best, second, nxt):
                return None
            tops.append((best, second))
            seq[r].append(nxt)
            done[r] = nxt == int(eos_id)
    for row in seq:
        row.extend([int(pad_id)] * (max_len - len(row)))
    return np.array(seq, dtype=np.int64), tops


def greedy_decode(prompt=None, src_ids=None, model="decoder_only", bos_id=1, eos_id=2, pad_id=0,
                  max_len=8, num_layers=1, num_heads=1, norm="pre", eps=1e-5,
                  activation="gelu", tie_embeddings=False, num_kv_heads=None,
                  rope_base=10000.0, window=None, params=None):
    kwargs = dict(prompt=prompt, src_ids=src_ids, model=model, bos_id=bos_id, eos_id=eos_id,
                  pad_id=pad_id, max_len=max_len, num_layers=num_layers, num_heads=num_heads,
                  norm=norm, eps=eps, activation=activation, tie_embeddings=tie_embeddings,
                  params=params)
    if model == "llama_decoder_only":
        kwargs.update(num_kv_heads=num_kv_heads, rope_base=rope_base, window=window)
    key = _key(kwargs)
    if key not in _MEMO:
        _MEMO[key] = run(**kwargs)
    return {"ids": _MEMO[key][0]}


def remember(result, **kwargs):
    """Store a run's result so that the generator's oracle call does not repeat it."""
    _MEMO[_key(kwargs)] = result
