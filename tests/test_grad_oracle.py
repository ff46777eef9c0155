"""The oracle's VJPs (``<name>_vjp`` beside each forward function in spec/oracle/)
against 50-digit central differences of the forward oracle: for every float input and parameter element x_i,

    (sum(dy * f(x + h e_i)) - sum(dy * f(x - h e_i))) / (2h)  ~  dx_i,   h = 1e-15,

exact to O(h^2) = 1e-30, far below the float64 rounding the vectors get. A tensor of more
than DIRECTIONS elements is checked along DIRECTIONS seeded random directions u instead of
its unit vectors e_i (the difference quotient then approximates sum(dx * u)): a wrong
gradient g + e escapes only if e is orthogonal, to 1e-25, to every u, which generic
directions rule out; each tensor costs 2 * DIRECTIONS evaluations instead of 2 * size."""

import mpmath
import numpy as np
import pytest
from attnspec.spec.cases import decoder_only, encoder_only, transformer
from attnspec.spec.cases._build import Rng
from attnspec.spec.cases.encoder_layer import dec_layer_params, enc_layer_params, stack_params
from attnspec.spec.cases.mha import mha_params
from attnspec.spec.cases.seq2seq_attention import s2s_params
from attnspec.spec.oracle import decoder_only as o_do
from attnspec.spec.oracle import encoder_only as o_eo
from attnspec.spec.oracle import transformer as o_tr
from attnspec.spec.oracle import vjps
from attnspec.spec.oracle.additive_attention import additive_attention
from attnspec.spec.oracle.attention_entropy import attention_entropy
from attnspec.spec.oracle.core import mp, mpa, precision
from attnspec.spec.oracle.decoder import decoder
from attnspec.spec.oracle.decoder_layer import decoder_layer
from attnspec.spec.oracle.dropout import dropout
from attnspec.spec.oracle.embedding import embedding, lm_head
from attnspec.spec.oracle.encoder_layer import encoder_layer
from attnspec.spec.oracle.feedforward import feedforward
from attnspec.spec.oracle.gated_feedforward import gated_feedforward
from attnspec.spec.oracle.gru import gru
from attnspec.spec.oracle.gru_cell import gru_cell
from attnspec.spec.oracle.layer_norm import layer_norm
from attnspec.spec.oracle.losses import cross_entropy
from attnspec.spec.oracle.luong_attention import luong_attention
from attnspec.spec.oracle.mha import mha
from attnspec.spec.oracle.relative_attention import relative_attention
from attnspec.spec.oracle.residual import residual
from attnspec.spec.oracle.rms_norm import rms_norm
from attnspec.spec.oracle.rope import rope
from attnspec.spec.oracle.sdpa import sdpa
from attnspec.spec.oracle.self_attention import self_attention
from attnspec.spec.oracle.seq2seq_attention import seq2seq_attention
from attnspec.spec.oracle.softcap import softcap
from attnspec.spec.oracle.softmax import softmax
from attnspec.spec.oracle.topk_attention import topk_attention

H = mpmath.mpf("1e-15")
VJP = vjps()


@pytest.fixture(autouse=True)
def _working_precision():
    with precision():
        yield


def _objective(f, cot, inputs, attrs, params):
    out = f(**inputs, **attrs, **({"params": params} if params is not None else {}))
    return mp.fsum(mp.fsum(np.ravel(mpa(out[n]) * mpa(c))) for n, c in cot.items())


def _check(f, vjp, cot, inputs, attrs, params=None):
    inputs = {k: (mpa(a) if np.asarray(a).dtype.kind == "f" else a) for k, a in inputs.items()}
    params = None if params is None else {k: mpa(a) for k, a in params.items()}
    gi, gp = vjp(cot, **inputs, **attrs, **({"params": params} if params is not None else {}))
    groups = [(inputs, gi, n) for n, a in inputs.items() if a.dtype == object]
    groups += [(params, gp, n) for n in (params or {})]
    assert {n for _, _, n in groups} == set(gi) | set(gp)
    for where, got, name in groups:
        a = where[name]
        assert got[name].shape == a.shape, name
        for label, u in _directions(name, a.shape):
            keep = a.copy()
            where[name] = keep + H * u
            up = _objective(f, cot, inputs, attrs, params)
            where[name] = keep - H * u
            down = _objective(f, cot, inputs, attrs, params)
            where[name] = keep
            fd = (up - down) / (2 * H)
            terms = np.ravel(got[name] * u)
            want = mp.fsum(terms)
            assert abs(fd - want) <= mpmath.mpf("1e-25") * (1 + mp.fsum(abs(t) for t in terms)), \
                (name, label, fd, want)


