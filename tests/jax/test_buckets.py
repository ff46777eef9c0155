"""Shape buckets (backends/jax/buckets.py): a bucketed call returns what the exact-shape
kernel returns, every shape of a bucket shares one compilation, and traced or large calls
run at their exact shapes.

Each comparison calls the same function twice in one process, buckets on and off; the
golden vectors judge both paths as well (the suite runs bucketed, its gradients too, through
the kernels' custom VJPs; the Flax modules under jit run traced, at the exact shapes)."""

import numpy as np
import pytest
from attnspec.spec.errors import ConfigError

jax = pytest.importorskip("jax", reason="the jax extra is what tox -e jax-cpu installs")

import attnspec.backends.jax as J  # noqa: E402
from attnspec.backends.jax import attention, buckets  # noqa: E402

RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def backend():
    return J.JaxBackend()


def both(backend, name, module, inputs: dict, **kw):
    """The function's outputs as NumPy arrays, buckets on, then off."""
    fn = backend.function(name, module)
    arrays = {k: v if not isinstance(v, np.ndarray) else
              backend.asarray(v, dtype=None if v.dtype.kind in "biu" else "float64")
              for k, v in inputs.items()}
    out = []
    for on in (True, False):
        buckets.enable(on)
        y = fn(**arrays, **kw)
        out.append([backend.to_numpy(a) for a in (y if isinstance(y, tuple) else (y,))])
    buckets.enable(True)  # the default, for the tests after
    return out


def same(on, off, rtol=1e-13):
    assert len(on) == len(off)
    for a, b in zip(on, off):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-15, equal_nan=True)


def normal(*shape):
    return RNG.standard_normal(shape)


def test_size_is_the_next_power_of_two_at_least_min():
    assert [buckets.size(n) for n in (0, 1, 7, 8, 9, 16, 17, 100)] == [8, 8, 8, 8, 16, 16, 32, 128]


def test_sdpa_with_broadcast_batches_mask_bias_softcap_and_a_masked_nan_value(backend):
    q, k, v = normal(2, 1, 3, 5), normal(1, 4, 6, 5), normal(2, 4, 6, 3)
    v[0, 1, 2, 0] = np.nan  # key 2 is masked for every query: it must not reach the output
    mask = RNG.random((3, 6)) < 0.7
    mask[:, 2] = False
    mask[1] = False  # a fully masked row: zero weights, zero output
    on, off = both(backend, "sdpa", "attention", dict(q=q, k=k, v=v, mask=mask, bias=normal(3, 6)),
                   softcap=2.0)
    same(on, off)
    assert on[0].shape == (2, 4, 3, 3) and on[1].shape == (2, 4, 3, 6)
    assert np.isfinite(on[0]).all() and (on[1][..., 1, :] == 0).all()


def test_sdpa_grouped_query(backend):
    q, k, v = normal(2, 4, 3, 2), normal(2, 2, 5, 2), normal(2, 2, 5, 3)
    same(*both(backend, "sdpa", "attention", dict(q=q, k=k, v=v), num_kv_heads=2))


def test_mha_with_gqa_biases_and_a_mask(backend):
    b, t, s, d, h, kv, kw = 2, 3, 5, 6, 4, 2, 3
    params = {"w_q": normal(d, h * kw), "w_k": normal(d + 1, kv * kw), "w_v": normal(d - 1, kv * 2),
              "w_o": normal(h * 2, 7), "b_q": normal(h * kw), "b_o": normal(7)}
    params = {k: backend.asarray(v, dtype="float64") for k, v in params.items()}
    mask = RNG.random((b, 1, t, s)) < 0.8
    on, off = both(backend, "mha", "multihead",
                   dict(query=normal(b, t, d), key=normal(b, s, d + 1), value=normal(b, s, d - 1),
                        mask=mask), num_heads=h, num_kv_heads=kv, params=params)
    same(on, off)
    assert on[0].shape == (b, t, 7) and on[1].shape == (b, h, t, s)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_along_any_axis_with_infinities(backend, axis):
    x = normal(3, 4, 5)
    x[0, 0, 0], x[1, 2, 3] = np.inf, -np.inf
    mask = RNG.random((3, 4, 5)) < 0.7
    same(*both(backend, "softmax", "attention", dict(x=x, mask=mask), axis=axis))


