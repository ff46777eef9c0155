"""The Flax NNX modules (backends/jax/nnx.py): golden vectors through every module, the
module's output is the backend function's, nnx.grad equals the backend's vjp and the golden
gradients, nnx.jit of the layers equals eager (a model under jit fails with a clear error),
parameters load and export exactly under their canonical paths.

Float64 throughout; the vectors are reused across tests, so each shape compiles once."""

import subprocess
import sys

import numpy as np
import pytest
from attnspec.spec.errors import ERROR_CLASSES, DTypeError, ParameterError

jax = pytest.importorskip("jax", reason="the jax extra is what tox -e jax-cpu installs")
pytest.importorskip("flax", reason="the flax extra is what tox -e jax-cpu installs")

import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from attnspec.backends import get_backend  # noqa: E402
from attnspec.backends.jax import nnx as N  # noqa: E402
from attnspec.conformance.runner import Result, judge_gradients, vjp  # noqa: E402
from attnspec.spec.compare import compare  # noqa: E402
from attnspec.spec.vectors import VECTORS_DIR, load  # noqa: E402
from flax import nnx  # noqa: E402


@pytest.fixture(scope="module")
def spec():
    return load(VECTORS_DIR)


@pytest.fixture(scope="module")
def backend():
    return get_backend("jax")


def _value_vectors(spec, function, limit=None):
    vs = [v for v in spec.vectors if v.function == function and v.expect == "value"
          and not v.deprecated and "float64" in v.dtypes]
    return vs[:limit] if limit else vs


def _args(spec, v) -> list:
    args = [v.inputs.get(name) for name in spec.functions[v.function].inputs]
    while args and args[-1] is None:
        args.pop()
    return args


def _outputs(spec, function, out) -> dict:
    return dict(zip(spec.functions[function].returns, out if isinstance(out, tuple) else (out,)))


def _paths(module) -> set:
    return {".".join(map(str, p)) for p, _ in nnx.to_flat_state(nnx.state(module, nnx.Param))}


# ---- every module: golden vectors, and the module's output is the backend function's -------

# (function, how many of its float64 value vectors)
GOLDEN = [("mha", 2), ("layer_norm", 3), ("rms_norm", 2), ("feedforward", 3),
          ("gated_feedforward", 2), ("encoder_layer", 2), ("decoder_layer", 2),
          ("llama_layer", 1), ("encoder", 1), ("decoder", 1), ("transformer", 1),
          ("encoder_only", 1), ("decoder_only", 1), ("llama_decoder_only", 1),
          ("seq2seq_attention", 1)]


def test_every_module_is_tested():
    assert sorted(f for f, _ in GOLDEN) == sorted(N.MODULES)


@pytest.mark.parametrize("function,limit", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_module_reproduces_golden_vectors_and_is_the_backend_function(spec, backend, function,
                                                                      limit):
    vs = _value_vectors(spec, function, limit)
    assert len(vs) == limit, f"{function}: {len(vs)} float64 value vectors"
    fn = spec.functions[function]
    for v in vs:
        module = N.MODULES[function].from_spec(v.params, **v.attributes)
        got = _outputs(spec, function, module(*_args(spec, v)))
        want = _outputs(spec, function, backend.function(fn.name, fn.module)(
            *_args(spec, v), params={k: jnp.asarray(a) for k, a in v.params.items()},
            **v.attributes))
        assert set(got) == set(v.outputs)
        for name, expected in v.outputs.items():
            c = compare(np.asarray(got[name], dtype=np.float64), expected, "float64",
                        v.tolerances["float64"])
            assert c.ok, f"{v.id} through nnx.{type(module).__name__}: " + \
                c.describe(f"output {name!r}")
            np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want[name]),
                                          err_msg=f"{v.id}: module != backend function")


