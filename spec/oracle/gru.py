"""GRU over a sequence: h_0 = h0 (zeros when absent), h_t = gru_cell(x_t, h_{t-1}).

    outputs[:, t] = h_{t+1} for t = 0..T-1 (the state after reading x_t),  h_last = h_T
"""

import numpy as np

from .core import mpa, zeros
from .gru_cell import step


def gru(x, h0=None, params=None):
    x = mpa(x)
    b, t, _ = x.shape
    hid = np.asarray(params["w_hh"]).shape[0]
    h = zeros((b, hid)) if h0 is None else mpa(h0)
    outputs = np.empty((b, t, hid), dtype=object)
    for i in range(t):
        h = step(x[:, i], h, params)
        outputs[:, i] = h
    return {"outputs": outputs, "h_last": h}
