"""The oracle's VJPs (spec/oracle/grad.py) against 50-digit central differences of the
forward oracle: for every float input and parameter element x_i,

    (sum(dy * f(x + h e_i)) - sum(dy * f(x - h e_i))) / (2h)  ~  dx_i,   h = 1e-15,

exact to O(h^2) = 1e-30, far below the float64 rounding the vectors get."""

import mpmath
import numpy as np
import pytest
from attnspec.spec.cases._build import Rng
from attnspec.spec.oracle import grad
from attnspec.spec.oracle.core import mp, mpa
from attnspec.spec.oracle.feedforward import feedforward
from attnspec.spec.oracle.layer_norm import layer_norm
from attnspec.spec.oracle.losses import cross_entropy
from attnspec.spec.oracle.rms_norm import rms_norm
from attnspec.spec.oracle.sdpa import sdpa
from attnspec.spec.oracle.softmax import softmax

H = mpmath.mpf("1e-15")


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
        for idx in np.ndindex(a.shape):
            keep = a[idx]
            a[idx] = keep + H
            up = _objective(f, cot, inputs, attrs, params)
            a[idx] = keep - H
            down = _objective(f, cot, inputs, attrs, params)
            a[idx] = keep
            fd = (up - down) / (2 * H)
            assert abs(fd - got[name][idx]) <= mpmath.mpf("1e-25") * (1 + abs(fd)), \
                (name, idx, fd, got[name][idx])