DIRECTIONS = 3


def _directions(name: str, shape: tuple):
    """(label, u): the unit vectors of a tensor of at most DIRECTIONS elements, else
    DIRECTIONS random directions (entries uniform in [-1, 1], seeded by the name)."""
    size = int(np.prod(shape, dtype=np.int64))
    if size <= DIRECTIONS:
        for idx in np.ndindex(shape):
            u = np.zeros(shape, dtype=object)
            u[idx] = mpmath.mpf(1)
            yield idx, u
        return
    r = Rng(f"test/grad/directions/{name}/{shape}")
    for i in range(DIRECTIONS):
        yield f"direction {i}", mpa(r.uniform(shape))


def test_softmax_vjp_matches_central_differences():
    r = Rng("test/grad/softmax")
    mask = r.bools((3, 5))
    mask[:, 0] = True
    _check(softmax, VJP["softmax"], {"y": r.uniform((3, 5))},
           {"x": r.uniform((3, 5))}, {"mask": mask, "axis": -1})
    _check(softmax, VJP["softmax"], {"y": r.uniform((4, 2))}, {"x": r.uniform((4, 2))},
           {"axis": 0})


@pytest.mark.parametrize("with_weights", [False, True])
def test_sdpa_vjp_matches_central_differences(with_weights):
    r = Rng(f"test/grad/sdpa/{with_weights}")
    q, k, v = r.uniform((2, 3, 4)), r.uniform((2, 5, 4)), r.uniform((2, 5, 3))
    mask = r.bools((3, 5))
    mask[:, 0] = True
    cot = {"output": r.uniform((2, 3, 3))}
    if with_weights:
        cot["weights"] = r.uniform((2, 3, 5))
    _check(lambda **kw: sdpa(**kw), VJP["sdpa"], cot,
           {"q": q, "k": k, "v": v, "bias": r.uniform((3, 5))},  # bias broadcasts over batch
           {"mask": mask, "scale": None})


@pytest.mark.parametrize("variant", ["canonical", "annotated"])
def test_layer_norm_vjp_matches_central_differences(variant):
    r = Rng(f"test/grad/layer_norm/{variant}")
    _check(layer_norm, VJP["layer_norm"], {"y": r.uniform((2, 3, 5))},
           {"x": r.uniform((2, 3, 5))}, {"eps": 0.01, "variant": variant},
           {"gamma": r.uniform((5,)), "beta": r.uniform((5,))})


def test_rms_norm_vjp_matches_central_differences():
    r = Rng("test/grad/rms_norm")
    _check(rms_norm, VJP["rms_norm"], {"y": r.uniform((3, 4))}, {"x": r.uniform((3, 4))},
           {"eps": 0.01}, {"gamma": r.uniform((4,))})


@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh"])
def test_feedforward_vjp_matches_central_differences(act):
    r = Rng(f"test/grad/ffn/{act}")
    x = r.uniform((2, 2, 3)) + 2.0**-9  # off the multiples of 2**-6: no pre-activation is 0
    _check(feedforward, VJP["feedforward"], {"y": r.uniform((2, 2, 3))}, {"x": x},
           {"activation": act},
           {"w1": r.uniform((3, 4)), "b1": r.uniform((4,)), "w2": r.uniform((4, 3)),
            "b2": r.uniform((3,))})


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_vjp_matches_central_differences(reduction):
    r = Rng(f"test/grad/ce/{reduction}")
    t = np.array([[1, -100, 0], [3, 2, -100]])
    cot = {"loss": r.uniform((2, 3)) if reduction == "none" else np.array(0.75)}
    _check(cross_entropy, VJP["cross_entropy"], cot,
           {"logits": r.uniform((2, 3, 4), -4, 4), "targets": t},
           {"ignore_index": -100, "label_smoothing": 0.1, "reduction": reduction})