def test_mha_defaults_key_and_value_to_the_query(spec):
    v = next(v for v in _value_vectors(spec, "mha") if v.inputs.get("mask") is None)
    module = N.MultiHeadAttention.from_spec(v.params, **v.attributes)
    q, k = v.inputs["query"], v.inputs["key"]
    for got, want in zip(module(q), module(q, q, q)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for got, want in zip(module(q, k), module(q, k, k)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# ---- parameters: canonical paths, exact round trip, load_spec errors ---------------------

@pytest.mark.parametrize("function", sorted(N.MODULES))
def test_from_spec_to_spec_params_is_exact_and_state_paths_are_canonical(spec, function):
    v = _value_vectors(spec, function)[0]
    module = N.MODULES[function].from_spec(v.params, **v.attributes)
    assert _paths(module) == set(v.params)
    back = module.spec_params()
    assert set(back) == set(v.params)
    for k, a in back.items():
        assert a.dtype == v.params[k].dtype and np.array_equal(np.asarray(a), v.params[k]), k


def test_state_paths_are_attribute_paths():
    p = {"layers.0.self_attn.w_q": np.ones((2, 2)), "layers.1.norm1.gamma": np.ones(2)}
    module = N.Encoder.from_spec(p, num_layers=2, num_heads=1)
    assert getattr(module.layers, "0").self_attn.w_q[...].shape == (2, 2)
    assert isinstance(getattr(module.layers, "1").norm1.gamma, nnx.Param)


def test_load_spec_replaces_values_and_names_missing_unexpected_and_misshaped(spec):
    module = N.FeedForward.from_spec({"w1": np.zeros((4, 6)), "b1": np.zeros(6),
                                      "w2": np.zeros((6, 4)), "b2": np.zeros(4)})
    p = {k: np.arange(np.prod(a.shape), dtype=np.float64).reshape(a.shape) + 1
         for k, a in module.spec_params().items()}
    assert module.load_spec(p) is module
    assert all(np.array_equal(np.asarray(module.spec_params()[k]), p[k]) for k in p)
    with pytest.raises(ParameterError, match=r"missing parameter\(s\) \['w1'\]"):
        module.load_spec({k: a for k, a in p.items() if k != "w1"})
    with pytest.raises(ParameterError, match=r"unexpected \['w3'\]"):
        module.load_spec({**p, "w3": p["w1"]})
    with pytest.raises(ParameterError, match=r"'b2' has shape \(5,\), expected \(4,\)"):
        module.load_spec({**p, "b2": np.zeros(5)})
    assert all(np.array_equal(np.asarray(module.spec_params()[k]), p[k]) for k in p), \
        "a refused load_spec changed parameters"


def test_from_spec_refuses_paths_that_collide():
    with pytest.raises(ParameterError, match="'a.b'"):
        N.LayerNorm.from_spec({"a": np.ones(2), "a.b": np.ones(2)})
    with pytest.raises(ParameterError, match="'a'"):
        N.LayerNorm.from_spec({"a.b": np.ones(2), "a": np.ones(2)})
    with pytest.raises(ParameterError, match="'load_spec'"):
        N.LayerNorm.from_spec({"load_spec": np.ones(2)})


def test_split_and_merge_keep_parameters_and_outputs(spec):
    v = _value_vectors(spec, "encoder_layer")[0]
    module = N.EncoderLayer.from_spec(v.params, **v.attributes)
    graphdef, state = nnx.split(module)
    copy = nnx.merge(graphdef, state)
    assert all(np.array_equal(np.asarray(a), np.asarray(copy.spec_params()[k]))
               for k, a in module.spec_params().items())
    np.testing.assert_array_equal(np.asarray(copy(*_args(spec, v))),
                                  np.asarray(module(*_args(spec, v))))


# ---- nnx.grad: the backend's vjp and the golden gradients ---------------------------------

GRADIENTS = ["mha", "feedforward", "layer_norm", "encoder_layer", "decoder_only"]


@pytest.mark.parametrize("function", GRADIENTS)
def test_nnx_grad_equals_the_backends_vjp_and_the_golden_gradients(spec, backend, function):
    v = next(v for v in spec.vectors if v.function == function and v.expect == "gradient"
             and not v.deprecated and "float64" in v.dtypes)
    fn = spec.functions[v.function]
    module = N.MODULES[function].from_spec(v.params, **v.attributes)
    floats = {k: jnp.asarray(a) for k, a in v.inputs.items()
              if a is not None and np.asarray(a).dtype.kind == "f"}
    rest = {k: a for k, a in v.inputs.items() if k not in floats and a is not None}

    def loss(m, xs):  # <cotangent, output> summed over the outputs: its gradient is the VJP
        inputs = {**rest, **xs}
        out = _outputs(spec, function, m(*[inputs.get(n) for n in fn.inputs if n in inputs]))
        return sum(jnp.sum(out[n] * v.cotangents[n]) for n in v.cotangents)

    grad_module, grad_inputs = nnx.grad(loss, argnums=(0, 1))(module, floats)
    grad_params = {".".join(map(str, p)): np.asarray(g[...])
                   for p, g in nnx.to_flat_state(grad_module)}
    grad_inputs = {k: np.asarray(g) for k, g in grad_inputs.items()}
    want_inputs, want_params, _ = vjp(backend, fn, v.inputs, v.attributes, v.params,
                                      v.cotangents, "float64", "cpu")
    assert set(grad_params) == set(want_params) == set(v.params)
    assert set(grad_inputs) == set(want_inputs)
    for group, got, want in (("param", grad_params, want_params),
                             ("input", grad_inputs, want_inputs)):
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-13, atol=1e-15,
                                       err_msg=f"{v.id}: gradient of {group} {k}")
    res = judge_gradients(v, "float64", grad_inputs, grad_params, Result(v.id, "float64", "pass"))
    assert res.status == "pass", res.messages


def test_an_optimizer_step_under_nnx_jit_moves_parameters_and_lowers_the_loss(spec):
    v = _value_vectors(spec, "encoder_layer")[0]
    module = N.EncoderLayer.from_spec(v.params, **v.attributes)
    x = jnp.asarray(v.inputs["x"])
    target = jnp.asarray(np.random.default_rng(0).normal(size=x.shape))
    opt = nnx.Optimizer(module, optax.sgd(0.05), wrt=nnx.Param)

    def loss(m):
        return jnp.mean((m(x) - target) ** 2)

    @nnx.jit
    def step(m, opt):
        value, grads = nnx.value_and_grad(loss)(m)
        opt.update(m, grads)
        return value

    before = module.spec_params()
    losses = [float(step(module, opt)) for _ in range(3)]
    assert losses[-1] < losses[0], losses
    assert float(loss(module)) < losses[-1]
    assert all(not np.array_equal(np.asarray(before[k]), np.asarray(a))
               for k, a in module.spec_params().items() if not k.endswith(("b_q", "b_k"))), \
        "a parameter with a gradient did not move"


# ---- nnx.jit ---------------------------------------------------------------------------------

JITTED = ["mha", "layer_norm", "feedforward", "encoder_layer", "decoder_layer", "decoder"]


@pytest.mark.parametrize("function", JITTED)
def test_nnx_jit_of_a_layer_equals_eager(spec, function):
    vs = _value_vectors(spec, function)
    v = next((v for v in vs if any(k.endswith("mask") and a is not None
                                   for k, a in v.inputs.items())), vs[0])
    module = N.MODULES[function].from_spec(v.params, **v.attributes)
    args = _args(spec, v)
    eager = _outputs(spec, function, module(*args))
    jitted = _outputs(spec, function, nnx.jit(lambda m, *a: m(*a))(module, *args))
    for name in eager:
        assert isinstance(jitted[name], jax.Array)
        np.testing.assert_allclose(np.asarray(jitted[name]), np.asarray(eager[name]),
                                   rtol=1e-12, atol=1e-14, err_msg=f"{v.id} {name}")


def test_a_layer_under_jit_still_checks_shapes():
    module = N.LayerNorm.from_spec({"gamma": np.ones(4), "beta": np.zeros(4)})
    with pytest.raises(ParameterError, match="gamma"):
        nnx.jit(lambda m, x: m(x))(module, jnp.ones((2, 3)))


@pytest.mark.parametrize("how", ["nnx.jit, ids traced", "jax.jit, ids closed over"])
def test_a_model_under_jit_raises_a_clear_error_not_a_tracer_leak(spec, how):
    v = _value_vectors(spec, "decoder_only")[0]
    module = N.DecoderOnly.from_spec(v.params, **v.attributes)
    ids = v.inputs["ids"]
    with pytest.raises(DTypeError, match="DecoderOnly cannot run under jax.jit") as err:
        if how.startswith("nnx"):
            nnx.jit(lambda m, i: m(i))(module, ids)
        else:
            graphdef, state = nnx.split(module)
            jax.jit(lambda s: nnx.merge(graphdef, s)(ids))(state)
    assert "call it eagerly" in str(err.value)


# ---- greedy decoding --------------------------------------------------------------------------

GREEDY = {"transformer": "greedy_decode/defaults-001",
          "decoder_only": "greedy_decode/prompt-only-001",
          "llama_decoder_only": "greedy_decode/llama-defaults-001"}


@pytest.mark.parametrize("model", sorted(GREEDY))
def test_generate_of_a_model_built_for_its_forward_matches_the_greedy_golden_vector(spec, model):
    """The module holds the model function's attributes only, and those at their defaults
    are left out: generate supplies what greedy_decode needs (norm, activation, eps)."""
    v = next(v for v in spec.vectors if v.id == GREEDY[model])
    f = spec.functions[model]
    attrs = {k: a for k, a in v.attributes.items() if k in f.required_attributes
             or (k in f.attributes and a != f.attributes[k])}
    module = N.MODULES[model].from_spec(v.params, **attrs)
    prompt = v.inputs["src_ids"] if model == "transformer" else v.inputs["prompt"]
    ids = module.generate(prompt, **{k: v.attributes[k] for k in ("bos_id", "eos_id", "max_len")})
    assert np.array_equal(np.asarray(ids), v.outputs["ids"]), v.id


@pytest.mark.parametrize("model", sorted(GREEDY))
def test_generate_decodes_with_the_model_functions_defaults(spec, model):
    """What generate passes to greedy_decode for a module built with the required attributes
    only: the defaults in the vector file's header (spec/FUNCTIONS.md), and the Llama's
    norm and activation as greedy_decode requires them."""
    v = next(v for v in spec.vectors if v.id == GREEDY[model])
    f = spec.functions[model]
    required = {k: v.attributes[k] for k in f.required_attributes}
    want = {**f.attributes, **required}
    if model == "llama_decoder_only":
        want.update(norm="pre", activation="silu")
        for name in N.LlamaDecoderOnly.uncached:  # not in the cached path: left out at False
            want.pop(name, None)
    assert N.MODULES[model].from_spec(v.params, **required).greedy_attributes() == want


def test_llama_generate_refuses_what_the_cached_path_does_not_take(spec):
    """attention_bias and tie_embeddings (Qwen2's model) are forward-pass attributes only."""
    from attnspec.spec.errors import ConfigError

    v = next(v for v in spec.vectors if v.id == "llama/model-qwen2-001")
    a = {k: x for k, x in v.attributes.items() if k != "pad_id"}
    module = N.LlamaDecoderOnly.from_spec(v.params, pad_id=0, **a)
    with pytest.raises(ConfigError, match="attention_bias"):
        module.generate(v.inputs["ids"][:, :2], bos_id=1, eos_id=2, max_len=4)


def test_seq2seq_generate_matches_the_greedy_golden_vector(spec):
    v = _value_vectors(spec, "seq2seq_greedy_decode")[0]
    a = dict(v.attributes)
    gen = {k: a.pop(k) for k in ("bos_id", "eos_id", "max_len")}
    ids = N.Seq2SeqAttention.from_spec(v.params, **a).generate(v.inputs["src_ids"], **gen)
    assert np.array_equal(np.asarray(ids), v.outputs["ids"]), v.id


# ---- flax stays optional ----------------------------------------------------------------------

def test_importing_the_jax_backend_does_not_import_flax():
    r = subprocess.run([sys.executable, "-c", "import sys, attnspec.backends.jax\n"
                        "print('flax' in sys.modules)"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


# ---- bad input: the spec's errors, through the modules ------------------------------------

@pytest.mark.parametrize("function", sorted(N.MODULES))
def test_error_vectors_raise_the_spec_error_through_the_module(spec, function):
    vs = [v for v in spec.vectors if v.function == function and v.expect == "error"
          and not v.deprecated][:3]
    assert vs, f"no error vectors for {function}"
    for v in vs:
        with pytest.raises(ERROR_CLASSES[v.error]) as err:
            N.MODULES[function].from_spec(v.params or {}, **v.attributes)(*_args(spec, v))
        absent = [m for m in v.error_mentions if m not in str(err.value)]
        assert not absent, f"{v.id}: {err.value!r} does not mention {absent}"