@pytest.mark.parametrize("score", ["dot", "general", "concat"])
def test_luong_every_score(backend, score):
    d = 4
    params = {"dot": {}, "general": {"w": normal(d, d)},
              "concat": {"w": normal(2 * d, 5), "v": normal(5)}}[score]
    params = {k: backend.asarray(v, dtype="float64") for k, v in params.items()}
    same(*both(backend, "luong_attention", "alignment",
               dict(query=normal(2, 3, d), keys=normal(2, 6, d), values=normal(2, 6, 3),
                    mask=RNG.random((2, 3, 6)) < 0.8), score=score, params=params))


def test_additive_and_topk(backend):
    params = {k: backend.asarray(v, dtype="float64")
              for k, v in {"w_q": normal(3, 5), "w_k": normal(4, 5), "v": normal(5)}.items()}
    same(*both(backend, "additive_attention", "alignment",
               dict(query=normal(2, 3, 3), keys=normal(2, 6, 4)), params=params))
    same(*both(backend, "topk_attention", "attention",
               dict(q=normal(2, 3, 4), k=normal(2, 6, 4), v=normal(2, 6, 2)), top_k=2))


def test_rowwise_kernels_and_a_scalar(backend):
    x = normal(2, 3, 6)
    f = {"w1": normal(6, 9), "b1": normal(9), "w2": normal(9, 6), "b2": normal(6)}
    f = {k: backend.asarray(v, dtype="float64") for k, v in f.items()}
    same(*both(backend, "feedforward", "feedforward", dict(x=x), activation="gelu", params=f))
    norm = {"gamma": backend.asarray(normal(6), dtype="float64"),
            "beta": backend.asarray(normal(6), dtype="float64")}
    same(*both(backend, "layer_norm", "norm", dict(x=x), params=norm))
    table = {"table": backend.asarray(normal(11, 6), dtype="float64")}
    same(*both(backend, "embedding", "embedding", dict(ids=np.array([[3, 10, 0]])), params=table))
    on, off = both(backend, "softcap", "attention", dict(x=np.array(3.0)), cap=2.0)
    same(on, off)
    assert on[0].shape == ()


def test_the_shapes_of_a_bucket_share_one_compilation(backend):
    buckets.enable(True)
    sdpa = backend.function("sdpa", "attention")
    before = attention._sdpa._cache_size()
    for t in range(1, 9):
        for s in range(1, 9):
            q = backend.asarray(normal(2, t, 3), dtype="float32")
            k = backend.asarray(normal(2, s, 3), dtype="float32")
            sdpa(q, k, k)
    assert attention._sdpa._cache_size() - before <= 1  # 64 shapes, one program


def _no_padding(*args, **kw):
    raise AssertionError("padded where the call should run at its exact shape")


def test_a_large_call_runs_at_its_exact_shape(monkeypatch, backend):
    x = backend.asarray(normal(3, 5), dtype="float64")
    self_attention = backend.function("self_attention", "multihead")
    params = {"w_q": x.T, "w_k": x.T, "w_v": x.T}
    monkeypatch.setattr(buckets, "pad", _no_padding)
    with pytest.raises(AssertionError, match="padded"):  # small: bucketed, so it pads
        self_attention(x[None], params=params)
    monkeypatch.setattr(buckets, "MAX_ELEMENTS", 10)
    y = self_attention(x[None], params=params)  # past MAX_ELEMENTS: nothing padded
    assert y[0].shape == (1, 3, 3)


