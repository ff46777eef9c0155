"""Beam search (spec/components/beam_search.md), written once for every backend.

    K = num_beams, alpha = length_penalty, P = the prompt length (1 for the transformer: BOS)
    live beams: the prompt in slot 0 (score 0), slots 1..K-1 empty (score -inf) at first
    every step, for each row:
        lp = log_softmax(model(seq)[:, -1])        every slot, the prefix recomputed
        the K*V candidates (slot k, token j) score s_k + lp[k, j]; the first 2K in order of
            score, ties by the lower flat index k*V + j (lower slot, then lower id)
        n = the new length, g = n - P; a candidate ends when j == eos_id or n == max_len
        ending candidates of rank < K join the finished with score / g**alpha; the finished
            keep the best K (ties: the earlier, those already there before the new ones)
        the live beams: the first K candidates of the 2K that do not end, in order
        a row is done at max_len, or once it has K finished and (early_stopping True) or
            (best live score / h**alpha <= worst finished score), h = max_len - P when
            early_stopping == "never" and alpha > 0, else g
    ids (B, R, max_len): the best R finished, padded with pad_id; scores (B, R) theirs.

Every ordering is an arg-max (the lowest index among equal values), so the tie rule is the
ops' ``argmax`` rule. The log-probabilities are the spec's own log-softmax, from one
cross-entropy per row at its arg-max m: ``(x_j - x_m) - cross_entropy(x, m)`` (O(V)). A
batch of B rows holds its K*B beams beam-major (beam k of row b at k*B + b).
decoder_only and llama_decoder_only run through their key/value-cache steps (the prompt of
every beam once, then one token a step), every cache entry's rows gathered by the slot
each new beam extends (``_reorder``); the transformer's decoder recomputes every beam's
whole prefix (its encoder runs once).
"""

from __future__ import annotations

from attnspec.spec.errors import ConfigError

from .. import _checks as check
from .decoding import MODELS, Decoding
from .layers import NORMS

EARLY_STOPPING = (True, False, "never")
INF = float("inf")  # a finished or taken slot's score: -INF


def beam_attributes(num_beams, num_return_sequences, length_penalty, early_stopping):
    """(K, R, alpha, early_stopping) checked, or ConfigError naming the attribute."""
    k = check.integer("num_beams", num_beams, lo=1)
    r = check.integer("num_return_sequences", num_return_sequences, lo=1, hi=k)
    check.finite(length_penalty, "length_penalty")
    if isinstance(early_stopping, str):
        ok = early_stopping == "never"
    else:
        ok = type(early_stopping).__name__ in ("bool", "bool_")
    if not ok:
        raise ConfigError(f"early_stopping must be True, False or 'never', got "
                          f"{early_stopping!r}")
    return k, r, float(length_penalty), early_stopping if isinstance(early_stopping, str) \
        else bool(early_stopping)


