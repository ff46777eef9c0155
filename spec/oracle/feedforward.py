"""Position-wise feed-forward network (Vaswani et al. 2017, eq. 2):

    y = act(x W1 + b1) W2 + b2,   W1 (D, F), b1 (F,), W2 (F, D), b2 (D,)

act:  relu(h)      = max(0, h)
      gelu(h)      = h/2 (1 + erf(h / sqrt 2))                              (exact)
      gelu_tanh(h) = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))          (approximation)
"""

import mpmath

from .core import add, emap, matmul, mpa

_C = mpmath.mpf("0.044715")


def relu(h):
    return h if h > 0 else mpmath.mpf(0)


def gelu(h):
    return h / 2 * (1 + mpmath.erf(h / mpmath.sqrt(2)))


def gelu_tanh(h):
    return h / 2 * (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi) * (h + _C * h ** 3)))


ACTIVATIONS = {"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh}


def feedforward(x, activation="relu", params=None):
    x = mpa(x)
    h = add(matmul(x, mpa(params["w1"])), mpa(params["b1"]))   # (..., F)
    a = emap(ACTIVATIONS[activation], h)
    y = add(matmul(a, mpa(params["w2"])), mpa(params["b2"]))   # (..., D)
    return {"y": y}
