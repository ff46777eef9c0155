"""The composite tape (backends/composite/tape.py) against torch autograd: the NumPy
backend's VJP of a composite, built from its kernels' hand-written VJPs, equals
``torch.autograd.grad`` through the same composite over the torch kernels, at float64.
Skipped (only) where torch is not installed: the ``numpy`` tox environment."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnspec.backends.numpy import NumpyBackend  # noqa: E402
from attnspec.backends.torch import TorchBackend  # noqa: E402
from attnspec.spec.cases._build import Rng  # noqa: E402


def _ffn_ln(r, d, f, prefix="", norm="norm"):
    return {f"{prefix}ffn.w1": r.uniform((d, f)), f"{prefix}ffn.b1": r.uniform((f,)),
            f"{prefix}ffn.w2": r.uniform((f, d)), f"{prefix}ffn.b2": r.uniform((d,)),
            f"{prefix}{norm}.gamma": 1.0 + r.uniform((d,), -0.5, 0.5),
            f"{prefix}{norm}.beta": r.uniform((d,))}


def _residual(position, activation):
    r = Rng(f"test/tape/residual/{position}/{activation}")
    call = {"x": r.uniform((2, 3, 4)), "position": position, "activation": activation,
            "params": _ffn_ln(r, 4, 6)}
    return "residual", "feedforward", call, {"y": r.uniform((2, 3, 4))}


def _layers(name, norm):
    from attnspec.spec.cases import decoder_only, encoder_layer, encoder_only, transformer
    from attnspec.spec.cases.encoder_layer import (
        dec_layer_params,
        enc_layer_params,
        key_padding,
        stack_params,
    )

    r = Rng(f"test/tape/{name}/{norm}")
    x, mem = r.uniform((2, 3, 4)), r.uniform((2, 5, 4))
    attrs = {"num_heads": 2, "norm": norm}
    ids = np.array([[1, 4, 5, 0], [2, 3, 0, 0]])
    if name == "encoder_layer":
        call = {"x": x, "mask": key_padding([3, 2], 3), **attrs,
                "params": enc_layer_params(r, 4, 6)}
        return name, "layers", call, {"y": r.uniform((2, 3, 4))}
    if name == "decoder_layer":
        call = {"x": x, "memory": mem, "self_mask": encoder_layer.causal(3),
                "memory_mask": key_padding([5, 3], 5), **attrs,
                "params": dec_layer_params(r, 4, 6)}
        return name, "layers", call, {"y": r.uniform((2, 3, 4))}
    if name == "decoder":
        call = {"x": x, "memory": mem, "num_layers": 2, **attrs,
                "params": stack_params(r, dec_layer_params, 2, 4, 6, norm == "pre")}
        return name, "layers", call, {"y": r.uniform((2, 3, 4))}
    if name == "encoder_only":
        call = {"ids": ids, "pad_id": 0, "num_layers": 2, **attrs,
                "params": encoder_only.params(r, 2, 4, 6, 7, norm=norm)}
        return name, "models", call, {"hidden": r.uniform((2, 4, 4)),
                                      "logits": r.uniform((2, 4, 7))}
    if name == "decoder_only":
        call = {"ids": ids, "pad_id": 0, "num_layers": 2, **attrs,
                "params": decoder_only.params(r, 2, 4, 6, 7, norm=norm)}
        return name, "models", call, {"logits": r.uniform((2, 4, 7))}
    tied = name == "transformer-tied"
    call = {"src_ids": ids, "tgt_ids": ids[:, :3], "pad_id": 0, "num_layers": 1, **attrs,
            "tie_embeddings": tied,
            "params": transformer.transformer_params(r, 1, 4, 6, 7, norm=norm, tied=tied)}
    return "transformer", "models", call, {"logits": r.uniform((2, 3, 7))}


def _seq2seq(kind):
    from attnspec.spec.cases.seq2seq_attention import s2s_params

    r = Rng(f"test/tape/seq2seq/{kind}")
    call = {"src_ids": np.array([[3, 5, 4, 6], [7, 3, 0, 0]]),
            "tgt_ids": np.array([[1, 4, 5], [1, 6, 3]]), "attention": kind, "pad_id": 0,
            "params": s2s_params(r, kind, src_vocab=8, vocab=8, e=4, h=4, a=4)}
    return "seq2seq_attention", "rnn", call, {"logits": r.uniform((2, 3, 8))}


def _llama(name):
    """GQA with a window, a RoPE offset and a padding mask whose row 1 hides key 0 (query 0
    there sees no key); the model: two MQA layers, id 4 repeated, row 1 padded."""
    from attnspec.spec.cases.llama import layer_params, model_params

    r = Rng(f"test/tape/{name}")
    if name == "llama_layer":
        mask = np.ones((2, 1, 1, 4), dtype=bool)
        mask[1, 0, 0, 0] = False
        call = {"x": r.uniform((2, 4, 8)), "mask": mask, "num_heads": 4, "num_kv_heads": 2,
                "window": 3, "offset": 2, "params": layer_params(r, 8, 4, 2, 2, 6)}
        return name, "layers", call, {"y": r.uniform((2, 4, 8))}
    call = {"ids": np.array([[1, 4, 5, 4], [1, 6, 4, 0]]), "pad_id": 0, "num_layers": 2,
            "num_heads": 2, "num_kv_heads": 1, "params": model_params(r, 2, 8, 2, 1, 6, 7)}
    return name, "models", call, {"logits": r.uniform((2, 4, 7))}


CASES = {f"residual-{pos}-{act}": (_residual, pos, act)
         for pos in ("post", "pre") for act in ("relu", "gelu")}
CASES.update({f"{name}-{norm}": (_layers, name, norm)
              for name in ("encoder_layer", "decoder_layer", "decoder", "encoder_only",
                           "decoder_only", "transformer", "transformer-tied")
              for norm in ("post", "pre")})
CASES.update({name: (_llama, name) for name in ("llama_layer", "llama_decoder_only")})


def _zoo(name):
    """llama_layer with Qwen2's q, k, v biases; parallel_layer with one and two norms (GQA,
    a RoPE offset, row 1's query 0 seeing no key)."""
    from attnspec.spec.cases import llama, parallel_layer

    r = Rng(f"test/tape/{name}")
    mask = np.ones((2, 1, 1, 4), dtype=bool)
    mask[1, 0, 0, 0] = False
    call = {"x": r.uniform((2, 4, 8)), "mask": mask, "num_heads": 4, "num_kv_heads": 2,
            "offset": 2}
    if name == "llama_layer-bias":
        call.update(attention_bias=True, params=llama.bias_params(r, 8, 4, 2, 2, 6))
        return "llama_layer", "layers", call, {"y": r.uniform((2, 4, 8))}
    norms = int(name[-1])
    call.update(num_norms=norms, params=parallel_layer.layer_params(r, 8, 4, 2, 2, 6, norms))
    return "parallel_layer", "layers", call, {"y": r.uniform((2, 4, 8))}


