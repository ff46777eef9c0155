"""The JAX backend's own conformance checks (``extra_checks``, run as ``test_extras``):
agreement of the sdpa golden vectors with ``jax.nn.dot_product_attention``, its pinned
differences from the spec, and a gradient check of ``jax.grad`` through the kernels.

``jax.nn.dot_product_attention`` differs from the spec's sdpa in ways these checks pin:
- layout (B, T, N, H): sequence before heads (the spec's q is (..., H, T, K));
  rank 3 (B, T, H) means one head; it returns the output only, no weights;
- GQA by the number of heads of k/v: query head n reads kv head n // (N / N_kv), as the
  spec's num_kv_heads;
- v must have k's width (V = K): vectors with another value width are left out;
- it has no soft-capping: vectors that state a softcap are left out (sdpa/stress-softcap-001
  compared without it is off by 0.13);
- a row whose mask keeps no key is not zero (the spec's is): pinned below;
- its XLA path computes the softmax in float32 whatever the input dtype (logits
  ``.astype(float32)``), so float64 inputs agree only to the vectors' float32 tolerances;
- mask True = may attend and an additive bias, as the spec.
Agreement runs on float64 inputs with the vectors' float32 tolerances (the reason above).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ._core import host
from .attention import sdpa
from .norm import layer_norm


def _close(name, got, vector, out_name):
    tol = vector.tolerances["float32"]  # its softmax runs in float32 (module docstring)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), vector.outputs[out_name],
                               rtol=tol["rtol"], atol=tol["atol"],
                               err_msg=f"{name}: {vector.id} output {out_name!r}")


def _expressible(v) -> bool:
    """Finite float inputs, every row keeps a key, q of rank 3 or 4 (B, [H,] T, K), V = K,
    no softcap."""
    if v.attributes.get("softcap") is not None:
        return False
    if any(np.asarray(a).dtype.kind == "f" and not np.all(np.isfinite(a))
           for a in v.inputs.values()):
        return False
    q, k = np.asarray(v.inputs["q"]), np.asarray(v.inputs["k"])
    if q.ndim not in (3, 4) or k.ndim != q.ndim or np.shape(v.inputs["v"])[-1] != k.shape[-1]:
        return False
    mask = v.inputs.get("mask")
    return mask is None or bool(np.broadcast_to(
        mask, q.shape[:-1] + (k.shape[-2],)).any(axis=-1).all())


def _to_btnh(x, ndim):
    """(B, H, T, K) -> (B, T, H, K); (B, T, K) -> (B, T, 1, K) (on the host)."""
    return np.swapaxes(x, 1, 2) if ndim == 4 else x[:, :, None, :]


@functools.partial(jax.jit, static_argnames="scale")
def _dot_product_attention(q, k, v, bias, mask, scale):
    return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=scale)


def _jax_nn_output(v):
    """jax.nn.dot_product_attention on a vector's inputs, laid out on the host (NumPy), so
    that the one program compiled per shape is JAX's attention, not the glue around it."""
    x = {n: np.asarray(a) for n, a in v.inputs.items()}
    q, k, vv = x["q"], x["k"], x["v"]
    nd = q.ndim
    batch = np.broadcast_shapes(q.shape[:1], k.shape[:1], vv.shape[:1])
    q, k, vv = (np.broadcast_to(t, batch + t.shape[1:]) for t in (q, k, vv))
    full = (batch[0], q.shape[1] if nd == 4 else 1, q.shape[-2], k.shape[-2])
    mask, bias = x.get("mask"), x.get("bias")
    mask, bias = (None if a is None else host(np.broadcast_to(a if nd == 4 else a[..., None, :, :], full))
                  for a in (mask, bias))
    out = _dot_product_attention(*(host(_to_btnh(t, nd)) for t in (q, k, vv)), bias, mask,
                                 scale=v.attributes.get("scale"))
    out = np.asarray(out)
    return np.swapaxes(out, 1, 2) if nd == 4 else out[:, :, 0, :]


def agree_dot_product_attention(device):
    def check(spec):
        compared = 0
        with jax.default_device(jax.devices("cpu" if device == "cpu" else "gpu")[0]):
            for v in spec.vectors:
                if v.function != "sdpa" or v.expect != "value" or v.deprecated \
                        or not _expressible(v):
                    continue
                _close("jax.nn.dot_product_attention", _jax_nn_output(v), v, "output")
                compared += 1
        assert compared, "no sdpa vector could be expressed with jax.nn.dot_product_attention"
    return check


def pinned_fully_masked_row(device):
    """Where the spec gives 0 for a row with nothing to attend to, jax.nn's does not."""
    def check(spec):
        q = jnp.ones((1, 2, 1, 4), jnp.float64)
        mask = jnp.array([True, False])[None, None, :, None] & jnp.ones((1, 1, 2, 2), bool)
        ours, _ = sdpa(jnp.swapaxes(q, 1, 2), jnp.swapaxes(q, 1, 2), jnp.swapaxes(q, 1, 2), mask)
        theirs = jax.nn.dot_product_attention(q, q, q, mask=mask)
        assert np.all(np.asarray(ours)[0, 0, 1] == 0), "the spec's empty row must be zero"
        assert not np.all(np.asarray(theirs)[0, 1, 0] == 0), (
            "jax.nn.dot_product_attention now gives 0 for a row with nothing to attend to: "
            "the difference stated in this module is gone; update it")
    return check


def grad_sdpa_layer_norm(device):
    """jax.grad through sdpa and layer_norm against central differences (float64)."""
    def check(spec):
        rng = np.random.default_rng(0)
        q, k, v = (jnp.asarray(rng.standard_normal(s)) for s in ((2, 3, 4), (2, 5, 4), (2, 5, 3)))
        mask = jnp.array([[True, True, False, True, False]])
        params = {"gamma": jnp.asarray(rng.standard_normal(3)),
                  "beta": jnp.asarray(rng.standard_normal(3))}

        def loss(q):
            out, _ = sdpa(q, k, v, mask)
            return jnp.sum(jnp.sin(layer_norm(out, params=params)))

        g = np.asarray(jax.grad(loss)(q))
        eps, num = 1e-6, np.zeros(q.shape)
        for i in np.ndindex(q.shape):
            d = np.zeros(q.shape)
            d[i] = eps
            num[i] = (float(loss(q + d)) - float(loss(q - d))) / (2 * eps)
        np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-7, err_msg="jax.grad vs differences")
    return check


def extra_checks(backend, device):
    return [("agree/jax.nn.dot_product_attention", agree_dot_product_attention(device)),
            ("pinned/dot_product_attention-empty-row", pinned_fully_masked_row(device)),
            ("grad/sdpa+layer_norm", grad_sdpa_layer_norm(device))]
