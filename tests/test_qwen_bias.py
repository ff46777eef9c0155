"""llama_layer's attention_bias (Qwen2: q, k, v biases, no output bias): the oracle's VJP
against central differences, and planted bugs that the llama vectors reject at every dtype."""

import numpy as np
import pytest
from attnspec.backends.composite.layers import Layers
from attnspec.spec.cases._build import Rng
from attnspec.spec.cases.llama import bias_params
from attnspec.spec.oracle.core import precision
from attnspec.spec.oracle.llama import llama_layer

from .mutants import assert_rejected, composite_mutant, rejections
from .test_grad_oracle import VJP, _check


@pytest.mark.parametrize("attrs", [
    {"num_heads": 2, "num_kv_heads": 1, "offset": 2, "rope_base": 100.0, "window": 2},
    {"num_heads": 2, "num_kv_heads": 2},
], ids=["mqa-window-offset", "mha"])
def test_llama_layer_bias_vjp_matches_central_differences(attrs):
    r = Rng(f"test/grad/llama_layer/bias/{attrs['num_kv_heads']}")
    h, h_kv = attrs["num_heads"], attrs["num_kv_heads"]
    with precision():
        _check(llama_layer, VJP["llama_layer"], {"y": r.uniform((2, 3, 4))},
               {"x": r.uniform((2, 3, 4))}, {**attrs, "attention_bias": True},
               bias_params(r, 4, h, h_kv, 2, 3))


def _output_bias(self, n1, keep, heads, kv, base, offset, p, trace, past=None, bias=False):
    """Qwen2 read as Llama's attention_bias: an output bias too (here b_q, D = H*K wide)."""
    o, cache = Layers.llama_attention(self, n1, keep, heads, kv, base, offset, p, trace, past,
                                      bias)
    return (o + p["b_q"] if bias else o), cache


def _bias_after_rope(self, n1, p, heads, kv, base, offset, bias=False):
    """The biases added to the rotated q and k (and to v) instead of before RoPE."""
    q, k, v = Layers.llama_qkv(self, n1, p, heads, kv, base, offset, False)
    if not bias:
        return q, k, v
    return tuple(z + p["b_" + n].reshape(z.shape[1], 1, z.shape[-1])  # (H, 1, K)
                 for z, n in ((q, "q"), (k, "k"), (v, "v")))


def _key_bias_dropped(self, h, p, name, d_out):
    """b_k read but not added (the key projection built without bias)."""
    b = p.require("b" + name[1:], (d_out,))
    return self.project(h, p, name, d_out) + (0 * b if name == "w_k" else b)


BUGS = {
    "output-bias-added": {"llama_attention": _output_bias},
    "bias-after-rope": {"llama_qkv": _bias_after_rope},
    "key-bias-dropped": {"project_bias": _key_bias_dropped},
}


@pytest.mark.parametrize("name", sorted(BUGS))
def test_qwen_bias_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(composite_mutant(Layers, methods=BUGS[name]), "llama")


def test_correct_layers_pass_the_bias_vectors():
    assert set(rejections(composite_mutant(Layers), "llama", flag="bias").values()) == {0}