def test_softmax_vjp_matches_central_differences():
    r = Rng("test/grad/softmax")
    mask = r.bools((3, 5))
    mask[:, 0] = True
    _check(softmax, grad.softmax_vjp, {"y": r.uniform((3, 5))},
           {"x": r.uniform((3, 5))}, {"mask": mask, "axis": -1})
    _check(softmax, grad.softmax_vjp, {"y": r.uniform((4, 2))}, {"x": r.uniform((4, 2))},
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
    _check(lambda **kw: sdpa(**kw), grad.sdpa_vjp, cot,
           {"q": q, "k": k, "v": v, "bias": r.uniform((3, 5))},  # bias broadcasts over batch
           {"mask": mask, "scale": None})


@pytest.mark.parametrize("variant", ["canonical", "annotated"])
def test_layer_norm_vjp_matches_central_differences(variant):
    r = Rng(f"test/grad/layer_norm/{variant}")
    _check(layer_norm, grad.layer_norm_vjp, {"y": r.uniform((2, 3, 5))},
           {"x": r.uniform((2, 3, 5))}, {"eps": 0.01, "variant": variant},
           {"gamma": r.uniform((5,)), "beta": r.uniform((5,))})


def test_rms_norm_vjp_matches_central_differences():
    r = Rng("test/grad/rms_norm")
    _check(rms_norm, grad.rms_norm_vjp, {"y": r.uniform((3, 4))}, {"x": r.uniform((3, 4))},
           {"eps": 0.01}, {"gamma": r.uniform((4,))})


@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh"])
def test_feedforward_vjp_matches_central_differences(act):
    r = Rng(f"test/grad/ffn/{act}")
    x = r.uniform((2, 2, 3)) + 2.0**-9  # off the multiples of 2**-6: no pre-activation is 0
    _check(feedforward, grad.feedforward_vjp, {"y": r.uniform((2, 2, 3))}, {"x": x},
           {"activation": act},
           {"w1": r.uniform((3, 4)), "b1": r.uniform((4,)), "w2": r.uniform((4, 3)),
            "b2": r.uniform((3,))})


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_vjp_matches_central_differences(reduction):
    r = Rng(f"test/grad/ce/{reduction}")
    t = np.array([[1, -100, 0], [3, 2, -100]])
    cot = {"loss": r.uniform((2, 3)) if reduction == "none" else np.array(0.75)}
    _check(cross_entropy, grad.cross_entropy_vjp, cot,
           {"logits": r.uniform((2, 3, 4), -4, 4), "targets": t},
           {"ignore_index": -100, "label_smoothing": 0.1, "reduction": reduction})


def test_a_wrong_formula_is_caught():
    """The check itself can fail: softmax backward without the subtraction term."""
    def bad(cot, x, mask=None, axis=-1):
        gi, _ = grad.softmax_vjp(cot, x, mask, axis)
        from attnspec.spec.oracle.core import softmax as sm
        return {"x": sm(mpa(x), axis=axis) * mpa(cot["y"])}, {}

    r = Rng("test/grad/bad")
    with pytest.raises(AssertionError):
        _check(softmax, bad, {"y": r.uniform((2, 4))}, {"x": r.uniform((2, 4))}, {"axis": -1})


# == grad2: embedding, lm_head, rope, gated_feedforward, gru_cell, gru, softcap, dropout ====

from attnspec.spec.oracle.attention_entropy import attention_entropy  # noqa: E402
from attnspec.spec.oracle.dropout import dropout  # noqa: E402
from attnspec.spec.oracle.embedding import embedding, lm_head  # noqa: E402
from attnspec.spec.oracle.gated_feedforward import gated_feedforward  # noqa: E402
from attnspec.spec.oracle.gru import gru  # noqa: E402
from attnspec.spec.oracle.gru_cell import gru_cell  # noqa: E402
from attnspec.spec.oracle.rope import rope  # noqa: E402
from attnspec.spec.oracle.softcap import softcap  # noqa: E402


@pytest.mark.parametrize("scale", [True, False])
def test_embedding_vjp_matches_central_differences(scale):
    r = Rng(f"test/grad/embedding/{scale}")
    ids = np.array([[3, 1, 3], [0, 3, 1]])  # id 3 three times, id 2 never
    _check(embedding, grad.embedding_vjp, {"y": r.uniform((2, 3, 4))}, {"ids": ids},
           {"scale": scale}, {"table": r.uniform((4, 4))})


@pytest.mark.parametrize("tied", [False, True])
def test_lm_head_vjp_matches_central_differences(tied):
    r = Rng(f"test/grad/lm_head/{tied}")
    params = {"table": r.uniform((5, 3))} if tied else {"w": r.uniform((3, 5))}
    params["b"] = r.uniform((5,))
    _check(lm_head, grad.lm_head_vjp, {"logits": r.uniform((2, 2, 5))},
           {"x": r.uniform((2, 2, 3))}, {"tied": tied}, params)


@pytest.mark.parametrize("convention", ["interleaved", "half"])
def test_rope_vjp_matches_central_differences(convention):
    r = Rng(f"test/grad/rope/{convention}")
    _check(rope, grad.rope_vjp, {"y": r.uniform((2, 3, 6))}, {"x": r.uniform((2, 3, 6))},
           {"offset": 2, "base": 100.0, "convention": convention})


@pytest.mark.parametrize("act", ["silu", "gelu", "gelu_tanh"])
def test_gated_feedforward_vjp_matches_central_differences(act):
    r = Rng(f"test/grad/gated_ffn/{act}")
    _check(gated_feedforward, grad.gated_feedforward_vjp, {"y": r.uniform((2, 2, 3))},
           {"x": r.uniform((2, 2, 3))}, {"activation": act},
           {"w_gate": r.uniform((3, 4)), "w_up": r.uniform((3, 4)), "w_down": r.uniform((4, 3))})


def _gru_params(r, i, h, biases=True):
    p = {"w_ih": r.uniform((i, 3 * h)), "w_hh": r.uniform((h, 3 * h))}
    if biases:
        p.update(b_ih=r.uniform((3 * h,)), b_hh=r.uniform((3 * h,)))
    return p


def test_gru_cell_vjp_matches_central_differences():
    r = Rng("test/grad/gru_cell")
    _check(gru_cell, grad.gru_cell_vjp, {"h": r.uniform((2, 3))},
           {"x": r.uniform((2, 2)), "h": r.uniform((2, 3))}, {}, _gru_params(r, 2, 3))


@pytest.mark.parametrize("with_h0", [False, True])
def test_gru_vjp_matches_central_differences(with_h0):
    r = Rng(f"test/grad/gru/{with_h0}")
    inputs = {"x": r.uniform((2, 3, 2))}
    if with_h0:
        inputs["h0"] = r.uniform((2, 2))
    cot = {"outputs": r.uniform((2, 3, 2)), "h_last": r.uniform((2, 2))}
    _check(gru, grad.gru_vjp, cot, inputs, {}, _gru_params(r, 2, 2, biases=with_h0))


def test_softcap_vjp_matches_central_differences():
    r = Rng("test/grad/softcap")
    _check(softcap, grad.softcap_vjp, {"y": r.uniform((3, 4))}, {"x": r.uniform((3, 4), -8, 8)},
           {"cap": 3.0})


def test_dropout_vjp_matches_central_differences():
    r = Rng("test/grad/dropout")
    _check(dropout, grad.dropout_vjp, {"y": r.uniform((3, 4))}, {"x": r.uniform((3, 4))},
           {"keep_mask": r.bools((3, 4)), "p": 0.25})


@pytest.mark.parametrize("axis", [-1, 0])
def test_attention_entropy_vjp_matches_central_differences(axis):
    r = Rng(f"test/grad/attention_entropy/{axis}")
    _check(attention_entropy, grad.attention_entropy_vjp, {"entropy": r.uniform((3,))},
           {"weights": r.uniform((3, 3), 2.0**-6, 1)}, {"axis": axis})


def test_attention_entropy_vjp_zero_weight_gets_zero():
    """A zero weight: 0 ln 0 = 0, and the convention gives it gradient 0 (not +inf)."""
    gi, _ = grad.attention_entropy_vjp({"entropy": np.array([1.0])},
                                       np.array([[0.0, 0.25, 0.75]]))
    assert gi["weights"][0, 0] == 0
    assert abs(gi["weights"][0, 1] - (-(mpmath.log(0.25) + 1))) < mpmath.mpf("1e-40")
