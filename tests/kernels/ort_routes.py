"""Routes from an sdpa vector to ONNX Runtime's CPU attention operators (issue 21.3): a
one-node model per call, run by ``onnxruntime.InferenceSession`` on the CPU execution
provider. A vector the operator cannot express raises :class:`Skip` with the reason.

- ``ort-attention``: ``Attention`` (opset 23), 4-D ``(N, H, T, K)`` inputs, the mask as a
  boolean ``attn_mask`` or, with a bias, a float ``attn_mask`` with ``-inf`` where the mask
  drops; ``softcap``; ``scale`` only when the vector sets one (ONNX's default is 1/sqrt(K)).
- ``ort-gqa``: ``com.microsoft.GroupQueryAttention``: always causal, so only vectors with
  no mask and one query, or with the bottom-right causal mask, map; the ``S - T`` earlier
  keys go in ``past_key``/``past_value`` (BNSH), ``seqlens_k = S - 1``,
  ``total_sequence_length = S``; ``softcap``; kv heads as ``kv_num_heads``.
- ``ort-mha``: ``com.microsoft.MultiHeadAttention``: 3-D ``(N, T, H·K)`` inputs, the mask
  and the bias as a float ``attention_bias`` ``(N, H, T, S)`` with ``-inf`` where masked;
  GQA vectors with the kv heads repeated (it has no grouping of its own); no soft-cap.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from .torch_routes import Skip, _four_d, _keep, _same_width
from .vectors import Call

ONNX_TYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
              "float64": TensorProto.DOUBLE}


def _session(node, feeds: dict, outputs: list[str], domain_opset):
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in feeds.items()]
    first = helper.np_dtype_to_tensor_dtype(next(iter(feeds.values())).dtype)
    outs = [helper.make_tensor_value_info(n, first, None) for n in outputs]
    model = helper.make_model(helper.make_graph([node], "g", ins, outs),
                              opset_imports=[helper.make_opsetid(d, o) for d, o in domain_opset])
    model.ir_version = 10
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def run_node(op, inputs: dict, outputs: list[str], domain="", opset=23, **attrs):
    names = [n if a is not None else "" for n, a in inputs.items()]
    while names and not names[-1]:
        names.pop()
    feeds = {n: a for n, a in inputs.items() if a is not None}
    node = helper.make_node(op, names, outputs, domain=domain or None, **attrs)
    imports = [("", 23)] + ([(domain, opset)] if domain else [])
    return _session(node, feeds, outputs, imports).run(None, feeds)


def _np(a, dtype):
    if dtype not in ONNX_TYPES:
        raise Skip(f"{dtype}: no {dtype} in this route (ONNX Runtime's CPU kernels)")
    return np.ascontiguousarray(np.asarray(a, np.float64).astype(dtype))


def _attn_mask(c, full_batch, shape, dtype):
    keep = _keep(c, full_batch, shape)
    if c.bias is None:
        return None if keep is None else keep
    b = np.broadcast_to(c.bias, (*full_batch, c.t, c.s)).reshape(shape)
    return _np(np.where(keep, b, -np.inf) if keep is not None else b, dtype)


def attention(c: Call, dtype: str):
    (q, k, v), batch = _four_d(c)
    n, h = q.shape[:2]
    shape = (n, h, c.t, c.s)
    if 0 in shape:
        raise Skip("empty T or S")
    attrs = {} if c.scale is None else {"scale": float(c.scale)}
    if c.softcap is not None:
        attrs["softcap"] = float(c.softcap)
    mask = _attn_mask(c, batch, shape, dtype)
    (out,) = run_node("Attention", {"Q": _np(q, dtype), "K": _np(k, dtype), "V": _np(v, dtype),
                                    "attn_mask": mask}, ["Y"], **attrs)
    return {"output": out.astype(np.float64).reshape(*batch, c.t, v.shape[-1])}


def _bsh(x):
    """(N, H, T, K) -> (N, T, H·K)."""
    n, h, t, k = x.shape
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3).reshape(n, t, h * k))


def _heads_as_heads(c: Call) -> Call:
    """A vector without GQA whose q, k, v share a head axis (-3) as ``num_kv_heads = H``:
    its heads go to the op's heads, not into the batch (the op refuses a batch above 1
    when T > 1 and a cache is given)."""
    if c.num_kv_heads is not None or min(x.ndim for x in (c.q, c.k, c.v)) < 3:
        return c
    h = c.q.shape[-3]
    if h == 1 or c.k.shape[-3] != h or c.v.shape[-3] != h:
        return c
    return Call(c.q, c.k, c.v, c.mask, c.bias, c.scale, h, c.softcap, c.causal, c.window)


def gqa(c: Call, dtype: str):
    if c.mask is not None or c.bias is not None or c.window is not None or not (c.causal or c.t == 1):
        raise Skip("GroupQueryAttention is always causal: only the bottom-right causal mask "
                   "(or one query and no mask) and no bias map")
    if c.t > c.s:
        raise Skip("T > S: rows with nothing to attend have no cache layout")
    (q, k, v), batch = _four_d(_heads_as_heads(c))
    width = v.shape[-1]
    if q.shape[-1] != v.shape[-1] or q.shape[-1] % 8:  # one head size, a multiple of 8
        scale = 1 / np.sqrt(c.q.shape[-1]) if c.scale is None else c.scale
        q, k, v = _same_width(q, k, v, multiple=8)
        c = Call(c.q, c.k, c.v, None, None, scale, c.num_kv_heads, c.softcap, True, None)
    n, h, hk, p = q.shape[0], q.shape[1], k.shape[1], c.s - c.t
    attrs = {"num_heads": h, "kv_num_heads": hk}
    if c.scale is not None:
        attrs["scale"] = float(c.scale)
    if c.softcap is not None:
        attrs["softcap"] = float(c.softcap)
    ins = {"query": _np(_bsh(q), dtype), "key": _np(_bsh(k[:, :, p:]), dtype),
           "value": _np(_bsh(v[:, :, p:]), dtype),
           "past_key": _np(k[:, :, :p], dtype), "past_value": _np(v[:, :, :p], dtype),
           "seqlens_k": np.full((n,), c.s - 1, np.int32),
           "total_sequence_length": np.array(c.s, np.int32)}
    out = run_node("GroupQueryAttention", ins, ["output", "present_key", "present_value"],
                   domain="com.microsoft", opset=1, **attrs)[0]
    out = out.reshape(n, c.t, h, -1).transpose(0, 2, 1, 3)[..., :width]
    return {"output": out.astype(np.float64).reshape(*batch, c.t, width)}


def mha(c: Call, dtype: str):
    if c.softcap is not None:
        raise Skip("softcap: MultiHeadAttention has no logit soft-cap")
    (q, k, v), batch = _four_d(c)
    n, h = q.shape[:2]
    shape = (n, h, c.t, c.s)
    if 0 in shape:
        raise Skip("empty T or S")
    if k.shape[1] != h:
        k, v = np.repeat(k, h // k.shape[1], axis=1), np.repeat(v, h // v.shape[1], axis=1)
    keep = _keep(c, batch, shape)
    b = np.zeros(shape) if c.bias is None else np.broadcast_to(c.bias, (*batch, c.t, c.s)).reshape(shape)
    bias = b if keep is None else np.where(keep, b, -np.inf)
    attrs = {"num_heads": h}
    if c.scale is not None:
        attrs["scale"] = float(c.scale)
    ins = {"query": _np(_bsh(q), dtype), "key": _np(_bsh(k), dtype), "value": _np(_bsh(v), dtype),
           "bias": None, "key_padding_mask": None, "attention_bias": _np(bias, dtype)}
    out = run_node("MultiHeadAttention", ins, ["output"], domain="com.microsoft", opset=1, **attrs)[0]
    out = out.reshape(n, c.t, h, -1).transpose(0, 2, 1, 3)
    return {"output": out.astype(np.float64).reshape(*batch, c.t, v.shape[-1])}


ROUTES = {"ort-attention": attention, "ort-gqa": gqa, "ort-mha": mha}
DTYPES = {"ort-attention": ("float64", "float32", "float16"), "ort-gqa": ("float32", "float16"),
          "ort-mha": ("float32", "float16")}