def test_under_jit_and_vjp_the_kernels_run_at_the_exact_shapes(monkeypatch, backend):
    import jax.numpy as jnp

    buckets.enable(True)
    sdpa = backend.function("sdpa", "attention")
    q = backend.asarray(normal(3, 4), dtype="float64")
    eager = np.asarray(sdpa(q, q, q)[0])  # bucketed
    monkeypatch.setattr(buckets, "pad", _no_padding)
    jitted = jax.jit(lambda q: sdpa(q, q, q)[0])(q)
    np.testing.assert_allclose(np.asarray(jitted), eager, rtol=1e-13)
    grad = jax.jit(jax.grad(lambda q: jnp.sum(sdpa(q, q, q)[0])))(q)  # traced: exact shapes
    assert grad.shape == (3, 4) and np.isfinite(np.asarray(grad)).all()


def grads_both(backend, name, module, inputs: dict, wrt: tuple, params=None, **kw):
    """The VJP (backend.vjp, as the suite's gradient vectors call it) of the function's
    outputs along fixed random cotangents, buckets on, then off: {name: ndarray} twice."""
    fn = backend.function(name, module)
    call = {k: backend.asarray(v, dtype=None if v.dtype.kind in "biu" else "float64")
            if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    if params is not None:
        call["params"] = {k: backend.asarray(v, dtype="float64") for k, v in params.items()}
    out = fn(**call, **kw)
    names = J.returns_of(name)
    outs = dict(zip(names, out if isinstance(out, tuple) else (out,)))
    rng = np.random.default_rng(3)
    cts = {k: backend.asarray(rng.standard_normal(np.shape(o)), dtype="float64")
           for k, o in outs.items() if o is not None and k in wrt}
    got = []
    for on in (True, False):
        buckets.enable(on)
        gi, gp = backend.vjp(name, module, {**call, **kw}, cts)
        got.append({k: np.asarray(g) for k, g in {**gi, **gp}.items()})
    buckets.enable(True)
    return got


def same_grads(on, off, rtol=1e-12):
    assert on.keys() == off.keys() and on
    for k in on:
        assert on[k].shape == off[k].shape and on[k].dtype == off[k].dtype, k
        np.testing.assert_allclose(on[k], off[k], rtol=rtol, atol=1e-13, equal_nan=True,
                                   err_msg=k)


def test_gradients_under_vjp_of_concrete_arrays_run_bucketed_and_equal_the_exact_ones(backend):
    """jax.vjp of concrete arrays (the suite's gradient vectors) runs the bucketed kernels'
    custom VJPs; the cotangents equal those of the exact-shape kernels, broadcast inputs
    included (their cotangents summed over the broadcast axes)."""
    mask = RNG.random((3, 5)) > 0.3
    mask[1] = False  # a row with no key
    on, off = grads_both(backend, "sdpa", "attention",
                         dict(q=normal(2, 2, 3, 4), k=normal(2, 1, 5, 4), v=normal(2, 1, 5, 6),
                              mask=mask, bias=normal(3, 5)),
                         ("output", "weights"), softcap=2.5, num_kv_heads=1)
    same_grads(on, off)
    same_grads(*grads_both(backend, "sdpa_lse", "attention",
                           dict(q=normal(3, 4), k=normal(5, 4), v=normal(5, 2)),
                           ("output", "lse")))
    x = normal(2, 3, 6)
    same_grads(*grads_both(backend, "layer_norm", "norm", dict(x=x), ("y",),
                           params={"gamma": normal(6), "beta": normal(6)}))
    same_grads(*grads_both(backend, "feedforward", "feedforward", dict(x=x), ("y",),
                           params={"w1": normal(6, 9), "b1": normal(9), "w2": normal(9, 6),
                                   "b2": normal(6)}, activation="gelu"))
    same_grads(*grads_both(backend, "rope", "positional", dict(x=normal(2, 5, 8)), ("y",),
                           convention="half", offset=3))
    same_grads(*grads_both(backend, "mha", "multihead",
                           dict(query=normal(2, 3, 8), key=normal(2, 5, 8), value=normal(2, 5, 8)),
                           ("output", "weights"), num_heads=4, num_kv_heads=2,
                           params={"w_q": normal(8, 8), "w_k": normal(8, 4), "w_v": normal(8, 4),
                                   "w_o": normal(8, 8)}))



def test_the_gradients_of_mha_moe_and_the_composites_projections_run_bucketed_and_equal(backend):
    """mha with every bias, a mask and odd widths (its own padded pullback), moe (tokens
    padded; two outputs) and a Llama layer (ops.matmul's projections, row-wise) under
    jax.vjp of concrete arrays equal their exact-shape gradients."""
    mask = RNG.random((2, 1, 3, 5)) > 0.3
    mask[0, 0, 1] = False  # a query with no key
    w = {"w_q": normal(6, 6), "b_q": normal(6), "w_k": normal(5, 6), "b_k": normal(6),
         "w_v": normal(7, 9), "b_v": normal(9), "w_o": normal(9, 5), "b_o": normal(5)}
    same_grads(*grads_both(backend, "mha", "multihead",
                           dict(query=normal(2, 3, 6), key=normal(2, 5, 5),
                                value=normal(2, 5, 7), mask=mask),
                           ("output", "weights"), num_heads=3, params=w))
    e, d, f = 4, 6, 5
    moe = {"router.w": normal(d, e), "experts.w_gate": normal(e, d, f),
           "experts.w_up": normal(e, d, f), "experts.w_down": normal(e, f, d),
           "shared.w_gate": normal(d, f), "shared.w_up": normal(d, f),
           "shared.w_down": normal(f, d), "shared_gate.w": normal(d, 1)}
    same_grads(*grads_both(backend, "moe", "moe", dict(x=normal(5, d)), ("y", "router_logits"),
                           params=moe, top_k=2, renormalize=True))
    llama = {"attn_norm.gamma": normal(8), "attn.w_q": normal(8, 8), "attn.w_k": normal(8, 4),
             "attn.w_v": normal(8, 4), "attn.w_o": normal(8, 8), "ffn_norm.gamma": normal(8),
             "ffn.w_gate": normal(8, 6), "ffn.w_up": normal(8, 6), "ffn.w_down": normal(6, 8)}
    same_grads(*grads_both(backend, "llama_layer", "layers", dict(x=normal(2, 3, 8)), ("y",),
                           params=llama, num_heads=2, num_kv_heads=1))

def test_the_gradients_of_a_bucket_compile_nothing_new(backend, caplog):
    """After one gradient of sdpa at T = 3, those at T = 5, 6, 7 (the same bucket, 8) compile
    nothing: the forward and the pullback run at the bucket's shapes."""
    def grad(t):
        q = normal(2, t, 4)
        return grads_both(backend, "sdpa", "attention", dict(q=q, k=normal(2, t + 1, 4),
                                                             v=normal(2, t + 1, 4)), ("output",))
    same_grads(*grad(3))
    fn = backend.function("sdpa", "attention")
    jax.config.update("jax_log_compiles", True)
    try:
        with caplog.at_level("WARNING", logger="jax"):
            for t in (5, 6, 7):
                call = {n: backend.asarray(normal(2, t + (n != "q"), 4), dtype="float64")
                        for n in ("q", "k", "v")}
                out, _ = fn(**call)
                backend.vjp("sdpa", "attention", call, {"output": out})
    finally:
        jax.config.update("jax_log_compiles", False)
    compiled = [r.getMessage()[:80] for r in caplog.records if "Compiling" in r.getMessage()]
    assert not compiled


def test_an_unknown_buckets_value_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="buckets='maybe'"):
        J.JaxBackend(buckets="maybe")