CASES.update({name: (_zoo, name) for name in ("llama_layer-bias", "parallel_layer-1",
                                              "parallel_layer-2")})
CASES.update({f"seq2seq-{kind}": (_seq2seq, kind)
              for kind in ("additive", "dot", "general", "concat")})


def _both(name, module, call, cot):
    """(numpy tape gradients, torch autograd gradients), each (inputs, params) as NumPy."""
    nb, tb = NumpyBackend(), TorchBackend()
    got = nb.vjp(name, module, call, cot)

    def t(a):
        return tb.asarray(a, dtype="float64") if isinstance(a, np.ndarray) else a

    tcall = {k: ({p: t(a) for p, a in v.items()} if k == "params" else t(v))
             for k, v in call.items()}
    want = tb.vjp(name, module, tcall, {k: t(c) for k, c in cot.items()})
    return got, tuple({k: tb.to_numpy(g) for k, g in w.items()} for w in want)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_tape_equals_torch_autograd(case):
    make, *args = CASES[case]
    (gi, gp), (wi, wp) = _both(*make(*args))
    assert set(gi) == set(wi) and set(gp) == set(wp)
    for group, got, want in (("input", gi, wi), ("param", gp, wp)):
        for k in want:
            assert got[k].dtype == np.float64, (group, k)
            np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-12,
                                       err_msg=f"{case}: gradient of {group} {k}")


def test_the_comparison_can_fail(monkeypatch):
    """A tape whose additions pass no gradient to their first operand (the skip path of
    x + f(x) lost) differs from autograd."""
    from attnspec.backends.composite import tape

    keep = tape.Tape.add

    def lossy(self, shapes, nodes, out):
        return keep(self, shapes, [None] + list(nodes[1:]), out)

    monkeypatch.setattr(tape.Tape, "add", lossy)
    with pytest.raises(AssertionError):
        test_the_tape_equals_torch_autograd("residual-pre-relu")
