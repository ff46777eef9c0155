"""A stack of N decoder layers (Vaswani et al. 2017, §3.1), all attending to the same
memory.

    h_0 = x,  h_{i+1} = DecoderLayer_i(h_i, memory, self_mask, memory_mask)   layers.<i>.*
    y = h_N  (norm = "post"),   y = LN_final(h_N)  (norm = "pre", final_norm.*)
"""

from .core import mpa
from .decoder_layer import decoder_layer, decoder_layer_vjp
from .encoder import stack, stack_vjp


def decoder(x, memory, self_mask=None, memory_mask=None, num_layers=1, num_heads=1,
            norm="post", eps=1e-5, activation="relu", params=None):
    return stack(decoder_layer, x, num_layers, norm, eps, params, memory=memory,
                 self_mask=self_mask, memory_mask=memory_mask, num_heads=num_heads,
                 activation=activation)


def decoder_vjp(cot, x, memory, self_mask=None, memory_mask=None, num_layers=1, num_heads=1,
                norm="post", eps=1e-5, activation="relu", params=None):

    dx, dmem, grads = stack_vjp(decoder_layer, decoder_layer_vjp, mpa(cot["y"]), x,
                                 num_layers, norm, eps, params, memory=mpa(memory),
                                 self_mask=self_mask, memory_mask=memory_mask,
                                 num_heads=num_heads, activation=activation)
    return {"x": dx, "memory": dmem}, grads


VJPS = {"decoder": decoder_vjp}