def test_relative_attention_and_rope(backend):
    params = {"rel_k": backend.asarray(normal(5, 4), dtype="float64"),
              "rel_v": backend.asarray(normal(5, 3), dtype="float64")}
    same(*both(backend, "relative_attention", "positional",
               dict(q=normal(2, 3, 4), k=normal(2, 6, 4), v=normal(2, 6, 3),
                    mask=RNG.random((2, 3, 6)) < 0.8), max_distance=2, params=params))
    for convention in ("interleaved", "half"):
        same(*both(backend, "rope", "positional", dict(x=normal(2, 3, 5, 6)), offset=4,
                   convention=convention))


def test_sdpa_lse_and_sinks_with_a_mask_bias_softcap_gqa_and_a_fully_masked_row(backend):
    q, k, v = normal(2, 4, 3, 5), normal(2, 2, 6, 5), normal(2, 2, 6, 3)
    mask = RNG.random((3, 6)) < 0.7
    mask[1] = False  # a fully masked row: lse -inf, output 0
    inputs = dict(q=q, k=k, v=v, mask=mask, bias=normal(3, 6))
    on, off = both(backend, "sdpa_lse", "attention", inputs, softcap=2.0, num_kv_heads=2)
    same(on, off)
    assert on[1].shape == (2, 4, 3) and (on[1][..., 1] == -np.inf).all()
    sinks = normal(4)
    sinks[1] = -np.inf  # head 1: plain sdpa
    on, off = both(backend, "sdpa_sinks", "attention", dict(inputs, sinks=sinks), num_kv_heads=2)
    same(on, off)
    assert on[1].shape == (2, 4, 3, 6) and not np.allclose(on[1][:, 0], on[1][:, 2])


