"""Position-wise feed-forward network (Vaswani et al. 2017, eq. 2):

    y = act(x W1 + b1) W2 + b2,   W1 (D, F), b1 (F,), W2 (F, D), b2 (D,)

act:  relu(h)      = max(0, h)
      gelu(h)      = h/2 (1 + erf(h / sqrt 2))                              (exact)
      gelu_tanh(h) = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))          (approximation)
"""

import mpmath
import numpy as np

from .core import add, emap, fsum_axes, matmul, mpa, transpose_last

_C = "0.044715"  # made an mpf where used, at the working precision


def relu(h):
    return h if h > 0 else mpmath.mpf(0)


def gelu(h):
    return h / 2 * (1 + mpmath.erf(h / mpmath.sqrt(2)))


def gelu_tanh(h):
    return h / 2 * (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi) * (h + mpmath.mpf(_C) * h ** 3)))


ACTIVATIONS = {"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh}


def feedforward(x, activation="relu", params=None):
    x = mpa(x)
    h = add(matmul(x, mpa(params["w1"])), mpa(params["b1"]))   # (..., F)
    a = emap(ACTIVATIONS[activation], h)
    y = add(matmul(a, mpa(params["w2"])), mpa(params["b2"]))   # (..., D)
    return {"y": y}


def relu_grad(h):
    return mpmath.mpf(1) if h > 0 else mpmath.mpf(0)  # relu'(0) = 0, as torch and TF


def gelu_grad(h):
    """d/dh h Phi(h) = Phi(h) + h phi(h)."""
    return (1 + mpmath.erf(h / mpmath.sqrt(2))) / 2 + h * mpmath.exp(-h * h / 2) / mpmath.sqrt(2 * mpmath.pi)


def gelu_tanh_grad(h):
    """u = sqrt(2/pi)(h + c h^3), t = tanh u: (1 + t)/2 + h/2 (1 - t^2) sqrt(2/pi)(1 + 3c h^2)."""
    k = mpmath.sqrt(2 / mpmath.pi)
    c = mpmath.mpf(_C)
    t = mpmath.tanh(k * (h + c * h ** 3))
    return (1 + t) / 2 + h / 2 * (1 - t * t) * k * (1 + 3 * c * h * h)


ACTIVATION_GRADS = {"relu": relu_grad, "gelu": gelu_grad, "gelu_tanh": gelu_tanh_grad}


def feedforward_vjp(cot, x, activation="relu", params=None):
    """h = x W1 + b1, a = act(h), y = a W2 + b2:
        dW2 = a^T dy,  db2 = sum dy,  da = dy W2^T,  dh = da act'(h),
        dW1 = x^T dh,  db1 = sum dh,  dx = dh W1^T      (sums over every leading axis)
    """
    x, dy = mpa(x), mpa(cot["y"])
    w1, b1, w2 = mpa(params["w1"]), mpa(params["b1"]), mpa(params["w2"])
    x2 = x.reshape(-1, x.shape[-1])                      # (N, D)
    dy2 = dy.reshape(-1, dy.shape[-1])                   # (N, D)
    h = matmul(x2, w1) + b1                              # (N, F)
    a = np.vectorize(ACTIVATIONS[activation], otypes=[object])(h)
    da = matmul(dy2, transpose_last(w2))                 # (N, F)
    dh = da * np.vectorize(ACTIVATION_GRADS[activation], otypes=[object])(h)
    return ({"x": matmul(dh, transpose_last(w1)).reshape(x.shape)},
            {"w1": matmul(transpose_last(x2), dh), "b1": fsum_axes(dh, (0,)),
             "w2": matmul(transpose_last(a), dy2), "b2": fsum_axes(dy2, (0,))})


VJPS = {"feedforward": feedforward_vjp}