def _ffn_ln(r, d, f):
    return {"ffn.w1": r.uniform((d, f)), "ffn.b1": r.uniform((f,)), "ffn.w2": r.uniform((f, d)),
            "ffn.b2": r.uniform((d,)), "norm.gamma": r.uniform((d,)), "norm.beta": r.uniform((d,))}


@pytest.mark.parametrize("position", ["post", "pre"])
def test_residual_vjp_matches_central_differences(position):

    r = Rng(f"test/grad/residual/{position}")
    x = r.uniform((2, 3)) + 2.0**-9
    _check(residual, VJP["residual"], {"y": r.uniform((2, 3))}, {"x": x},
           {"position": position, "eps": 0.01, "activation": "gelu"}, _ffn_ln(r, 3, 4))


# -- composites: the kernels' VJPs chained (tiny sizes: every element is perturbed) --------

def _tiny_layer(r, d, f, cross=False):

    p = (dec_layer_params if cross else enc_layer_params)(r, d, f)
    return {k: a + r.uniform(a.shape, -0.25, 0.25) for k, a in p.items()}


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encoder_layer_vjp_matches_central_differences(norm):

    r = Rng(f"test/grad/encoder_layer/{norm}")
    mask = np.array([[[[True, True, False]]]])
    _check(encoder_layer, VJP["encoder_layer"], {"y": r.uniform((1, 3, 4))},
           {"x": r.uniform((1, 3, 4))},
           {"mask": mask, "num_heads": 2, "norm": norm, "activation": "gelu"},
           _tiny_layer(r, 4, 3))


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_layer_vjp_matches_central_differences(norm):

    r = Rng(f"test/grad/decoder_layer/{norm}")
    _check(decoder_layer, VJP["decoder_layer"], {"y": r.uniform((1, 2, 2))},
           {"x": r.uniform((1, 2, 2)), "memory": r.uniform((1, 3, 2))},
           {"self_mask": np.tril(np.ones((2, 2), dtype=bool)), "num_heads": 1, "norm": norm,
            "activation": "gelu"}, _tiny_layer(r, 2, 2, cross=True))


def test_decoder_vjp_matches_central_differences():

    r = Rng("test/grad/decoder")
    _check(decoder, VJP["decoder"], {"y": r.uniform((1, 2, 2))},
           {"x": r.uniform((1, 2, 2)), "memory": r.uniform((1, 2, 2))},
           {"num_layers": 2, "num_heads": 1, "norm": "pre", "activation": "gelu"},
           stack_params(r, dec_layer_params, 2, 2, 2, True))


@pytest.mark.parametrize("model", ["encoder_only", "decoder_only", "decoder_only-tied",
                                   "transformer"])
def test_model_vjp_matches_central_differences(model):

    r = Rng(f"test/grad/{model}")
    ids = np.array([[1, 2, 0]])
    attrs = {"pad_id": 0, "num_layers": 1, "num_heads": 1, "activation": "gelu"}
    if model == "encoder_only":
        _check(o_eo.encoder_only, VJP["encoder_only"],
               {"hidden": r.uniform((1, 3, 2)), "logits": r.uniform((1, 3, 3))}, {"ids": ids},
               {**attrs, "norm": "pre"}, encoder_only.params(r, 1, 2, 2, 3, 4, "pre"))
    elif model == "decoder_only-tied":  # GPT-2: embed.table read by the embedding and the head
        _check(o_do.decoder_only, VJP["decoder_only"], {"logits": r.uniform((1, 3, 3))},
               {"ids": ids}, {**attrs, "norm": "pre", "activation": "gelu_tanh",
                              "tie_embeddings": True},
               decoder_only.tied_params(r, 1, 2, 2, 3, 4))
    elif model == "decoder_only":
        _check(o_do.decoder_only, VJP["decoder_only"], {"logits": r.uniform((1, 3, 3))},
               {"ids": ids}, {**attrs, "norm": "post"},
               decoder_only.params(r, 1, 2, 2, 3, 4, "post"))
    else:
        _check(o_tr.transformer, VJP["transformer"], {"logits": r.uniform((1, 2, 3))},
               {"src_ids": ids, "tgt_ids": ids[:, :2]},
               {**attrs, "norm": "pre", "tie_embeddings": True},
               transformer.transformer_params(r, 1, 2, 2, 3, "pre", tied=True))


