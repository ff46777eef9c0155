"""Invariants of the mixture-of-experts layer, moe (hypothesis).

Each test name is the invariant; each uses only ``ops`` so it runs on any backend.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.properties

GLU = ("w_gate", "w_up", "w_down")


@st.composite
def layers(draw, gap=1.0):
    """x (N, D) in [-1, 1] with feature 0 fixed at 1, and a layer of E SwiGLU experts whose
    router row 0 (read by that constant feature) holds a permutation of levels ``gap`` apart;
    the other router rows in {-1/8, 0, 1/8}, so the other features move a logit by at most
    3/8: the experts' order is the same for every token and never near a tie."""
    n, d, e, f = (draw(st.integers(1, 4)), draw(st.integers(2, 4)), draw(st.integers(2, 6)),
                  draw(st.integers(1, 4)))
    r = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = r.integers(-8, 9, (n, d)) / 8.0
    x[:, 0] = 1.0
    w_router = r.integers(-1, 2, (d, e)) / 8.0
    w_router[0] = (np.arange(e) * gap - gap * (e - 1) / 2)[r.permutation(e)]
    params = {"router.w": w_router}
    for name, shape in zip(GLU, [(e, d, f), (e, d, f), (e, f, d)]):
        params[f"experts.{name}"] = r.integers(-16, 17, shape) / 16.0
    return x, params


def _moe(ops, x, params, **attrs):
    y, z = ops.moe(x=x, params=params, **attrs)
    return np.asarray(y, np.float64), np.asarray(z, np.float64)


@given(layer=layers(gap=24.0), renormalize=st.booleans())
def test_moe_routing_every_token_to_one_expert_is_that_experts_feedforward(ops, layer,
                                                                           renormalize):
    """top_k 1 and one logit 24 above the next: the weight is 1 (renormalised exactly, else
    within e^-24 of it), so y is the chosen expert's SwiGLU output."""
    x, params = layer
    y, _ = _moe(ops, x, params, top_k=1, renormalize=renormalize)
    best = int(np.argmax(params["router.w"][0]))
    expert = {g: params[f"experts.{g}"][best] for g in GLU}
    ops.assert_close(y, np.asarray(ops.gated_feedforward(x=x, params=expert), np.float64))


@given(layer=layers(), data=st.data())
def test_moe_permuting_the_experts_with_the_router_columns_changes_nothing(ops, layer, data):
    """Expert j moved to slot perm^-1(j), its router column with it: y is unchanged and the
    router logits are permuted the same way."""
    x, params = layer
    e = params["router.w"].shape[1]
    perm = np.array(data.draw(st.permutations(range(e))))
    k = data.draw(st.integers(1, e))
    moved = {"router.w": params["router.w"][:, perm],
             **{f"experts.{g}": params[f"experts.{g}"][perm] for g in GLU}}
    y, z = _moe(ops, x, params, top_k=k)
    y2, z2 = _moe(ops, x, moved, top_k=k)
    ops.assert_close(y2, y)
    ops.assert_close(z2, z[:, perm])