class BeamSearch(Decoding):
    EXPORTS = ("beam_search",)

    def _log_probs(self, logits):
        """(N, V) -> (N, V): log_softmax over the vocabulary in O(V), from one cross-entropy
        at the row's arg-max m: log p_j = x_j - lse = (x_j - x_m) - (lse - x_m), where
        lse - x_m = cross_entropy(x, m). Relative to the maximum, the likely tokens' terms
        are small and exact (x_j - x_m is exact where x_j is within a factor 2 of x_m)."""
        ops = self.ops
        top = ops.argmax(logits, axis=1)  # (N,)
        lse_m = self.k.cross_entropy(logits, top, reduction="none")  # (N,) lse - x_m
        return (logits - ops.take_rows(logits, top)[:, None]) - lse_m[:, None]

    @staticmethod
    def _penalty_length(n: int, p0: int) -> int:
        """g: the generated length of a hypothesis of n tokens, EOS included."""
        return n - p0

    @staticmethod
    def _bound_length(g: int, longest: int, alpha: float, early_stopping) -> int:
        """h: the length the stopping test divides the best live score by."""
        return longest if (early_stopping == "never" and alpha > 0) else g

    def _best(self, scores, count: int):
        """The ``count`` arg-max picks of scores (B, M): [(index (B,), value (B,))], best
        first; equal values by the lower index."""
        ops = self.ops
        flat = ops.arange(0, scores.shape[1], like=scores)[None, :]
        taken = ops.falses(tuple(scores.shape), like=scores)  # (B, M)
        picks = []
        for _ in range(count):
            left = ops.where(taken, -INF, scores)
            idx = ops.argmax(left, axis=1)  # (B,)
            # only -inf left (empty slots): the first one not taken, not a taken one again
            idx = ops.where(ops.take_rows(left, idx) == -INF,
                            ops.argmax(~taken, axis=1), idx)
            picks.append((idx, ops.take_rows(scores, idx)))
            taken = taken | (flat == idx[:, None])
        return picks

    def _rank(self, cand, count: int):
        """The first ``count`` candidates (B, K*V) by score, ties by the lower flat index
        slot*V + token (the lower slot, then the lower id)."""
        return self._best(cand, count)

    def _ends(self, tok, n: int, eos_id: int, max_len: int):
        """Whether a candidate ends its hypothesis: EOS, or the length reaches max_len."""
        if n == max_len:
            return tok == tok  # every candidate
        return tok == eos_id

    @staticmethod
    def _eligible(cands: list, k: int) -> list:
        """The candidates that may finish: ranks 0..K-1 of the 2K (EOS counted against the
        width)."""
        return cands[:k]

    @staticmethod
    def _penalised(score, g: int, alpha: float):
        """A finished hypothesis's score: its sum of log-probs / g**alpha."""
        return score / (g ** alpha)

    def _initial(self, zero, k: int):
        """(B, K) live scores before the first step: slot 0 is the prompt (0), the others
        empty (-inf), so the first step expands one beam."""
        ops = self.ops
        return ops.where(ops.arange(0, k, like=zero)[None, :] == 0, zero, -INF)

    def _finish(self, fin, cands, open_, g: int, alpha: float, k: int):
        """Merge the ending candidates of rank < K into the finished (B, K) and keep the K
        best (ties: the earlier)."""
        ops = self.ops
        scores, seqs, filled = fin
        news, new_seqs, new_filled = [], [], []
        for val, seq, ends in self._eligible(cands, k):
            ok = ends & open_
            news.append(ops.where(ok, self._penalised(val, g, alpha), -INF))
            new_seqs.append(seq)
            new_filled.append(ok)
        pool = ops.concat([scores, ops.stack(news, axis=1)], axis=1)  # (B, 2K)
        pool_seqs = ops.concat([seqs, ops.stack(new_seqs, axis=1)], axis=1)  # (B, 2K, max_len)
        pool_filled = ops.concat([filled, ops.stack(new_filled, axis=1)], axis=1)
        picks = self._best(pool, k)
        return (ops.stack([v for _, v in picks], axis=1),
                ops.stack([ops.take_rows(pool_seqs, i) for i, _ in picks], axis=1),
                ops.stack([ops.take_rows(pool_filled, i) for i, _ in picks], axis=1))

    def _live(self, cands, k: int):
        """The first K candidates that do not end, in rank order: (scores (B, K), their
        sequences [(B, n)] per slot, their ranks among the 2K [(B,)] per slot)."""
        ops = self.ops
        going = ops.stack([ops.where(ends, -INF, val) for val, _, ends in cands], axis=1)
        seqs = ops.stack([seq for _, seq, _ in cands], axis=1)  # (B, 2K, max_len)
        picks = self._best(going, k)
        return (ops.stack([v for _, v in picks], axis=1),
                [ops.take_rows(seqs, i) for i, _ in picks], [i for i, _ in picks])

    def _reorder(self, cache, parents, b: int):
        """The cache rows of the new live beams: beam-major row i*B + b of the result is row
        parents[i][b]*B + b of ``cache`` (every entry but "length", gathered by slot)."""
        ops = self.ops
        k = len(parents)
        out = {}
        for key, c in cache.items():
            if key == "length":
                out[key] = c
                continue
            slots = ops.stack([c[i * b:(i + 1) * b] for i in range(k)], axis=1)  # (B, K, ...)
            out[key] = ops.concat([ops.take_rows(slots, par) for par in parents], axis=0)
        return out

    def _done(self, live, fin, g, longest, alpha, early_stopping, k):
        """(B,) rows with K finished that stop: early_stopping True, or no live beam can
        beat the worst finished by the bound."""
        ops = self.ops
        scores, _, filled = fin
        full = ~ops.any_(~filled, axis=1)  # (B,) K finished
        if early_stopping is True:
            return full
        h = self._bound_length(g, longest, alpha, early_stopping)
        return full & (live[:, 0] / (h ** alpha) <= scores[:, k - 1])

    def beam_search(self, prompt=None, src_ids=None, *, model, bos_id, eos_id, pad_id, max_len,
                    num_beams, num_layers, num_heads, norm, eps=1e-5, activation,
                    tie_embeddings=False, length_penalty=1.0, early_stopping=False,
                    num_return_sequences=1, num_kv_heads=None, rope_base=10000.0, window=None,
                    params):
        """ids (B, R, max_len) and scores (B, R): the R best of the K hypotheses beam search
        finishes per row (module docstring; spec/components/beam_search.md)."""
        ops = self.ops
        check.choice("model", model, MODELS)
        p = check.params_of(params)
        bos_id, eos_id = check.integer("bos_id", bos_id), check.integer("eos_id", eos_id)
        pad_id = check.integer("pad_id", pad_id)
        check.choice("norm", norm, NORMS)
        k, r, alpha, early_stopping = beam_attributes(num_beams, num_return_sequences,
                                                      length_penalty, early_stopping)
        tie = self._tie(model, tie_embeddings)
        cfg = dict(num_layers=num_layers, num_heads=num_heads, norm=norm, eps=eps,
                   activation=activation)
        llama = self._llama_config(model, norm, activation, num_kv_heads, rope_base, window)
        if model == "transformer":
            src_ids, max_len = self._source(prompt, src_ids, bos_id, eos_id, pad_id, max_len, p)
            vocab = check.shape(p.require("tgt_embed.table", (None, None)))[0]
            memory, m_src = self.encode(src_ids, pad_id, cfg, p)
            memory, m_src = ops.concat([memory] * k, axis=0), ops.concat([m_src] * k, axis=0)
            seq = ops.full((src_ids.shape[0], 1), bos_id, like=src_ids)  # (B, 1)

            def step(beams, tok, parents):  # the decoder on every beam's whole prefix
                return self.decode(beams, memory, m_src, pad_id, cfg, tie, p)[:, -1]
        else:
            seq, max_len = self._prompt(prompt, src_ids, eos_id, pad_id, max_len, p, model)
            vocab = check.shape(p.require("embed.table", (None, None)))[0]
            b = seq.shape[0]
            step = self._cached_beam_step(
                self._llama_steps if model == "llama_decoder_only" else self._decoder_only_steps,
                pad_id, {**llama, "num_layers": num_layers, "num_heads": num_heads, "eps": eps}
                if model == "llama_decoder_only" else {**cfg, "tie_embeddings": tie}, p, b)
        seq = ops.int64(seq)
        b, p0 = seq.shape
        if max_len <= p0:
            raise ConfigError(f"max_len={max_len} must exceed the prompt length {p0} (beam "
                              f"search generates at least one token)")
        if 2 * k > vocab:
            raise ConfigError(f"num_beams={k}: the 2*num_beams = {2 * k} candidates of a step "
                              f"need a vocabulary of at least {2 * k} tokens, got {vocab}")
        return self._search(seq, step, b, p0, k, r, vocab, eos_id, pad_id, max_len, alpha,
                            early_stopping)

    def _cached_beam_step(self, steps_of, pad_id, cfg: dict, p, b: int):
        """step(beams, tok, parents) -> next-token logits (K*B, V) through the model's cache:
        the prompt of every beam once, then each step the chosen beams' cache rows gathered
        (``_reorder``) and extended by their new token."""
        state = {}

        def step(beams, tok, parents):
            if tok is None:
                state["steps"] = steps_of(beams, pad_id, cfg, p)
                return next(state["steps"])
            return state["steps"].send((tok, lambda c: self._reorder(c, parents, b)))
        return step

    def _search(self, seq, step, b, p0, k, r, vocab, eos_id, pad_id, max_len, alpha,
                early_stopping):
        ops = self.ops
        beams = ops.concat([seq] * k, axis=0)  # (K*B, P), beam-major
        live = None  # (B, K) scores, known once the logits' dtype is
        fin = None
        done = ops.falses((b,), like=seq)
        n = p0
        tok = parents = None
        while n < max_len and not ops.known_all(done):
            lp = self._log_probs(step(beams, tok, parents))  # (K*B, V)
            if live is None:
                zero = ops.zeros((b, k), like=lp)
                live = self._initial(zero, k)
                fin = (zero - INF, ops.full((b, k, max_len), pad_id, like=seq),
                       ops.falses((b, k), like=seq))
            cand = ops.concat([live[:, i:i + 1] + lp[i * b:(i + 1) * b] for i in range(k)],
                              axis=1)  # (B, K*V), flat index slot*V + token
            slots = ops.stack([beams[i * b:(i + 1) * b] for i in range(k)], axis=1)  # (B,K,n)
            n += 1
            rest = ops.full((b, max_len - n), pad_id, like=seq)
            cands, origin = [], []
            for idx, val in self._rank(cand, 2 * k):
                tok = idx % vocab
                origin.append(idx // vocab)
                grown = ops.concat([ops.take_rows(slots, idx // vocab), tok[:, None]], axis=1)
                cands.append((val, ops.concat([grown, rest], axis=1),
                              self._ends(tok, n, eos_id, max_len)))
            g = self._penalty_length(n, p0)
            fin = self._finish(fin, cands, ~done, g, alpha, k)
            if n == max_len:
                break
            live, grown, ranks = self._live(cands, k)
            origin = ops.stack(origin, axis=1)  # (B, 2K) the slot each candidate extends
            parents = [ops.take_rows(origin, i) for i in ranks]  # (B,) per new slot
            beams = ops.concat([s[:, :n] for s in grown], axis=0)  # (K*B, n)
            tok = beams[:, n - 1]  # (K*B,) the token each new beam appended
            done = done | self._done(live, fin, g, max_len - p0, alpha, early_stopping, k)
        scores, seqs, _ = fin
        return seqs[:, :r], scores[:, :r]