def test_a_wrong_formula_is_caught():
    """The check itself can fail: softmax backward without the subtraction term."""
    def bad(cot, x, mask=None, axis=-1):
        gi, _ = VJP["softmax"](cot, x, mask, axis)
        from attnspec.spec.oracle.core import softmax as sm
        return {"x": sm(mpa(x), axis=axis) * mpa(cot["y"])}, {}

    r = Rng("test/grad/bad")
    with pytest.raises(AssertionError):
        _check(softmax, bad, {"y": r.uniform((2, 4))}, {"x": r.uniform((2, 4))}, {"axis": -1})


# -- attention kernels: sdpa (num_kv_heads, softcap), mha, self_attention, additive, luong,
# relative ---------------------------------------------------------------------------------

@pytest.mark.parametrize("with_weights", [False, True])
def test_sdpa_vjp_gqa_softcap_matches_central_differences(with_weights):
    r = Rng(f"test/grad/sdpa-gqa/{with_weights}")
    q, k, v = r.uniform((1, 4, 2, 3)), r.uniform((1, 2, 3, 3)), r.uniform((1, 2, 3, 2))
    mask = r.bools((2, 3))
    mask[:, 0] = True
    cot = {"output": r.uniform((1, 4, 2, 2))}
    if with_weights:
        cot["weights"] = r.uniform((1, 4, 2, 3))
    _check(lambda **kw: sdpa(**kw), VJP["sdpa"], cot,
           {"q": q, "k": k, "v": v, "bias": r.uniform((2, 3))},
           {"mask": mask, "scale": None, "num_kv_heads": 2, "softcap": 1.5})


@pytest.mark.parametrize("kv_heads", [None, 1])
def test_mha_vjp_matches_central_differences(kv_heads):

    r = Rng(f"test/grad/mha/{kv_heads}")
    mask = r.bools((2, 3))
    mask[:, 0] = True
    _check(mha, VJP["mha"], {"output": r.uniform((1, 2, 3)), "weights": r.uniform((1, 2, 2, 3))},
           {"query": r.uniform((1, 2, 3)), "key": r.uniform((1, 3, 2)),
            "value": r.uniform((1, 3, 2)), "mask": mask},
           {"num_heads": 2, "num_kv_heads": kv_heads},
           mha_params(r, 3, 2, 2, 2, 2, 2, 3, kv_heads=kv_heads))


def test_self_attention_vjp_matches_central_differences():

    r = Rng("test/grad/self_attention")
    mask = np.tril(np.ones((3, 3), dtype=bool))
    _check(self_attention, VJP["self_attention"],
           {"output": r.uniform((2, 3, 2)), "weights": r.uniform((2, 3, 3))},
           {"x": r.uniform((2, 3, 3)), "mask": mask}, {"scale": 0.75},
           {"w_q": r.uniform((3, 2)), "b_q": r.uniform((2,)), "w_k": r.uniform((3, 2)),
            "w_v": r.uniform((3, 2)), "b_v": r.uniform((2,))})




@pytest.mark.parametrize("scale", [True, False])
def test_embedding_vjp_matches_central_differences(scale):
    r = Rng(f"test/grad/embedding/{scale}")
    ids = np.array([[3, 1, 3], [0, 3, 1]])  # id 3 three times, id 2 never
    _check(embedding, VJP["embedding"], {"y": r.uniform((2, 3, 4))}, {"ids": ids},
           {"scale": scale}, {"table": r.uniform((4, 4))})


