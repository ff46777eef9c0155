"""PyTorch coursework: a function and nn.Modules as a student writes them."""

import math

import torch
import torch.nn.functional as F
from torch import nn


def scaled_dot_product_attention(q, k, v, mask=None, bias=None, scale=None):
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # fully masked rows -> 0
    return weights @ v, weights


class Attention(nn.Module):
    """No bias input: its vectors are skipped, not failed."""

    def forward(self, q, k, v, mask=None):
        return scaled_dot_product_attention(q, k, v, mask)


class FeedForward(nn.Module):
    """nn.Linear layers loaded from the spec's (in, out) weights, with dropout that only
    eval() mode switches off. Prints how it was called (check shows it under the vector)."""

    def __init__(self, d_model, d_ff, activation="relu", dropout=0.5):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = activation

    @classmethod
    def from_spec(cls, params, activation="relu"):
        d_model, d_ff = params["w1"].shape
        module = cls(d_model, d_ff, activation)
        module.load_spec_params(params)
        return module

    def load_spec_params(self, params):
        with torch.no_grad():
            self.linear1.weight.copy_(params["w1"].T)
            self.linear1.bias.copy_(params["b1"])
            self.linear2.weight.copy_(params["w2"].T)
            self.linear2.bias.copy_(params["b2"])

    def forward(self, x):
        print(f"seen training={self.training} inference={torch.is_inference_mode_enabled()} "
              f"dtype={self.linear1.weight.dtype}")
        act = {"relu": F.relu, "gelu": F.gelu,
               "gelu_tanh": lambda h: F.gelu(h, approximate="tanh")}[self.activation]
        return self.linear2(self.dropout(act(self.linear1(x))))
