"""A LayerNorm class, checked with ``FILE.py:Class``. ``attnspec check``
constructs it with the attributes its ``__init__`` names (``eps``), hands the
spec's parameters to ``load_spec_params`` (a dict by canonical path:
``gamma``, ``beta``), then calls the instance like a function.

    attnspec check examples/coursework/layer_norm_class.py:LayerNorm \
        --component layer_norm
"""

import numpy as np


class LayerNorm:
    def __init__(self, eps=1e-5):
        self.eps = eps
        self.gamma = None
        self.beta = None

    def load_spec_params(self, params):
        self.gamma = params["gamma"]
        self.beta = params["beta"]

    def __call__(self, x):
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # biased variance
        return self.gamma * (x - mean) / np.sqrt(var + self.eps) + self.beta