@pytest.mark.parametrize("tied", [False, True])
def test_lm_head_vjp_matches_central_differences(tied):
    r = Rng(f"test/grad/lm_head/{tied}")
    params = {"table": r.uniform((5, 3))} if tied else {"w": r.uniform((3, 5))}
    params["b"] = r.uniform((5,))
    _check(lm_head, VJP["lm_head"], {"logits": r.uniform((2, 2, 5))},
           {"x": r.uniform((2, 2, 3))}, {"tied": tied}, params)


@pytest.mark.parametrize("convention", ["interleaved", "half"])
def test_rope_vjp_matches_central_differences(convention):
    r = Rng(f"test/grad/rope/{convention}")
    _check(rope, VJP["rope"], {"y": r.uniform((2, 3, 6))}, {"x": r.uniform((2, 3, 6))},
           {"offset": 2, "base": 100.0, "convention": convention})


@pytest.mark.parametrize("act", ["silu", "gelu", "gelu_tanh"])
def test_gated_feedforward_vjp_matches_central_differences(act):
    r = Rng(f"test/grad/gated_ffn/{act}")
    _check(gated_feedforward, VJP["gated_feedforward"], {"y": r.uniform((2, 2, 3))},
           {"x": r.uniform((2, 2, 3))}, {"activation": act},
           {"w_gate": r.uniform((3, 4)), "w_up": r.uniform((3, 4)), "w_down": r.uniform((4, 3))})


def _gru_params(r, i, h, biases=True):
    p = {"w_ih": r.uniform((i, 3 * h)), "w_hh": r.uniform((h, 3 * h))}
    if biases:
        p.update(b_ih=r.uniform((3 * h,)), b_hh=r.uniform((3 * h,)))
    return p


def test_gru_cell_vjp_matches_central_differences():
    r = Rng("test/grad/gru_cell")
    _check(gru_cell, VJP["gru_cell"], {"h": r.uniform((2, 3))},
           {"x": r.uniform((2, 2)), "h": r.uniform((2, 3))}, {}, _gru_params(r, 2, 3))


@pytest.mark.parametrize("with_h0", [False, True])
def test_gru_vjp_matches_central_differences(with_h0):
    r = Rng(f"test/grad/gru/{with_h0}")
    inputs = {"x": r.uniform((2, 3, 2))}
    if with_h0:
        inputs["h0"] = r.uniform((2, 2))
    cot = {"outputs": r.uniform((2, 3, 2)), "h_last": r.uniform((2, 2))}
    _check(gru, VJP["gru"], cot, inputs, {}, _gru_params(r, 2, 2, biases=with_h0))


def test_softcap_vjp_matches_central_differences():
    r = Rng("test/grad/softcap")
    _check(softcap, VJP["softcap"], {"y": r.uniform((3, 4))}, {"x": r.uniform((3, 4), -8, 8)},
           {"cap": 3.0})


def test_dropout_vjp_matches_central_differences():
    r = Rng("test/grad/dropout")
    _check(dropout, VJP["dropout"], {"y": r.uniform((3, 4))}, {"x": r.uniform((3, 4))},
           {"keep_mask": r.bools((3, 4)), "p": 0.25})


@pytest.mark.parametrize("with_values", [False, True])
def test_additive_attention_vjp_matches_central_differences(with_values):

    r = Rng(f"test/grad/additive/{with_values}")
    mask = r.bools((2, 3))
    mask[:, 0] = True
    inputs = {"query": r.uniform((2, 2, 3)), "keys": r.uniform((2, 3, 2)), "mask": mask}
    if with_values:
        inputs["values"] = r.uniform((2, 3, 2))
    _check(additive_attention, VJP["additive_attention"],
           {"context": r.uniform((2, 2, 2)), "weights": r.uniform((2, 2, 3))}, inputs, {},
           {"w_q": r.uniform((3, 4)), "w_k": r.uniform((2, 4)), "v": r.uniform((4,))})