def test_merge_attention_states_with_a_nan_an_infinite_and_an_all_minus_inf_row(backend):
    outputs, lses = normal(3, 2, 5, 4), normal(3, 2, 5)
    lses[:, 0, 1] = -np.inf  # no part has anything: output 0, lse -inf
    lses[0, 1, 2], lses[1, 1, 3] = np.inf, np.nan
    outputs[2, 0, 0, 0] = np.nan  # a part of weight 0 in that row
    lses[2, 0, 0] = -np.inf
    on, off = both(backend, "merge_attention_states", "attention", dict(outputs=outputs, lses=lses))
    same(on, off)
    assert on[0].shape == (2, 5, 4) and on[1].shape == (2, 5) and np.isfinite(on[0][0, 0]).all()


@pytest.mark.parametrize("name", ["_sdpa_lse", "_sdpa_sink_column", "_merge"])
def test_the_lse_sinks_and_merge_shapes_of_a_bucket_share_one_compilation(backend, name):
    buckets.enable(True)
    kernel = getattr(attention, name)
    before = kernel._cache_size()
    for t in range(1, 9):
        for s in range(1, 9, 3):
            q = backend.asarray(normal(2, t, 3), dtype="float32")
            k = backend.asarray(normal(2, s, 3), dtype="float32")
            if name == "_merge":
                backend.function("merge_attention_states", "attention")(q[..., :s], q[..., 0])
            elif name == "_sdpa_lse":
                backend.function("sdpa_lse", "attention")(q, k, k)
            else:
                sinks = backend.asarray(normal(2), dtype="float32")
                backend.function("sdpa_sinks", "attention")(q, k, k, sinks)
    assert kernel._cache_size() - before <= 1  # 24 shapes, one program


