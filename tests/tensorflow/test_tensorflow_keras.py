"""TensorFlow-only project tests: converter round-trips are exact; every Keras layer and
model loads and exports spec parameters exactly, reproduces golden vectors, saves and
loads in Keras' own format, and trains with a GradientTape."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import keras  # noqa: E402
from attnspec.backends.tensorflow import convert, keras_layers  # noqa: E402
from attnspec.spec.compare import compare  # noqa: E402
from attnspec.spec.vectors import VECTORS_DIR, load  # noqa: E402

# Keras converts its own variables with np.array(x) (NumPy 2 asks for a copy keyword).
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")

RNG = np.random.default_rng(7)
KL = keras_layers


def _params(shapes):
    return {k: RNG.normal(size=s) for k, s in shapes.items()}


@pytest.fixture(scope="module")
def spec():
    return load(VECTORS_DIR)


# ---- converters --------------------------------------------------------------------------------

def test_mha_converter_round_trip_is_exact():
    p = _params(dict(w_q=(6, 8), w_k=(5, 8), w_v=(4, 12), w_o=(12, 7), b_q=(8,), b_k=(8,),
                     b_v=(12,), b_o=(7,)))
    back = convert.mha_from_keras(convert.mha_to_keras(p, num_heads=2))
    assert set(back) == set(p) and all(np.array_equal(p[k], back[k]) for k in p)


def test_mha_converter_round_trip_without_biases_is_exact():
    p = _params(dict(w_q=(6, 8), w_k=(6, 8), w_v=(6, 8), w_o=(8, 6)))
    back = convert.mha_from_keras(convert.mha_to_keras(p, num_heads=4))
    assert set(back) == set(p) and all(np.array_equal(p[k], back[k]) for k in p)


def test_mha_converter_to_keras_and_back_through_our_layer_is_exact():
    ours = KL.MultiHeadAttention(8, 2, dtype="float64")
    p = {k: RNG.normal(size=v.shape) for k, v in ours.spec_params().items()}
    ours.load_spec(p)
    back = KL.MultiHeadAttention.from_spec(
        convert.mha_from_keras(convert.mha_to_keras(ours.spec_params(), num_heads=2)),
        num_heads=2, dtype="float64").spec_params()
    assert all(np.array_equal(p[k], back[k]) for k in p)


def test_keras_builtins_convert_to_our_layers_and_back_exactly():
    x = RNG.normal(size=(2, 3, 8))
    theirs = convert.mha_to_keras(
        _params(dict(w_q=(8, 8), w_k=(8, 8), w_v=(8, 8), w_o=(8, 8), b_q=(8,), b_k=(8,),
                     b_v=(8,), b_o=(8,))), num_heads=2)
    ours = KL.MultiHeadAttention.from_keras(theirs, dtype="float64")
    back = convert.mha_from_keras(ours.to_keras())
    assert all(np.array_equal(v, back[k]) for k, v in convert.mha_from_keras(theirs).items())
    np.testing.assert_allclose(ours(x).numpy(), theirs(x, x, x).numpy(), rtol=1e-12, atol=1e-12)
    ln = keras.layers.LayerNormalization(epsilon=1e-5, dtype="float64")
    ln.build((None, 8))
    ln.gamma.assign(RNG.normal(size=8))
    ours_ln = KL.LayerNorm.from_keras(ln, dtype="float64")
    assert ours_ln.eps == 1e-5
    assert np.array_equal(ours_ln.to_keras().gamma.numpy(), ln.gamma.numpy())
    np.testing.assert_allclose(ours_ln(x).numpy(), ln(x).numpy(), rtol=1e-12, atol=1e-12)


def test_our_gqa_layer_has_h_kv_kv_heads_and_equals_keras_group_query_attention():
    """KL.MultiHeadAttention(num_kv_heads=2) holds w_k, w_v of H_kv*K columns and computes
    what keras.layers.GroupQueryAttention computes with the same weights (to_keras)."""
    ours = KL.MultiHeadAttention(8, 4, num_kv_heads=2, dtype="float64")
    shapes = {k: v.shape for k, v in ours.spec_params().items()}
    assert shapes["w_k"] == shapes["w_v"] == (8, 4) and shapes["w_q"] == (8, 8)
    ours.load_spec({k: RNG.normal(size=s) for k, s in shapes.items()})
    theirs = ours.to_keras()
    assert isinstance(theirs, keras.layers.GroupQueryAttention)
    assert (theirs.num_query_heads, theirs.num_key_value_heads) == (4, 2)
    x, m = RNG.normal(size=(2, 3, 8)), RNG.normal(size=(2, 5, 8))
    np.testing.assert_allclose(ours(x, m).numpy(), theirs(x, m, m).numpy(), rtol=1e-12,
                               atol=1e-12)
    interleaved = dict(ours.spec_params())  # kv head h % H_kv: a different layer
    interleaved["w_k"] = interleaved["w_k"][:, [2, 3, 0, 1]]
    other = KL.MultiHeadAttention.from_spec(interleaved, num_heads=4, num_kv_heads=2,
                                            dtype="float64")
    assert not np.allclose(other(x, m).numpy(), theirs(x, m, m).numpy())


def test_gru_converter_round_trip_is_exact_and_swaps_gates():
    p = _params(dict(w_ih=(3, 12), w_hh=(4, 12), b_ih=(12,), b_hh=(12,)))
    layer = convert.gru_to_keras(p)
    assert np.array_equal(layer.cell.kernel.numpy()[:, :4], p["w_ih"][:, 4:8])  # z first
    back = convert.gru_from_keras(layer)
    assert all(np.array_equal(p[k], back[k]) for k in p)


def test_layer_norm_and_additive_converters_round_trip_exactly():
    p = _params(dict(gamma=(5,), beta=(5,)))
    back, eps = convert.layer_norm_from_keras(convert.layer_norm_to_keras(p, eps=1e-5))
    assert eps == 1e-5 and all(np.array_equal(p[k], back[k]) for k in p)
    a = _params(dict(w_q=(3, 5), w_k=(4, 5), v=(5,)))
    back = convert.additive_from_keras(*convert.additive_to_keras(a))
    assert all(np.array_equal(a[k], back[k]) for k in a)


# ---- golden vectors through every Keras layer ------------------------------------------------

def _value_vectors(spec, function, limit=None):
    vs = [v for v in spec.vectors if v.function == function and v.expect == "value"
          and not v.deprecated and "float64" in v.dtypes]
    return vs[:limit] if limit else vs


def _run_layer(spec, v):
    fn = spec.functions[v.function]
    layer = KL.LAYERS[v.function].from_spec(v.params, dtype="float64", **v.attributes)
    args = [v.inputs.get(name) for name in fn.inputs]
    while args and args[-1] is None:
        args.pop()
    kw = {"return_weights": True} if v.function == "mha" else {}
    out = layer(*args, **kw)
    out = out if isinstance(out, (tuple, list)) else (out,)
    return layer, dict(zip(fn.returns, out))


# (function, how many of its value vectors to run: None = all)
GOLDEN = [("mha", None), ("layer_norm", None), ("feedforward", None), ("encoder_layer", None),
          ("decoder_layer", None), ("encoder", 3), ("decoder", 3), ("transformer", 3),
          ("encoder_only", 2), ("decoder_only", 2), ("seq2seq_attention", 5)]


@pytest.mark.parametrize("function,limit", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_keras_layer_reproduces_golden_vectors(spec, function, limit):
    vs = _value_vectors(spec, function, limit)
    assert vs, f"no float64 value vectors for {function}"
    for v in vs:
        layer, got = _run_layer(spec, v)
        for name, expected in v.outputs.items():
            c = compare(np.asarray(got[name], dtype=np.float64), expected, "float64",
                        v.tolerances["float64"])
            assert c.ok, f"{v.id} through keras_layers.{type(layer).__name__}: " + \
                c.describe(f"output {name!r}")


@pytest.mark.parametrize("function", [g[0] for g in GOLDEN])
def test_spec_to_layer_to_spec_params_is_exact(spec, function):
    v = _value_vectors(spec, function)[0]
    layer = KL.LAYERS[function].from_spec(v.params, dtype="float64", **v.attributes)
    back = layer.spec_params()
    assert set(back) == set(v.params)
    assert all(np.array_equal(back[k], v.params[k]) for k in back)
    config_copy = type(layer).from_config(layer.get_config())
    assert config_copy.get_config() == layer.get_config()


def test_seq2seq_generate_matches_greedy_golden_vector(spec):
    vs = [v for v in spec.vectors if v.function == "seq2seq_greedy_decode"
          and v.expect == "value" and not v.deprecated][:2]
    assert vs
    for v in vs:
        a = dict(v.attributes)
        gen = {k: a.pop(k) for k in ("bos_id", "eos_id", "max_len")}
        layer = KL.Seq2SeqAttention.from_spec(v.params, dtype="float64", **a)
        ids = layer.generate(v.inputs["src_ids"], **gen)
        assert np.array_equal(np.asarray(ids), v.outputs["ids"]), v.id


def test_load_spec_names_missing_extra_and_misshaped_parameters():
    from attnspec.spec.errors import ParameterError

    layer = KL.FeedForward(4, 6, dtype="float64")
    p = layer.spec_params()
    with pytest.raises(ParameterError, match="w1"):
        layer.load_spec({k: v for k, v in p.items() if k != "w1"})
    with pytest.raises(ParameterError, match="w3"):
        layer.load_spec({**p, "w3": p["w1"]})
    with pytest.raises(ParameterError, match="b2"):
        layer.load_spec({**p, "b2": np.zeros(5)})


# ---- fresh layers: save/load in Keras' own format, GradientTape ----------------------------

def _fresh():
    """(layer, symbolic inputs, concrete inputs, loss target shape) of every layer/model."""
    B, T, S, D, H, F, L = 2, 5, 4, 8, 2, 16, 11
    x, m = RNG.normal(size=(B, T, D)), RNG.normal(size=(B, S, D))
    src = RNG.integers(1, L, size=(B, S)).astype(np.int64)
    tgt = RNG.integers(1, L, size=(B, T)).astype(np.int64)
    f64 = "float64"
    common = dict(dtype=f64)
    return {
        "mha": (KL.MultiHeadAttention(D, H, **common), [x, m]),
        "layer_norm": (KL.LayerNorm(D, **common), [x]),
        "feedforward": (KL.FeedForward(D, F, activation="gelu", **common), [x]),
        "encoder_layer": (KL.EncoderLayer(D, H, F, **common), [x]),
        "decoder_layer": (KL.DecoderLayer(D, H, F, norm="pre", **common), [x, m]),
        "encoder": (KL.Encoder(D, H, F, num_layers=2, norm="pre", **common), [x]),
        "decoder": (KL.Decoder(D, H, F, num_layers=2, **common), [x, m]),
        "transformer": (KL.Transformer(D, H, F, num_layers=1, pad_id=0, vocab_size=L,
                                       **common), [src, tgt]),
        "encoder_only": (KL.EncoderOnly(D, H, F, num_layers=1, pad_id=0, vocab_size=L,
                                        max_len=8, **common), [tgt]),
        "decoder_only": (KL.DecoderOnly(D, H, F, num_layers=2, pad_id=0, vocab_size=L,
                                        max_len=8, **common), [tgt]),
        "seq2seq_additive": (KL.Seq2SeqAttention(L, L, 6, 8, attention="additive", pad_id=0,
                                                 **common), [src, tgt]),
        "seq2seq_concat": (KL.Seq2SeqAttention(L, L, 6, 8, attention="concat", pad_id=0,
                                               **common), [src, tgt]),
    }


FRESH = ["mha", "layer_norm", "feedforward", "encoder_layer", "decoder_layer", "encoder",
         "decoder", "transformer", "encoder_only", "decoder_only", "seq2seq_additive",
         "seq2seq_concat"]


def _out(y):
    return y[-1] if isinstance(y, (tuple, list)) else y


@pytest.mark.parametrize("name", FRESH)
def test_keras_save_and_load_gives_identical_outputs(tmp_path, name):
    layer, args = _fresh()[name]
    inputs = [keras.Input(a.shape[1:], batch_size=a.shape[0], dtype=str(a.dtype)) for a in args]
    model = keras.Model(inputs, layer(*inputs))
    want = model(args)
    path = str(tmp_path / f"{name}.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    got = loaded(args)
    for a, b in zip(tf.nest.flatten(want), tf.nest.flatten(got)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    inner = [x for x in loaded.layers if isinstance(x, KL.SpecLayer)][0]
    assert type(inner) is type(layer)
    for k, v in layer.spec_params().items():
        np.testing.assert_array_equal(v, inner.spec_params()[k])


@pytest.mark.parametrize("name", FRESH)
def test_gradient_tape_step_changes_parameters_and_reduces_loss(name):
    """A step along -gradient lowers the loss by at least half what the gradient predicts
    (Armijo's condition) for some step size of a halving ladder: true of the real gradient,
    whatever the (unseeded) initial weights, and not of a wrong one. A fixed step size was
    flaky: with some initial weights one SGD step of 0.05 raised encoder_only's loss."""
    layer, args = _fresh()[name]
    target = tf.constant(RNG.normal(size=_out(layer(*args)).shape))

    def loss():
        return float(tf.reduce_mean((_out(layer(*args)) - target) ** 2))

    with tf.GradientTape() as tape:
        start = tf.reduce_mean((_out(layer(*args)) - target) ** 2)
    variables = layer.trainable_variables
    grads = tape.gradient(start, variables)
    assert all(g is not None for g in grads), [v.name for v, g in zip(variables, grads) if g is None]
    before = layer.spec_params()
    saved = [v.numpy() for v in variables]
    slope = sum(float(tf.reduce_sum(tf.square(tf.convert_to_tensor(g)))) for g in grads)  # |g|^2
    assert slope > 0
    tried = []
    for step in 0.05 * 0.5 ** np.arange(12):
        keras.optimizers.SGD(step).apply_gradients(zip(grads, variables))
        tried.append(loss())
        if tried[-1] <= float(start) - 0.5 * step * slope:
            break
        for v, s in zip(variables, saved):
            v.assign(s)
    else:
        raise AssertionError(f"no step lowered the loss {float(start)} as its gradient "
                             f"predicts: {tried}")
    after = layer.spec_params()
    assert any(not np.array_equal(before[k], after[k]) for k in before)


def test_tensorflow_ops_provide_the_whole_composite_surface():
    import importlib

    from attnspec.backends.composite import OPS

    ops = importlib.import_module("attnspec.backends.tensorflow.ops")
    assert [name for name in OPS if not callable(getattr(ops, name, None))] == []