@pytest.mark.parametrize("score", ["dot", "general", "concat"])
def test_luong_attention_vjp_matches_central_differences(score):

    r = Rng(f"test/grad/luong/{score}")
    d_k = 3 if score == "dot" else 2
    params = {"dot": None, "general": {"w": r.uniform((3, 2))},
              "concat": {"w": r.uniform((5, 4)), "v": r.uniform((4,))}}[score]
    _check(luong_attention, VJP["luong_attention"],
           {"context": r.uniform((2, 2, 2)), "weights": r.uniform((2, 2, 3))},
           {"query": r.uniform((2, 2, 3)), "keys": r.uniform((2, 3, d_k)),
            "values": r.uniform((2, 3, 2))}, {"score": score}, params)
    _check(luong_attention, VJP["luong_attention"], {"context": r.uniform((1, 2, d_k))},
           {"query": r.uniform((1, 2, 3)), "keys": r.uniform((1, 3, d_k))}, {"score": score},
           params)


@pytest.mark.parametrize("max_distance", [0, 1, 3])
def test_relative_attention_vjp_matches_central_differences(max_distance):

    r = Rng(f"test/grad/relative/{max_distance}")
    m = max_distance
    mask = r.bools((2, 3, 4))
    mask[..., 0] = True
    _check(relative_attention, VJP["relative_attention"],
           {"output": r.uniform((2, 3, 2)), "weights": r.uniform((2, 3, 4))},
           {"q": r.uniform((2, 3, 2)), "k": r.uniform((2, 4, 2)), "v": r.uniform((2, 4, 2)),
            "mask": mask}, {"max_distance": m, "scale": None},
           {"rel_k": r.uniform((2 * m + 1, 2)), "rel_v": r.uniform((2 * m + 1, 2))})


@pytest.mark.parametrize("attention", ["additive", "dot", "general", "concat"])
def test_seq2seq_attention_vjp_matches_central_differences(attention):

    r = Rng(f"test/grad/seq2seq/{attention}")
    _check(seq2seq_attention, VJP["seq2seq_attention"], {"logits": r.uniform((2, 2, 4))},
           {"src_ids": np.array([[3, 1, 2], [2, 3, 0]]), "tgt_ids": np.array([[1, 3], [2, 1]])},
           {"attention": attention, "pad_id": 0},
           s2s_params(r, attention, src_vocab=4, vocab=4, e=2, h=2, a=2))
@pytest.mark.parametrize("axis", [-1, 0])
def test_attention_entropy_vjp_matches_central_differences(axis):
    r = Rng(f"test/grad/attention_entropy/{axis}")
    _check(attention_entropy, VJP["attention_entropy"], {"entropy": r.uniform((3,))},
           {"weights": r.uniform((3, 3), 2.0**-6, 1)}, {"axis": axis})


def test_attention_entropy_vjp_zero_weight_gets_zero():
    """A zero weight: 0 ln 0 = 0, and the convention gives it gradient 0 (not +inf)."""
    gi, _ = VJP["attention_entropy"]({"entropy": np.array([1.0])},
                                       np.array([[0.0, 0.25, 0.75]]))
    assert gi["weights"][0, 0] == 0
    assert abs(gi["weights"][0, 1] - (-(mpmath.log(0.25) + 1))) < mpmath.mpf("1e-40")


@pytest.mark.parametrize("ties", ["lower_index", "keep_all"])
def test_topk_attention_vjp_matches_central_differences(ties):
    r = Rng(f"test/grad/topk_attention/{ties}")
    mask = r.bools((3, 5))
    mask[:, :2] = True
    cot = {"output": r.uniform((2, 3, 2)), "weights": r.uniform((2, 3, 5))}
    _check(lambda **kw: topk_attention(**kw), VJP["topk_attention"], cot,
           {"q": r.uniform((2, 3, 4)), "k": r.uniform((2, 5, 4)), "v": r.uniform((2, 5, 2))},
           {"mask": mask, "top_k": 2, "scale": None, "ties": ties})
