"""The composites' glue on the host (backends/jax/host.py): on concrete CPU arrays a
composite's kernels run in XLA and its glue in NumPy, compiling nothing per shape; the
result equals the all-JAX path (buckets off) and comes back as JAX arrays, trace included;
under a transformation, or off the host dtypes, every operator is JAX's. And the backend's
host-to-device copy (``_core.to_device``) is ``jax.device_put``'s."""

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the jax extra is what tox -e jax-cpu installs")

import attnspec.backends.jax as J  # noqa: E402
from attnspec.backends.jax import buckets, host  # noqa: E402
from attnspec.backends.jax._core import to_device  # noqa: E402
from attnspec.spec.trace import Trace  # noqa: E402
from attnspec.spec.vectors import default_spec  # noqa: E402

RNG = np.random.default_rng(11)
SPEC = default_spec()


@pytest.fixture(scope="module")
def backend():
    return J.JaxBackend()


@pytest.fixture(autouse=True)
def buckets_on():
    buckets.enable(True)
    yield
    buckets.enable(True)


def vector(vid: str):
    return next(v for v in SPEC.vectors if v.id == vid)


def on_device(backend, arrays: dict) -> dict:
    return {n: backend.asarray(a, dtype=None if a.dtype.kind in "biu" else "float64")
            for n, a in arrays.items()}


def compilations(fn):
    """The programs fn() builds (lowered, then compiled or read from a compile cache)."""
    seen = []

    def listen(event, duration, **_):
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            seen.append(event)
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        fn()
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    return len(seen)


def test_a_layer_at_new_shapes_of_its_buckets_compiles_nothing(backend):
    """A llama layer at T = 5 compiles its kernels; at T = 6, 7, 8 (B = 2: 10 to 16 rows, the
    same buckets), with their residual adds, slices and casts at new exact shapes, it
    compiles nothing."""
    v = vector("llama/layer-gqa-001")
    layer = backend.function("llama_layer", "layers")
    params = on_device(backend, v.params)
    b, _, d = v.inputs["x"].shape

    def at(t):
        x = backend.asarray(RNG.standard_normal((b, t, d)), dtype="float64")
        return layer(x, params=params, **v.attributes)

    assert b == 2
    at(5)
    assert compilations(lambda: [at(t) for t in (6, 7, 8)]) == 0
    buckets.enable(False)  # the all-JAX path compiles its glue per shape
    at(5)
    assert compilations(lambda: at(6)) > 0


def test_the_host_glue_equals_the_all_jax_path_and_returns_jax_arrays(backend):
    v = vector("encoder_layer/pre-001")
    layer = backend.function("encoder_layer", "layers")
    params = on_device(backend, v.params)
    x = backend.asarray(v.inputs["x"], dtype="float64")
    outs, traces = [], []
    for on in (True, False):
        buckets.enable(on)
        trace = Trace()
        outs.append(layer(x, params=params, trace=trace, **v.attributes))
        traces.append(trace.as_dict())
    assert isinstance(outs[0], jax.Array) and outs[0].dtype == x.dtype
    np.testing.assert_allclose(np.asarray(outs[0]), np.asarray(outs[1]), rtol=1e-13, atol=1e-14)
    assert traces[0].keys() == traces[1].keys() and "self_attn.weights" in traces[0]
    for name, value in traces[0].items():
        assert isinstance(value, jax.Array), name  # recorded on the host, handed back on device
        np.testing.assert_allclose(np.asarray(value), np.asarray(traces[1][name]), rtol=1e-13,
                                   atol=1e-14)


def test_decoding_hands_back_int64_ids_on_the_device_equal_to_the_vector(backend):
    v = vector("greedy_decode/gpt-001")
    decode = backend.function("greedy_decode", "decoding")
    ids = decode(**on_device(backend, v.inputs), params=on_device(backend, v.params),
                 **v.attributes)
    assert isinstance(ids, jax.Array) and ids.dtype == np.int64
    np.testing.assert_array_equal(np.asarray(ids), v.outputs[next(iter(v.outputs))])


def test_glue_runs_on_the_host_only_for_concrete_cpu_arrays_of_host_dtypes():
    x = jax.device_put(np.ones((2, 3), np.float32))
    assert host.applies((x,), {"params": {"w": x}})
    assert not host.applies((x.astype(jax.numpy.bfloat16),), {})  # XLA may fuse its roundings
    assert not host.applies((x,), {"params": {"w": x.astype(jax.numpy.float16)}})
    seen = []
    jax.jit(lambda a: seen.append(host.applies((a,), {})) or a)(x)
    assert seen == [False]  # a tracer
    buckets.enable(False)
    assert not host.applies((x,), {})


def test_under_jit_and_vjp_a_composite_runs_in_jax_and_agrees(backend):
    v = vector("llama/layer-gqa-001")
    layer = backend.function("llama_layer", "layers")
    params = on_device(backend, v.params)
    x = backend.asarray(v.inputs["x"], dtype="float64")

    def run(a):
        return layer(a, params=params, **v.attributes)

    eager = np.asarray(run(x))
    np.testing.assert_allclose(np.asarray(jax.jit(run)(x)), eager, rtol=1e-12, atol=1e-13)
    out, pull = jax.vjp(run, x)
    np.testing.assert_allclose(np.asarray(out), eager, rtol=1e-12, atol=1e-13)
    assert pull(jax.numpy.ones_like(out))[0].shape == x.shape


@pytest.mark.parametrize("value", [np.ones((3, 4)), np.arange(12).reshape(3, 4)[:, ::2],
                                   np.float32(2.5), np.array(True), np.zeros((0, 3), np.float32),
                                   np.ones((2, 3), order="F")],
                         ids=["float64", "strided-int", "0-d", "bool", "empty", "fortran"])
def test_to_device_is_jax_device_put(value):
    value = np.asarray(value)
    for device in (None, jax.devices("cpu")[0]):
        got = to_device(value, device)
        want = jax.device_put(value, device)
        assert (got.shape, got.dtype, got.committed, got.devices()) == \
            (want.shape, want.dtype, want.committed, want.devices())
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