def test_gathers_slices_and_transposes_on_the_host_equal_jax_s_values_and_gradients(backend):
    """The maps that only move values run on the host where the arrays are concrete
    (buckets.gathered, sliced, moved), with host adjoints under jax.vjp: paged_attention
    (pages gathered through a block table, one page read by both sequences, so its
    cotangents add up), learned_pe (a position read twice), t5_bias (a gather and a
    transpose) and rope with rotary_dim < K (the rotated features sliced off and joined
    back) equal JAX's own values and cotangents (buckets off)."""
    paged = dict(q=normal(2, 3, 4, 8), k_cache=normal(5, 4, 2, 8), v_cache=normal(5, 4, 2, 6),
                 block_table=np.array([[3, 1, 0], [3, 4, 2]]), seq_lens=np.array([10, 7]))
    same(*both(backend, "paged_attention", "attention", paged, causal=True))
    same_grads(*grads_both(backend, "paged_attention", "attention", paged, ("output",),
                           causal=True))
    pe = dict(positions=np.array([[0, 3, 3, 1], [2, 0, 1, 4]]))
    table = {"table": normal(6, 5)}
    same(*both(backend, "learned_pe", "positional", pe, params=table))
    same_grads(*grads_both(backend, "learned_pe", "positional", pe, ("pe",), params=table))
    bias = {"table": normal(8, 3)}
    same(*both(backend, "t5_bias", "positional", {}, t=4, s=6, num_buckets=8, max_distance=16,
               params=bias))
    same_grads(*grads_both(backend, "t5_bias", "positional", {}, ("bias",), t=4, s=6,
                           num_buckets=8, max_distance=16, params=bias))
    x = dict(x=normal(2, 5, 8))
    same(*both(backend, "rope", "positional", x, convention="half", rotary_dim=4, offset=2))
    same_grads(*grads_both(backend, "rope", "positional", x, ("y",), convention="half",
                           rotary_dim=4, offset=2))


def test_paged_attention_at_new_shapes_of_its_buckets_compiles_nothing(backend, caplog):
    """After one call, paged_attention with other page counts, block tables and lengths
    (the same sdpa buckets) compiles nothing: the pages are gathered on the host."""
    def call(pages, lens):
        table = np.arange(2 * 3).reshape(2, 3) % pages
        return {"q": backend.asarray(normal(2, 2, 4, 8), dtype="float64"),
                "k_cache": backend.asarray(normal(pages, 2, 2, 8), dtype="float64"),
                "v_cache": backend.asarray(normal(pages, 2, 2, 8), dtype="float64"),
                "block_table": backend.asarray(table), "seq_lens": backend.asarray(np.array(lens))}
    fn = backend.function("paged_attention", "attention")
    fn(**call(6, [5, 6]))
    jax.config.update("jax_log_compiles", True)
    try:
        with caplog.at_level("WARNING", logger="jax"):
            for pages, lens in ((7, [4, 6]), (9, [3, 5]), (3, [6, 2])):
                fn(**call(pages, lens))
    finally:
        jax.config.update("jax_log_compiles", False)
    compiled = [r.getMessage()[:80] for r in caplog.records if "Compiling" in r.getMessage()]
    assert not compiled


def test_gru_runs_padded_rows_and_steps_and_a_new_length_in_its_bucket_compiles_nothing(
        backend, caplog):
    """gru over concrete arrays runs at bucket sizes (rows and time steps padded, then cut;
    h_last is step T's output): the same outputs as at the exact shape, with and without h0,
    and lengths 5, 6, 7 after 3 (bucket 8) compile nothing."""
    w = {"w_ih": normal(4, 9), "w_hh": normal(3, 9), "b_ih": normal(9), "b_hh": normal(9)}
    same(*both(backend, "gru", "rnn", dict(x=normal(3, 5, 4)), params=w))
    same(*both(backend, "gru", "rnn", dict(x=normal(2, 1, 4), h0=normal(2, 3)), params=w))
    fn = backend.function("gru", "rnn")
    params = {k: backend.asarray(v, dtype="float64") for k, v in w.items()}
    fn(backend.asarray(normal(2, 3, 4), dtype="float64"), params=params)
    jax.config.update("jax_log_compiles", True)
    try:
        with caplog.at_level("WARNING", logger="jax"):
            for t in (5, 6, 7):
                fn(backend.asarray(normal(2, t, 4), dtype="float64"), params=params)
    finally:
        jax.config.update("jax_log_compiles", False)
    compiled = [r.getMessage()[:80] for r in caplog.records if "Compiling" in r.getMessage()]
    assert not compiled
