"""Keras coursework: a feed-forward layer whose weights are created in build() and loaded
by load_spec_params, with dropout that must be off (training=False)."""

import math

import keras


class FeedForward(keras.layers.Layer):
    """Prints how it was called (check shows it under the vector)."""

    def __init__(self, activation="relu", rate=0.5, **kwargs):
        super().__init__(**kwargs)
        self.activation = activation
        self.dropout = keras.layers.Dropout(rate)

    def build(self, d_model, d_ff):
        self.w1 = self.add_weight(shape=(d_model, d_ff), name="w1")
        self.b1 = self.add_weight(shape=(d_ff,), name="b1")
        self.w2 = self.add_weight(shape=(d_ff, d_model), name="w2")
        self.b2 = self.add_weight(shape=(d_model,), name="b2")
        self.built = True

    def load_spec_params(self, params):
        if not self.built:
            self.build(*params["w1"].shape)
        for name in ("w1", "b1", "w2", "b2"):
            getattr(self, name).assign(params[name])

    def call(self, x, training=None):
        print(f"seen training={training} dtype={self.w1.dtype}")
        act = {"relu": keras.ops.relu,
               "gelu": lambda h: 0.5 * h * (1.0 + keras.ops.erf(h / math.sqrt(2.0))),
               "gelu_tanh": lambda h: 0.5 * h * (1.0 + keras.ops.tanh(
                   math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))}[self.activation]
        h = self.dropout(act(keras.ops.matmul(x, self.w1) + self.b1), training=training)
        return keras.ops.matmul(h, self.w2) + self.b2
