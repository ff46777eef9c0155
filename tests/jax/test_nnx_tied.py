"""nnx.DecoderOnly with tie_embeddings (GPT-2, issue 25): built from the tied vectors'
parameters it holds one embed.table Param and no lm_head.*; its forward and greedy decoding
(generate, through decoder_only_step) reproduce the golden vectors, and nnx.grad of that one
Param is the sum of its embedding and head uses (the golden tied gradients)."""

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the jax extra is what tox -e jax-cpu installs")
pytest.importorskip("flax", reason="the flax extra is what tox -e jax-cpu installs")

import jax.numpy as jnp  # noqa: E402
from attnspec.backends.jax import nnx as N  # noqa: E402
from attnspec.spec.compare import compare  # noqa: E402
from attnspec.spec.vectors import VECTORS_DIR, load  # noqa: E402
from flax import nnx  # noqa: E402


@pytest.fixture(scope="module")
def spec():
    return load(VECTORS_DIR)


def _vector(spec, id_):
    return next(v for v in spec.vectors if v.id == id_)


def test_tied_nnx_decoder_only_holds_one_table_and_reproduces_the_golden_vector(spec):
    v = _vector(spec, "decoder_only/gpt2-001")
    module = N.DecoderOnly.from_spec(v.params, **v.attributes)
    paths = set(module.spec_params())
    assert "embed.table" in paths and not any(p.startswith("lm_head.") for p in paths)
    got = np.asarray(module(v.inputs["ids"]), dtype=np.float64)
    c = compare(got, v.outputs["logits"], "float64", v.tolerances["float64"])
    assert c.ok, c.describe("logits")


@pytest.mark.parametrize("id_", ["greedy_decode/gpt2-001", "greedy_decode/gpt2-eos-001",
                                 "greedy_decode/gpt2-square-001"])
def test_tied_nnx_generate_matches_the_greedy_golden_vector(spec, id_):
    v = _vector(spec, id_)
    a = {k: x for k, x in v.attributes.items()
         if k not in ("model", "bos_id", "eos_id", "max_len")}
    module = N.DecoderOnly.from_spec(v.params, **a)
    assert module.greedy_attributes()["tie_embeddings"] is True
    ids = module.generate(v.inputs["prompt"],
                          **{k: v.attributes[k] for k in ("bos_id", "eos_id", "max_len")})
    assert np.array_equal(np.asarray(ids), v.outputs["ids"]), v.id


def test_tied_nnx_grad_is_the_sum_of_the_embedding_and_the_head_uses(spec):
    """The golden tied gradient of embed.table (decoder_only/gpt2-grad-*) is nnx.grad's of
    the one Param; an untied twin (lm_head.w a separate copy of the table^T, no bias) splits
    it into the embedding's and the head's parts."""
    v = next(v for v in spec.vectors if v.function == "decoder_only" and v.expect == "gradient"
             and "tied-embeddings" in v.flags and "float64" in v.dtypes and not v.deprecated)
    ids, cot = v.inputs["ids"], jnp.asarray(v.cotangents["logits"])

    def loss(m):
        return jnp.sum(m(ids) * cot)

    tied = N.DecoderOnly.from_spec(v.params, **v.attributes)
    g = {".".join(map(str, p)): np.asarray(x[...])
         for p, x in nnx.to_flat_state(nnx.grad(loss)(tied))}
    table = v.params["embed.table"]
    twin = {**v.params, "lm_head.w": table.T.copy(), "lm_head.b": np.zeros(table.shape[0])}
    untied = N.DecoderOnly.from_spec(twin, **{**v.attributes, "tie_embeddings": False})
    gu = {".".join(map(str, p)): np.asarray(x[...])
          for p, x in nnx.to_flat_state(nnx.grad(loss)(untied))}
    np.testing.assert_allclose(g["embed.table"], gu["embed.table"] + gu["lm_head.w"].T,
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(g["embed.table"], v.gradients["params"]["embed.table"],
                               rtol=1e-10, atol=1e-12)
