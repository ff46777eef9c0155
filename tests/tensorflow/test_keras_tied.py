"""keras_layers.DecoderOnly with tie_embeddings (GPT-2, issue 25): no lm_head.* weights, the
head reads the one embed.table variable; it reproduces the tied golden vectors (forward and
greedy decoding), saves and loads, and a GradientTape step moves that one variable by the
sum of its two uses."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import keras  # noqa: E402
from attnspec.backends.tensorflow import keras_layers as KL  # noqa: E402
from attnspec.spec.compare import compare  # noqa: E402
from attnspec.spec.vectors import VECTORS_DIR, load  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")


@pytest.fixture(scope="module")
def spec():
    return load(VECTORS_DIR)


def _vector(spec, id_):
    return next(v for v in spec.vectors if v.id == id_)


def test_a_fresh_tied_decoder_only_has_no_lm_head_and_one_table():
    layer = KL.DecoderOnly(8, 2, 16, num_layers=1, pad_id=0, vocab_size=10, max_len=6,
                           tie_embeddings=True, dtype="float64")
    ids = np.array([[1, 4, 5]])
    logits = layer(ids)
    assert logits.shape == (1, 3, 10)
    names = sorted(layer.params())
    assert "embed.table" in names and not any(n.startswith("lm_head.") for n in names)
    untied = KL.DecoderOnly(8, 2, 16, num_layers=1, pad_id=0, vocab_size=10, max_len=6,
                            dtype="float64")
    assert "lm_head.w" in untied.params()
    assert layer.get_config()["tie_embeddings"] is True
    assert KL.DecoderOnly.from_config(layer.get_config()).tie_embeddings is True


@pytest.mark.parametrize("id_", ["decoder_only/gpt2-001", "decoder_only/gpt2-002"])
def test_tied_keras_decoder_only_reproduces_the_golden_vector(spec, id_):
    v = _vector(spec, id_)
    layer = KL.DecoderOnly.from_spec(v.params, dtype="float64", **v.attributes)
    got = np.asarray(layer(v.inputs["ids"]), dtype=np.float64)
    c = compare(got, v.outputs["logits"], "float64", v.tolerances["float64"])
    assert c.ok, c.describe("logits")


@pytest.mark.parametrize("id_", ["greedy_decode/gpt2-001", "greedy_decode/gpt2-eos-001"])
def test_tied_keras_generate_matches_the_greedy_golden_vector(spec, id_):
    v = _vector(spec, id_)
    a = dict(v.attributes)
    gen = {k: a.pop(k) for k in ("bos_id", "eos_id", "max_len")}
    del a["model"]
    layer = KL.DecoderOnly.from_spec(v.params, dtype="float64", **a)
    ids = layer.generate(v.inputs["prompt"], **gen)
    assert np.array_equal(np.asarray(ids), v.outputs["ids"]), v.id


def test_tied_keras_save_and_load_gives_identical_outputs(tmp_path):
    layer = KL.DecoderOnly(8, 2, 16, num_layers=1, pad_id=0, vocab_size=10, max_len=6,
                           tie_embeddings=True, dtype="float64")
    ids = np.array([[1, 4, 5, 0]])
    inp = keras.Input((4,), batch_size=1, dtype="int64")
    model = keras.Model(inp, layer(inp))
    want = model(ids)
    path = str(tmp_path / "tied.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(np.asarray(want), np.asarray(loaded(ids)))
    inner = [x for x in loaded.layers if isinstance(x, KL.DecoderOnly)][0]
    assert inner.tie_embeddings and "lm_head.w" not in inner.params()


def test_tied_gradient_is_the_sum_of_the_embedding_and_the_head_uses(spec):
    """One variable: its tape gradient equals the embedding's plus the head's, measured by
    an untied twin whose lm_head.w is a separate copy of embed.table^T (and no bias)."""
    v = _vector(spec, "decoder_only/gpt2-002")
    tied = KL.DecoderOnly.from_spec(v.params, dtype="float64", **v.attributes)
    twin = {**v.params, "lm_head.w": v.params["embed.table"].T.copy(),
            "lm_head.b": np.zeros(v.params["embed.table"].shape[0])}
    a = {**v.attributes, "tie_embeddings": False}
    untied = KL.DecoderOnly.from_spec(twin, dtype="float64", **a)
    target = tf.constant(np.random.default_rng(3).normal(size=v.outputs["logits"].shape))
    grads = []
    for layer in (tied, untied):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(v.inputs["ids"]) * target)
        p = layer.params()
        g = tape.gradient(loss, [p["embed.table"]] + ([p["lm_head.w"]] if "lm_head.w" in p
                                                       else []))
        grads.append([np.asarray(tf.convert_to_tensor(x)) for x in g])
    (g_tied,), (g_embed, g_head) = grads
    np.testing.assert_allclose(g_tied, g_embed + g_head.T, rtol=1e-10, atol=1e-12)
    assert not np.allclose(g_tied, g_embed)  # the head's use counts
