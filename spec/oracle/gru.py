"""GRU over a sequence: h_0 = h0 (zeros when absent), h_t = gru_cell(x_t, h_{t-1}).

    outputs[:, t] = h_{t+1} for t = 0..T-1 (the state after reading x_t),  h_last = h_T
"""

import numpy as np

from .core import mpa, zeros
from .gru_cell import gru_step_vjp, step


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


def gru_vjp(cot, x, h0=None, params=None):
    """Backpropagation through time: with dh_T = dh_last and, for t = T..1,
        dh_t += doutputs[:, t-1];  (dx_t, dh_{t-1}, dtheta_t) = step backward at (x_t, h_{t-1})
    dtheta = sum over t of dtheta_t, dh0 = dh_0 (only when h0 is given)."""

    x = mpa(x)
    b, t_len, _ = x.shape
    hid = np.asarray(params["w_hh"]).shape[0]
    hs = [zeros((b, hid)) if h0 is None else mpa(h0)]
    for t in range(t_len):
        hs.append(step(x[:, t], hs[-1], params))
    dh = mpa(cot["h_last"]) if "h_last" in cot else zeros((b, hid))
    dout = mpa(cot["outputs"]) if "outputs" in cot else zeros((b, t_len, hid))
    dx = np.empty(x.shape, dtype=object)
    total: dict = {}
    for t in reversed(range(t_len)):
        dh = dh + dout[:, t]
        dx[:, t], dh, grads = gru_step_vjp(x[:, t], hs[t], params, dh)
        total = {k: total[k] + g if k in total else g for k, g in grads.items()}
    return ({"x": dx} if h0 is None else {"x": dx, "h0": dh}), total


VJPS = {"gru": gru_vjp}
