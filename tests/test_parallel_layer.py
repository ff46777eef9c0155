"""parallel_layer (GPT-NeoX, Falcon): the oracle's VJP against central differences, the
composite against the same layer written by hand from the NumPy kernels, and planted bugs
that the parallel_layer vectors reject at every dtype."""

import numpy as np
import pytest
from attnspec.backends.composite.layers import Layers
from attnspec.backends.numpy import attention, feedforward, norm, positional
from attnspec.backends.numpy.layers import parallel_layer
from attnspec.spec.cases._build import Rng
from attnspec.spec.cases.parallel_layer import layer_params
from attnspec.spec.errors import ConfigError, ParameterError
from attnspec.spec.oracle.core import precision
from attnspec.spec.oracle.parallel_layer import parallel_layer as oracle

from .mutants import assert_rejected, composite_mutant, rejections
from .test_grad_oracle import VJP, _check
from .test_mutants_llama_rope import _rope_with, rotary_dim_ignored, rotary_theta_from_k


@pytest.mark.parametrize("num_norms", [1, 2])
def test_parallel_layer_vjp_matches_central_differences(num_norms):
    r = Rng(f"test/grad/parallel_layer/{num_norms}")
    attrs = {"num_heads": 2, "num_kv_heads": 1, "num_norms": num_norms, "offset": 1,
             "rope_base": 100.0, "eps": 0.01}
    mask = np.ones((2, 1, 1, 3), dtype=bool)
    mask[1, 0, 0, 0] = False
    with precision():
        _check(oracle, VJP["parallel_layer"], {"y": r.uniform((2, 3, 4))},
               {"x": r.uniform((2, 3, 4)), "mask": mask}, attrs,
               layer_params(r, 4, 2, 1, 2, 3, num_norms))


def test_parallel_layer_vjp_with_a_partial_rotary_matches_central_differences():
    r = Rng("test/grad/parallel_layer/rotary")
    attrs = {"num_heads": 2, "num_kv_heads": 2, "num_norms": 2, "offset": 2,
             "rope_base": 100.0, "eps": 0.01, "rotary_dim": 2}
    with precision():
        _check(oracle, VJP["parallel_layer"], {"y": r.uniform((1, 3, 8))},
               {"x": r.uniform((1, 3, 8))}, attrs, layer_params(r, 8, 2, 2, 4, 3, 2))


def by_hand(x, *, num_heads, num_kv_heads, num_norms, params, eps=1e-5, activation="gelu"):
    """y = x + A(LN_1 x) + F(LN_2 x), written out with the NumPy kernels."""
    b, t, d = x.shape
    h, h_kv = num_heads, num_kv_heads
    k = params["attn.w_q"].shape[1] // h

    def scope(prefix):
        return {n[len(prefix):]: a for n, a in params.items() if n.startswith(prefix)}

    def heads(z, n):  # (B, T, n*K) -> (B, n, T, K)
        return z.reshape(b, t, n, k).transpose(0, 2, 1, 3)

    def proj(n, c):
        return n @ params[f"attn.w_{c}"] + params[f"attn.b_{c}"]

    n1 = norm.layer_norm(x, eps=eps, params=scope("attn_norm."))
    n2 = n1 if num_norms == 1 else norm.layer_norm(x, eps=eps, params=scope("ffn_norm."))
    q = positional.rope(heads(proj(n1, "q"), h), convention="half")
    kk = positional.rope(heads(proj(n1, "k"), h_kv), convention="half")
    o, _ = attention.sdpa(q, kk, heads(proj(n1, "v"), h_kv), np.tril(np.ones((t, t), bool)),
                          num_kv_heads=h_kv)
    a = o.transpose(0, 2, 1, 3).reshape(b, t, h * k) @ params["attn.w_o"] + params["attn.b_o"]
    return x + a + feedforward.feedforward(n2, activation=activation, params=scope("ffn."))


