"""Invariants of layer_norm, rms_norm, feedforward, gated_feedforward, dropout, residual,
embedding and lm_head (hypothesis). Each test name is the invariant."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

pytestmark = pytest.mark.properties

# multiples of 1/16 in [-4, 4]: exact in bfloat16 even after adding an integer in [-8, 8]
sixteenths = st.integers(-64, 64).map(lambda k: k / 16)
unit = st.floats(-1, 1, allow_nan=False, width=16)
variants = st.sampled_from(["canonical", "annotated"])
TINY = 1e-20  # eps negligible against every row variance here (>= 0.25 / 64), even in float64


def rows(elements=unit, min_side=2, max_side=6):
    """(..., D) arrays, D >= 2."""
    return hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=min_side,
                                                   max_side=max_side), elements=elements)


def spread(x):
    """Add a ramp 3*d along the last axis: every row then has std >= 0.5 (|x| <= 1)."""
    return x + 3.0 * np.arange(x.shape[-1])


def ln_params(d):
    return {"gamma": np.ones(d), "beta": np.zeros(d)}


def ffn_params(seed, d, f):
    r = np.random.default_rng(seed)
    return {"w1": r.uniform(-1, 1, (d, f)), "b1": r.uniform(-0.5, 0.5, f),
            "w2": r.uniform(-1, 1, (f, d)), "b2": r.uniform(-0.5, 0.5, d)}


# -- layer_norm ------------------------------------------------------------------------

@given(x=rows())
def test_layer_norm_output_has_zero_mean_and_unit_biased_variance(ops, x):
    """With gamma = 1, beta = 0 and eps small against the variance: mean 0, variance 1."""
    x = spread(x)
    y = ops.layer_norm(x=x, eps=TINY, params=ln_params(x.shape[-1])).astype(np.float64)
    ops.assert_close(y.mean(axis=-1), np.zeros(x.shape[:-1]), scale=8, what="mean")
    ops.assert_close((y * y).mean(axis=-1), np.ones(x.shape[:-1]), scale=8, what="variance")


@given(x=rows(sixteenths), c=st.integers(-8, 8), variant=variants)
def test_layer_norm_invariant_to_adding_a_constant(ops, x, c, variant):
    x = spread(x / 4)
    p = ln_params(x.shape[-1])
    ops.assert_close(ops.layer_norm(x=x + c, variant=variant, params=p),
                     ops.layer_norm(x=x, variant=variant, params=p), scale=8)


@given(x=rows(), a=st.sampled_from([0.125, 0.5, 2.0, 8.0]), variant=variants)
def test_layer_norm_invariant_to_positive_scaling(ops, x, a, variant):
    """LN(a x) = LN(x) for a > 0, up to eps (tiny here against the variance)."""
    x = spread(x)
    p = ln_params(x.shape[-1])
    ops.assert_close(ops.layer_norm(x=a * x, eps=TINY, variant=variant, params=p),
                     ops.layer_norm(x=x, eps=TINY, variant=variant, params=p), scale=8)


@given(x=rows(), variant=variants, seed=st.integers(0, 2**16))
def test_layer_norm_gamma_and_beta_are_an_affine_map_of_the_normalised_output(
        ops, x, variant, seed):
    x = spread(x)
    d = x.shape[-1]
    r = np.random.default_rng(seed)
    gamma, beta = r.uniform(0.5, 2, d), r.uniform(-1, 1, d)
    z = ops.layer_norm(x=x, variant=variant, params=ln_params(d)).astype(np.float64)
    y = ops.layer_norm(x=x, variant=variant, params={"gamma": gamma, "beta": beta})
    ops.assert_close(y, z * ops_round(ops, gamma) + ops_round(ops, beta), scale=8)


def ops_round(ops, a):
    from attnspec.spec.tensor import round_to

    return round_to(a, ops.dtype)


# -- rms_norm --------------------------------------------------------------------------

@given(x=rows(), a=st.sampled_from([0.125, 0.5, 2.0, 8.0]))
def test_rms_norm_invariant_to_positive_scaling(ops, x, a):
    x = spread(x)
    p = {"gamma": np.ones(x.shape[-1])}
    ops.assert_close(ops.rms_norm(x=a * x, eps=TINY, params=p),
                     ops.rms_norm(x=x, eps=TINY, params=p), scale=8)


@given(v=rows(max_side=4))
def test_rms_norm_equals_layer_norm_without_beta_on_zero_mean_rows(ops, v):
    x = spread(v)
    x = np.concatenate([x, -x], axis=-1)          # every row has mean exactly 0
    d = x.shape[-1]
    ops.assert_close(ops.rms_norm(x=x, eps=1e-5, params={"gamma": np.ones(d)}),
                     ops.layer_norm(x=x, eps=1e-5, params=ln_params(d)), scale=8)


# -- dropout ---------------------------------------------------------------------------

@given(x=rows(min_side=1), data=st.data())
def test_dropout_p_zero_is_identity(ops, x, data):
    mask = data.draw(st.none() | hnp.arrays(np.bool_, x.shape))
    y = ops.dropout(x=x, keep_mask=mask, p=0.0, seed=data.draw(st.integers(0, 100)))
    assert np.array_equal(y.astype(np.float64), ops_round(ops, x))


@given(x=rows(st.floats(0.25, 2, width=16), min_side=1), data=st.data(),
       p=st.sampled_from([0.1, 0.25, 0.5, 0.75]))
def test_dropout_with_mask_zeroes_dropped_and_scales_kept_by_inverse_keep_prob(
        ops, x, data, p):
    mask = data.draw(hnp.arrays(np.bool_, x.shape))
    y = ops.dropout(x=x, keep_mask=mask, p=p).astype(np.float64)
    assert np.all(y[~mask] == 0)
    ops.assert_close(y[mask], ops_round(ops, x)[mask] / (1 - p))


@given(seed=st.integers(0, 2**32 - 1), p=st.sampled_from([0.1, 0.25, 0.5, 0.75]))
def test_dropout_random_keep_fraction_and_mean_within_binomial_bounds(ops, seed, p):
    """keep ~ Bernoulli(1 - p): kept fraction within 5 sigma of 1 - p, dropped entries
    exactly 0, kept ones exactly x / (1 - p), so E[y] = x."""
    n = 4096
    x = 1.0 + (np.arange(n) % 8) / 8               # positive, never 0
    y = ops.dropout(x=x, p=p, seed=seed).astype(np.float64)
    kept = y != 0
    k = int(kept.sum())
    assert abs(k - n * (1 - p)) <= 5 * np.sqrt(n * p * (1 - p)), (k, n, p)
    ops.assert_close(y[kept], x[kept] / (1 - p))
    sigma_mean = np.sqrt(np.sum(x * x) * p / (1 - p)) / n   # Var y_i = x_i^2 p / (1 - p)
    assert abs(y.mean() - x.mean()) <= 5 * sigma_mean, (y.mean(), x.mean())


@given(seed=st.integers(0, 2**31 - 2), p=st.sampled_from([0.25, 0.5]))
def test_dropout_same_seed_same_mask_other_seed_other_mask(ops, seed, p):
    """Reproducible: one seed gives one mask, call after call; seed + 1 another (two
    independent masks of 256 entries agree with probability below 1e-30)."""
    x = 1.0 + (np.arange(256) % 8) / 8
    y = ops.dropout(x=x, p=p, seed=seed)
    assert np.array_equal(ops.dropout(x=x, p=p, seed=seed), y), "same seed, different masks"
    assert not np.array_equal(ops.dropout(x=x, p=p, seed=seed + 1) != 0, y != 0), \
        "seeds s and s + 1 give the same mask"


# -- feedforward / residual ------------------------------------------------------------

@given(t=st.integers(2, 6), seed=st.integers(0, 2**16),
       act=st.sampled_from(["relu", "gelu", "gelu_tanh"]), data=st.data())
def test_feedforward_is_position_wise(ops, t, seed, act, data):
    """Permuting the tokens permutes the output the same way."""
    x = np.random.default_rng(seed).uniform(-2, 2, (2, t, 4))
    perm = np.array(data.draw(st.permutations(range(t))))
    p = ffn_params(seed, 4, 6)
    y = ops.feedforward(x=x, activation=act, params=p)
    ops.assert_close(ops.feedforward(x=x[:, perm], activation=act, params=p), y[:, perm])


def glu_params(seed, d, f):
    r = np.random.default_rng(seed)
    return {"w_gate": r.uniform(-1, 1, (d, f)), "w_up": r.uniform(-1, 1, (d, f)),
            "w_down": r.uniform(-1, 1, (f, d))}


glu_acts = st.sampled_from(["silu", "gelu", "gelu_tanh"])


@given(t=st.integers(2, 6), seed=st.integers(0, 2**16), act=glu_acts, data=st.data())
def test_gated_feedforward_is_position_wise(ops, t, seed, act, data):
    """Permuting the tokens permutes the output the same way."""
    x = np.random.default_rng(seed).uniform(-2, 2, (2, t, 4))
    perm = np.array(data.draw(st.permutations(range(t))))
    p = glu_params(seed, 4, 6)
    y = ops.gated_feedforward(x=x, activation=act, params=p)
    ops.assert_close(ops.gated_feedforward(x=x[:, perm], activation=act, params=p), y[:, perm])


@given(seed=st.integers(0, 2**16), act=glu_acts, a=st.sampled_from([-2.0, -1.0, 0.5, 4.0]))
def test_gated_feedforward_is_linear_in_w_up_and_not_in_w_gate(ops, seed, act, a):
    """Scaling W_up by a power of two (or -1) scales y by it; the gate is not linear:
    silu/gelu(a h) != a silu/gelu(h), so y(a W_gate) differs from a y(W_gate)."""
    x = np.random.default_rng(seed).uniform(-2, 2, (3, 4))
    p = glu_params(seed, 4, 6)
    y = ops.gated_feedforward(x=x, activation=act, params=p).astype(np.float64)
    ops.assert_close(ops.gated_feedforward(x=x, activation=act,
                                           params={**p, "w_up": a * p["w_up"]}), a * y)


@given(seed=st.integers(0, 2**16), act=glu_acts)
def test_gated_feedforward_sums_over_hidden_units(ops, seed, act):
    """Splitting F = 8 into two halves of 4 hidden units and adding the two outputs gives y."""
    x = np.random.default_rng(seed).uniform(-2, 2, (2, 3, 4))
    p = glu_params(seed, 4, 8)
    half = [{"w_gate": p["w_gate"][:, s], "w_up": p["w_up"][:, s], "w_down": p["w_down"][s]}
            for s in (slice(0, 4), slice(4, 8))]
    y = ops.gated_feedforward(x=x, activation=act, params=p)
    parts = [ops.gated_feedforward(x=x, activation=act, params=h).astype(np.float64)
             for h in half]
    ops.assert_close(y, parts[0] + parts[1], scale=4)


@given(seed=st.integers(0, 2**16), position=st.sampled_from(["post", "pre"]))
def test_residual_is_the_composition_of_layer_norm_and_feedforward(ops, seed, position):
    r = np.random.default_rng(seed)
    x = r.uniform(-2, 2, (2, 3, 4))
    f_p = ffn_params(seed, 4, 8)
    n_p = {"gamma": r.uniform(0.5, 2, 4), "beta": r.uniform(-1, 1, 4)}
    params = {**{f"ffn.{k}": v for k, v in f_p.items()},
              **{f"norm.{k}": v for k, v in n_p.items()}}
    y = ops.residual(x=x, position=position, params=params).astype(np.float64)
    if position == "post":
        f = ops.feedforward(x=x, params=f_p).astype(np.float64)
        want = ops.layer_norm(x=ops_round(ops, x) + f, params=n_p)
    else:
        n = ops.layer_norm(x=x, params=n_p).astype(np.float64)
        want = ops_round(ops, x) + ops.feedforward(x=n, params=f_p).astype(np.float64)
    ops.assert_close(y, want, scale=16)


# -- embedding / lm_head ---------------------------------------------------------------

@given(seed=st.integers(0, 2**16), shape=hnp.array_shapes(min_dims=0, max_dims=2, max_side=4))
def test_embedding_unscaled_equals_table_rows_and_scaled_is_sqrt_d_times_that(ops, seed, shape):
    r = np.random.default_rng(seed)
    table = r.uniform(-1, 1, (7, 5))
    ids = r.integers(0, 7, shape)
    y = ops.embedding(ids=ids, scale=False, params={"table": table})
    assert np.array_equal(y.astype(np.float64), ops_round(ops, table)[ids])
    ops.assert_close(ops.embedding(ids=ids, params={"table": table}),
                     ops_round(ops, table)[ids] * np.sqrt(5))


@given(seed=st.integers(0, 2**16), bias=st.booleans())
def test_lm_head_tied_equals_untied_with_transposed_table(ops, seed, bias):
    r = np.random.default_rng(seed)
    x, table = r.uniform(-1, 1, (2, 3, 4)), r.uniform(-1, 1, (6, 4))
    b = {"b": r.uniform(-1, 1, 6)} if bias else {}
    ops.assert_close(ops.lm_head(x=x, tied=True, params={"table": table, **b}),
                     ops.lm_head(x=x, params={"w": np.ascontiguousarray(table.T), **b}))