@pytest.mark.parametrize("num_norms, h_kv", [(1, 1), (2, 2), (2, 4)])
def test_parallel_layer_equals_its_parts_written_by_hand(num_norms, h_kv):
    r = Rng(f"test/parallel_layer/by-hand/{num_norms}/{h_kv}")
    p = layer_params(r, 16, 4, h_kv, 4, 24, num_norms)
    x = r.uniform((2, 5, 16), -1.0, 3.0)
    attrs = {"num_heads": 4, "num_kv_heads": h_kv, "num_norms": num_norms}
    np.testing.assert_allclose(parallel_layer(x, params=p, **attrs),
                               by_hand(x, params=p, **attrs), rtol=1e-12, atol=1e-12)


def test_parallel_layer_refuses_bad_input_naming_it():
    r = Rng("test/parallel_layer/errors")
    p = layer_params(r, 8, 2, 2, 4, 8, 1)
    x = r.uniform((1, 3, 8))
    with pytest.raises(ConfigError, match="num_norms"):
        parallel_layer(x, num_heads=2, num_norms=0, params=p)
    with pytest.raises(ParameterError, match="ffn_norm.gamma"):
        parallel_layer(x, num_heads=2, num_norms=2, params=p)


# -- planted bugs ----------------------------------------------------------------------------

def _variant(sequential=False, one_norm=False):
    """parallel_layer with a planted bug: the MLP on x + A (sequential), or LN_1 for both."""
    def layer(self, x, mask=None, *, num_heads, num_kv_heads=None, num_norms=2, eps=1e-5,
              activation="gelu", rope_base=10000.0, offset=0, rotary_dim=None, params,
              trace=None):
        from attnspec.backends import _checks as check
        from attnspec.spec.trace import record

        b, t, _ = x.shape
        heads, kv = self.llama_heads(num_heads, num_kv_heads)
        keep = self.llama_keep(mask, b, t, t, None, x)
        p = check.params_of(params)
        n1 = self.k.layer_norm(x, eps=eps, params=p.scope("attn_norm"))
        a = self.parallel_attention(n1, keep, heads, kv, rope_base, offset, p.scope("attn"), trace,
                                    self.llama_rope(None, rotary_dim))
        h = x + a if sequential else x
        two = num_norms == 2 and not one_norm
        n2 = self.k.layer_norm(h, eps=eps, params=p.scope("ffn_norm" if two else "attn_norm"))
        f = self.k.feedforward(n2, activation=activation, params=p.scope("ffn"))
        record(trace, "ffn.output", f)
        return x + a + f if not sequential else h + f
    return layer


def _no_output_bias(self, n, keep, heads, kv, base, offset, p, trace, rope=None):
    o = Layers.parallel_attention(self, n, keep, heads, kv, base, offset, p, trace, rope)
    return o - p["b_o"]


def _rms_for_layer_norm(x, *, eps=1e-5, params):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * params["gamma"] + params["beta"]


def _rope_interleaved(x, *, offset=0, base=10000.0, convention="half", **rest):
    return positional.rope(x, offset=offset, base=base, convention="interleaved", **rest)


BUGS = {
    "sequential-residual": {"methods": {"parallel_layer": _variant(sequential=True)}},
    "one-norm-for-two": {"methods": {"parallel_layer": _variant(one_norm=True)}},
    "no-output-bias": {"methods": {"parallel_attention": _no_output_bias}},
    "rms-norm-for-layer-norm": {"kernels": {"layer_norm": _rms_for_layer_norm}},
    "rope-interleaved": {"kernels": {"rope": _rope_interleaved}},
    # GPT-NeoX's rotary_pct: the whole head rotated, or the R-wide part with the K-wide
    # head's frequencies (the llama rope mutants, tests/test_mutants_llama_rope.py)
    "rotary-dim-ignored": {"kernels": {"rope": _rope_with(rotary_dim_ignored)}},
    "rotary-theta-from-k": {"kernels": {"rope": _rope_with(rotary_theta_from_k)}},
}


@pytest.mark.parametrize("name", sorted(BUGS))
def test_parallel_layer_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(composite_mutant(Layers, **BUGS[name]), "parallel_layer")


def test_correct_parallel_layer_is_not_rejected():
    assert set(rejections(composite_mutant(Layers, methods={"parallel_layer": _variant()}),
                          "parallel_layer").values()) == {0}
    assert set(rejections(composite_mutant(Layers), "parallel_layer").values()) == {0}
