"""The golden vectors through ONNX operators, one-node models run by onnx's own
``ReferenceEvaluator`` (spec/components/onnx.md says what maps and how).

Where the semantics coincide, each mapped vector must agree within its own tolerance, at
float64 and at float32. Where onnx.md documents a difference, the difference itself is
asserted, so the page goes stale loudly when onnx changes. onnx missing is an import
error here, not a skip: the ``numpy`` tox environment installs the ``onnx`` extra.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.defs
import pytest
from attnspec.backends import _rope as rope_rules
from attnspec.spec.compare import compare
from attnspec.spec.tensor import round_to
from attnspec.spec.vectors import default_spec
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

SPEC = default_spec()
DTYPES = ("float64", "float32")
ONNX_VERSION = tuple(int(p) for p in onnx.__version__.split(".")[:2])


# -- one-node models ---------------------------------------------------------------------------


def _model(nodes, feeds: dict, outputs: list[str], opset: int, functions=()):
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in feeds.items()]
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs]
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(f.domain, 1) for f in functions]
    return helper.make_model(helper.make_graph(nodes, "g", ins, outs), opset_imports=imports,
                             functions=list(functions))


def run_node(op: str, opset: int, inputs: dict, outputs: list[str], **attrs) -> list[np.ndarray]:
    """One ``op`` node; ``inputs`` in the operator's order, None for an absent optional one."""
    names = [n if a is not None else "" for n, a in inputs.items()]
    while names and not names[-1]:
        names.pop()
    feeds = {n: a for n, a in inputs.items() if a is not None}
    node = helper.make_node(op, names, outputs, **attrs)
    return ReferenceEvaluator(_model([node], feeds, outputs, opset)).run(None, feeds)


def _round(a: np.ndarray, dtype: str) -> np.ndarray:
    return round_to(a, dtype).astype(dtype) if a.dtype == np.float64 else a


def _inputs(v, dtype):
    return {k: _round(a, dtype) for k, a in v.inputs.items()}


def _params(v, dtype):
    return {k: _round(a, dtype) for k, a in v.params.items()}


def _attrs(v) -> dict:
    return {**SPEC.functions[v.function].attributes, **v.attributes}


def _ordinary(v) -> bool:
    """A value vector without empty arrays or NaN or +inf inputs: ONNX's behaviour on those
    edges is not something onnx.md claims (+inf: see the test below), so they are left out
    of the agreement."""
    arrays = list(v.inputs.values()) + list(v.params.values())
    return (v.expect == "value" and not v.deprecated
            and all(a.size > 0 for a in arrays)
            and not any((np.isnan(a) | np.isposinf(a)).any() for a in arrays if a.dtype.kind == "f"))


def vectors(component: str, *, where=lambda v: True) -> list:
    found = [v for v in SPEC.vectors if v.component == component and _ordinary(v) and where(v)]
    assert found, f"no {component} vector maps to ONNX"
    return found


def cases(component: str, *, where=lambda v: True):
    return [pytest.param(v, d, id=f"{v.id}-{d}")
            for v in vectors(component, where=where) for d in DTYPES if d in v.dtypes]


def assert_agrees(got, v, output: str, dtype: str, where: str):
    c = compare(got, v.outputs[output], dtype, v.tolerances[dtype])
    assert c.ok, f"{where} on {v.id} [{dtype}]: {c.describe(output)}"


def assert_disagrees(got, v, output: str, dtype: str):
    assert not compare(got, v.outputs[output], dtype, v.tolerances[dtype]).ok, \
        f"{v.id} [{dtype}]: expected the documented difference, but ONNX agrees"


# -- Softmax (opset 13) -----------------------------------------------------------------------


def _softmax_rows(v, dtype):
    """Softmax of the masked input (masked entries -inf), and the rows left all -inf."""
    x = _inputs(v, dtype)["x"]
    axis = _attrs(v)["axis"]
    mask = v.inputs.get("mask")
    keep = np.ones(x.shape, bool) if mask is None else np.broadcast_to(mask, x.shape)
    masked = np.where(keep, x, -np.inf).astype(x.dtype)
    y, = run_node("Softmax", 13, {"x": masked}, ["y"], axis=axis)
    return y, np.isneginf(masked).all(axis=axis, keepdims=True) & np.ones(x.shape, bool)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("v,dtype", cases("softmax"))
def test_softmax(v, dtype):
    y, empty = _softmax_rows(v, dtype)
    assert np.isnan(y[empty]).all(), "onnx.md: Softmax of a row of -inf is NaN"
    assert_agrees(np.where(empty, v.outputs["y"], y), v, "y", dtype, "Softmax")


def test_softmax_of_pos_inf_entries_is_nan_not_shared():
    v = SPEC.vector("softmax/pos-inf-001")
    with np.errstate(invalid="ignore"):
        y, _ = _softmax_rows(v, "float64")
    top = np.isposinf(v.inputs["x"]) & np.asarray(v.inputs["mask"])
    assert top.any() and np.isnan(y[top.any(-1)]).all()  # exp(inf - inf): the whole row
    assert np.all(v.outputs["y"][top] > 0)  # the spec: the +inf entries share the row


def test_softmax_of_a_fully_masked_row_is_nan_not_zero():
    v = SPEC.vector("softmax/fully-masked-001")
    with np.errstate(invalid="ignore"):
        y, empty = _softmax_rows(v, "float64")
    assert empty.any() and np.isnan(y[empty]).all()
    assert np.all(v.outputs["y"][empty] == 0)


# -- LayerNormalization (opset 17), RMSNormalization (opset 23) -------------------------------


def _eps32_expected(v, centred: bool) -> np.ndarray:
    """The vector's y with eps replaced by float32(eps), ONNX's float attribute:
    y - beta scales by sqrt((var + eps) / (var + float32(eps))) row by row."""
    x, y = v.inputs["x"], v.outputs["y"]
    eps = _attrs(v)["eps"]
    beta = v.params.get("beta", 0.0)
    c = x - x.mean(-1, keepdims=True) if centred else x
    var = (c * c).mean(-1, keepdims=True)
    return beta + (y - beta) * np.sqrt((var + eps) / (var + float(np.float32(eps))))


def _check_eps(got, v, dtype, centred: bool, op: str):
    """ONNX agrees with the float32-eps value; with the vector itself exactly where the
    float32 rounding of eps is below the vector's tolerance."""
    shifted = _eps32_expected(v, centred)
    tol = v.tolerances[dtype]
    c = compare(got, shifted, dtype, tol)
    assert c.ok, f"{op} on {v.id} [{dtype}] against float32(eps): {c.describe('y')}"
    if compare(shifted, v.outputs["y"], dtype, tol).ok:
        assert_agrees(got, v, "y", dtype, op)
    else:
        assert_disagrees(got, v, "y", dtype)  # onnx.md: epsilon is a float32 attribute


def _layer_norm(v, dtype):
    p, x = _params(v, dtype), _inputs(v, dtype)["x"]
    y, = run_node("LayerNormalization", 17, {"X": x, "Scale": p["gamma"], "B": p["beta"]}, ["Y"],
                  axis=-1, epsilon=_attrs(v)["eps"])
    return y


def _canonical(v):
    return _attrs(v)["variant"] == "canonical"


@pytest.mark.parametrize("v,dtype", cases("layer_norm", where=_canonical))
def test_layer_norm(v, dtype):
    _check_eps(_layer_norm(v, dtype), v, dtype, True, "LayerNormalization")


def test_layer_norm_epsilon_is_a_float32_attribute():
    v = SPEC.vector("layer_norm/small-var-001")
    eps = _attrs(v)["eps"]
    attr = helper.make_node("LayerNormalization", ["X", "S"], ["Y"], epsilon=eps).attribute[0]
    assert attr.f == float(np.float32(eps)) != eps
    assert_disagrees(_layer_norm(v, "float64"), v, "y", "float64")


def test_layer_norm_default_epsilon_is_the_spec_default():
    schema = onnx.defs.get_schema("LayerNormalization", 17)
    assert schema.attributes["epsilon"].default_value.f == float(np.float32(1e-5))
    assert SPEC.functions["layer_norm"].attributes["eps"] == 1e-5


def _rms_norm(v, dtype):
    p, x = _params(v, dtype), _inputs(v, dtype)["x"]
    scale = 1 + p["gamma"] if v.attributes.get("unit_offset") else p["gamma"]  # Gemma's offset folded
    y, = run_node("RMSNormalization", 23, {"X": x, "scale": scale}, ["Y"],
                  axis=-1, epsilon=_attrs(v)["eps"])
    return y


@pytest.mark.parametrize("v,dtype", cases("rms_norm"))
def test_rms_norm(v, dtype):
    _check_eps(_rms_norm(v, dtype), v, dtype, False, "RMSNormalization")


def test_rms_norm_default_epsilon_differs_from_the_spec():
    schema = onnx.defs.get_schema("RMSNormalization", 23)
    assert schema.attributes["epsilon"].default_value.f == float(np.float32(1e-5))
    assert SPEC.functions["rms_norm"].attributes["eps"] == 1e-6


# -- RotaryEmbedding (opset 23) ----------------------------------------------------------------


def _rope(v, dtype, interleaved=None):
    a = _attrs(v)
    x = _inputs(v, dtype)["x"]  # (..., T, K)
    t, k = x.shape[-2:]
    x4 = x.reshape(1, -1, t, k)  # (1, H, T, K): ONNX's 4-D layout
    # the cache holds the T positions used (offset ... offset + T - 1), not every position
    # from 0: at an offset past 2^20 a full cache would be 2 x 0.5 GB; the op gathers rows.
    # m cos(p theta_i), m sin(p theta_i) (T, R/2) in float64 as the spec says; theta and m of
    # a scaling rule from the shared rope_frequencies rules; R = rotary_dim is ONNX's
    # rotary_embedding_dim (0: every feature)
    cos, sin, r = rope_rules.tables(x.shape, a["offset"], a["base"], a["convention"],
                                    a.get("rotary_dim"), a.get("scaling"))
    if interleaved is None:
        interleaved = int(a["convention"] == "interleaved")
    ids = np.arange(t, dtype=np.int64)[None]  # (1, T): rows of the cache
    y, = run_node("RotaryEmbedding", 23,
                  {"X": x4, "cos_cache": _round(cos, dtype), "sin_cache": _round(sin, dtype),
                   "position_ids": ids},
                  ["Y"], interleaved=interleaved, rotary_embedding_dim=0 if r == k else r)
    return y.reshape(x.shape)


@pytest.mark.parametrize("v,dtype", cases("rope"))
def test_rope(v, dtype):
    assert_agrees(_rope(v, dtype), v, "y", dtype, "RotaryEmbedding")


def test_rope_conventions_are_not_interchangeable():
    v = SPEC.vector("rope/interleaved-001")
    assert_disagrees(_rope(v, "float64", interleaved=0), v, "y", "float64")


# -- Attention (opsets 23, 24) as sdpa -----------------------------------------------------------


def _attention_operands(v, dtype):
    """q, k, v broadcast to one batch shape and flattened to ONNX's (N, 1, T, K); the mask
    and bias combined into ONNX's attn_mask (boolean, or additive with -inf)."""
    x = _inputs(v, dtype)
    q, k, val = x["q"], x["k"], x["v"]
    t, s = q.shape[-2], k.shape[-2]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], val.shape[:-2])
    for name in ("mask", "bias"):
        if name in x:
            batch = np.broadcast_shapes(batch, x[name].shape[:-2])

    def flat(a, last):
        return np.broadcast_to(a, (*batch, *a.shape[-2:][:-1], last) if a.ndim >= 2 else a) \
            .reshape(-1, 1, a.shape[-2], last)

    q4, k4, v4 = flat(q, q.shape[-1]), flat(k, k.shape[-1]), flat(val, val.shape[-1])
    mask = None
    if "mask" in x or "bias" in x:
        keep = np.broadcast_to(x.get("mask", True), (*batch, t, s))
        if "bias" in x:
            bias = np.broadcast_to(x["bias"], (*batch, t, s))
            mask = np.where(keep, bias, -np.inf).astype(q.dtype).reshape(-1, 1, t, s)
        else:
            mask = np.ascontiguousarray(keep).reshape(-1, 1, t, s)
    return q4, k4, v4, mask, batch


def _attention(v, dtype, opset=23, **attrs):
    q4, k4, v4, mask, batch = _attention_operands(v, dtype)
    scale = _attrs(v)["scale"]
    if scale is not None:
        attrs["scale"] = scale
    attrs.update(_softcap(v))
    y, w = _run_attention(q4, k4, v4, mask, opset, attrs)  # (N, 1, T, V), (N, 1, T, S)
    t, s = q4.shape[-2], k4.shape[-2]
    return y.reshape(*batch, t, v4.shape[-1]), w.reshape(*batch, t, s)


def _run_attention(q4, k4, v4, mask, opset, attrs):
    """Y and the softmax weights (qk_matmul_output_mode=3) of one Attention node."""
    feeds = {"Q": q4, "K": k4, "V": v4}
    names = ["Q", "K", "V"]
    if mask is not None:
        feeds["attn_mask"] = mask
        names.append("attn_mask")
    node = helper.make_node("Attention", names, ["Y", "", "", "W"], qk_matmul_output_mode=3, **attrs)
    y, w = ReferenceEvaluator(_model([node], feeds, ["Y", "W"], opset)).run(None, feeds)
    return y, w


def _no_empty_rows(v) -> bool:
    if _attrs(v).get("num_kv_heads") is not None:
        return False  # grouped-query vectors: test_sdpa_gqa_is_attention_with_fewer_kv_heads
    q4, k4, v4, mask, _ = _attention_operands(v, "float64")
    if mask is None:
        return True
    keep = mask if mask.dtype == bool else np.isfinite(mask)
    return bool(keep.any(-1).all())


def _softcap(v) -> dict:
    """The spec's softcap as Attention's softcap attribute (a float32; absent = None)."""
    cap = _attrs(v).get("softcap")
    return {} if cap is None else {"softcap": cap}


def _float32_root(v) -> bool:
    """True where the scale attribute survives ONNX: absent (1/sqrt(K) is computed in the
    input's dtype), or a float whose float32 square root squares back to it exactly (the
    reference evaluator takes sqrt(scale) of the float32 attribute, in float32); and a
    softcap, a float32 attribute too, exact in float32."""
    scale, cap = _attrs(v)["scale"], _attrs(v).get("softcap")
    return (scale is None or float(np.sqrt(np.float32(scale))) ** 2 == scale) and \
        (cap is None or float(np.float32(cap)) == cap)


# onnx.md, "Kernel-scale magnitudes": the reference Attention misses these stress vectors at float32.
REFERENCE_ATTENTION_FAILS = {"sdpa/stress-far-below-001", "sdpa/stress-mask-above-001",
                             "sdpa/stress-fp16-overflow-001"}


@pytest.mark.parametrize("opset", [23, 24])
@pytest.mark.parametrize("v,dtype", cases("sdpa", where=_no_empty_rows))
def test_sdpa(v, dtype, opset):
    y, w = _attention(v, dtype, opset)
    judged = dtype if _float32_root(v) else "float32"  # onnx.md: sqrt(scale) in float32
    if v.id in REFERENCE_ATTENTION_FAILS and dtype == "float32":  # onnx.md: "Kernel-scale magnitudes"
        assert_disagrees(y, v, "output", judged)
        return
    assert_agrees(y, v, "output", judged, f"Attention-{opset}")
    assert_agrees(w, v, "weights", judged, f"Attention-{opset} (qk_matmul_output_mode=3)")


def _gqa(v) -> bool:
    return v.function == "sdpa" and _attrs(v).get("num_kv_heads") is not None


@pytest.mark.parametrize("v,dtype", cases("sdpa", where=_gqa))
def test_sdpa_gqa_is_attention_with_fewer_kv_heads(v, dtype):
    """num_kv_heads: 4-D Q (B, H, T, K) with K, V (B, H_kv, S, .) into Attention (23), which
    groups the query heads as the spec does; a bias is a float attn_mask."""
    x = _inputs(v, dtype)
    mask = x.get("mask") if "bias" not in x else x["bias"]
    feeds = {"Q": x["q"], "K": x["k"], "V": x["v"], "attn_mask": mask}
    y = run_node("Attention", 23, feeds, ["Y"], **_softcap(v))[0]
    assert_agrees(y, v, "output", dtype, "Attention-23 with kv heads < q heads")


def _softcapped(v) -> bool:
    return v.function == "sdpa" and _attrs(v).get("softcap") is not None


def test_attention_softcap_maps_every_softcap_vector_but_a_fully_masked_row():
    """The softcap vectors run through Attention's softcap attribute (test_sdpa and the GQA
    test above): all but sdpa/softcap-mask-001 (a fully masked row, left out for every
    onnx release by _no_empty_rows; its live revision, since 1.2.0)."""
    mapped = {v.id for v in vectors("sdpa", where=lambda v: _softcapped(v) and (
        _no_empty_rows(v) or _gqa(v)))}
    every = {v.id for v in SPEC.vectors if _softcapped(v) and v.expect == "value" and not v.deprecated}
    left = every - mapped
    assert len(left) == 1 and left.pop().startswith("sdpa/softcap-mask-001"), every - mapped


def test_attention_softcap_zero_is_off_where_the_spec_refuses_it():
    """onnx.md: Attention's softcap = 0 (its default) means no capping; the spec's softcap = 0
    is a ConfigError (sdpa/softcap-zero-001) and None means no capping."""
    r = np.random.default_rng(0)
    q, k, val = (r.uniform(-4, 4, (1, 2, 3, 4)) for _ in range(3))
    plain = run_node("Attention", 23, {"Q": q, "K": k, "V": val}, ["Y"])[0]
    zero = run_node("Attention", 23, {"Q": q, "K": k, "V": val}, ["Y"], softcap=0.0)[0]
    capped = run_node("Attention", 23, {"Q": q, "K": k, "V": val}, ["Y"], softcap=1.0)[0]
    np.testing.assert_array_equal(zero, plain)
    assert not np.allclose(capped, plain)
    v = next(x for x in SPEC.vectors if x.id == "sdpa/softcap-zero-001")
    assert v.expect == "error" and v.error == "ConfigError" and v.attributes["softcap"] == 0.0


def test_attention_scale_attribute_is_rooted_in_float32():
    v = SPEC.vector("sdpa/scale-002")
    scale = _attrs(v)["scale"]
    assert scale == float(np.float32(scale)) == 0.125  # exact as a float32 attribute ...
    assert not _float32_root(v)  # ... but its float32 square root is not
    y, w = _attention(v, "float64")
    assert_disagrees(y, v, "output", "float64")
    assert_agrees(y, v, "output", "float32", "Attention")


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_attention_fully_masked_row_by_onnx_release():
    """onnx 1.18-1.22: NaN; onnx 1.23: zeros, as the spec (onnx.md)."""
    v = SPEC.vector("sdpa/fully-masked-001")
    y, w = _attention(v, "float64")
    empty = ~np.broadcast_to(v.inputs["mask"], w.shape).any(-1)  # (..., T)
    assert empty.any()
    if ONNX_VERSION >= (1, 23):
        assert_agrees(y, v, "output", "float64", "Attention")
        assert_agrees(w, v, "weights", "float64", "Attention")
    else:
        assert np.isnan(y[empty]).all() and np.isnan(w[empty]).all()


def _causal_case(vid):
    """q, k, v of sdpa/basic-001 cut to the T and S of a masks vector, and its mask."""
    mask = SPEC.vector(vid).outputs["mask"]
    t, s = mask.shape
    rng = np.random.default_rng(5)
    q, k, val = (rng.standard_normal((1, 1, n, 4)) for n in (t, s, s))
    return q, k, val, mask


@pytest.mark.parametrize("vid", ["masks/causal-002", "masks/causal-004"])
def test_is_causal_is_top_left_without_a_cache(vid):
    q, k, val, spec_mask = _causal_case(vid)
    t, s = spec_mask.shape
    causal, _ = _run_attention(q, k, val, None, 23, {"is_causal": 1})
    top_left, _ = _run_attention(q, k, val, np.tril(np.ones((t, s), bool)), 23, {})
    spec, _ = _run_attention(q, k, val, spec_mask, 23, {})
    np.testing.assert_allclose(causal, top_left, rtol=1e-14, atol=1e-15)
    assert np.abs(causal - spec).max() > 1e-3


def test_is_causal_is_bottom_right_after_a_past_key_cache():
    q, k, val, spec_mask = _causal_case("masks/causal-002")  # T = 2 new queries, S = 5
    t, s = spec_mask.shape
    past = s - t
    feeds = {"Q": q, "K": k[:, :, past:], "V": val[:, :, past:],
             "past_key": k[:, :, :past], "past_value": val[:, :, :past]}
    node = helper.make_node("Attention", ["Q", "K", "V", "", "past_key", "past_value"],
                            ["Y", "present_key", "present_value"], is_causal=1)
    y = ReferenceEvaluator(_model([node], feeds, ["Y", "present_key", "present_value"], 23)) \
        .run(None, feeds)[0]
    spec, _ = _run_attention(q, k, val, spec_mask, 23, {})
    np.testing.assert_allclose(y, spec, rtol=1e-14, atol=1e-15)


def test_attention_scale_is_a_float32_attribute():
    attr = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], scale=0.1).attribute[0]
    assert attr.f == float(np.float32(0.1)) != 0.1


def _function_body_attention(q4, k4, v4):
    """Attention-23 expanded into its function body (what a runtime that inlines it runs)."""
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"])
    types = [helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
             .SerializeToString() for a in (q4, k4, v4)]
    body = onnx.FunctionProto()
    body.ParseFromString(onnx.defs.get_schema("Attention", 23)
                         .get_context_dependent_function(node.SerializeToString(), types))
    body.domain = "expanded"
    del body.output[1:]
    call = helper.make_node("Attention", ["Q", "K", "V", "", "", ""], ["Y"], domain="expanded")
    feeds = {"Q": q4, "K": k4, "V": v4}
    return ReferenceEvaluator(_model([call], feeds, ["Y"], 23, functions=[body])).run(None, feeds)[0]


def test_attention_function_body_takes_sqrt_scale_in_float32():
    v = SPEC.vector("sdpa/basic-001")
    q4, k4, v4, mask, batch = _attention_operands(v, "float64")
    assert mask is None
    y = _function_body_attention(q4, k4, v4).reshape(*batch, q4.shape[-2], v4.shape[-1])
    assert_disagrees(y, v, "output", "float64")
    assert_agrees(y, v, "output", "float32", "Attention's function body")
    kk = q4.shape[-1]
    root = np.sqrt(np.float32(1) / np.sqrt(np.float32(kk)))  # float32, as the body computes it
    assert abs(float(root) ** 2 * math.sqrt(kk) - 1) > 1e-9


# -- mha: MatMul/Add projections around a 3-D Attention (opset 23) -----------------------------


def _projection(x: str, w: str, b: str, out: str, params: dict) -> list:
    """x @ w (+ b): the spec's (in, out) linear map; an absent bias is no node."""
    if b not in params:
        return [helper.make_node("MatMul", [x, w], [out])]
    return [helper.make_node("MatMul", [x, w], [out + "_xw"]),
            helper.make_node("Add", [out + "_xw", b], [out])]


def _mha(v, dtype):
    x, p = _inputs(v, dtype), _params(v, dtype)
    h = _attrs(v)["num_heads"]
    b, t, s = x["query"].shape[0], x["query"].shape[1], x["key"].shape[1]
    feeds = {"query": x["query"], "key": x["key"], "value": x["value"], **p}
    names = ["q", "k", "v"]
    if "mask" in x:
        feeds["mask"] = np.ascontiguousarray(np.broadcast_to(x["mask"], (b, h, t, s)))
        names.append("mask")
    nodes = (_projection("query", "w_q", "b_q", "q", p) + _projection("key", "w_k", "b_k", "k", p)
             + _projection("value", "w_v", "b_v", "v", p)
             + [helper.make_node("Attention", names, ["heads", "", "", "weights"], q_num_heads=h,
                                 kv_num_heads=_attrs(v).get("num_kv_heads") or h,
                                 qk_matmul_output_mode=3)]
             + _projection("heads", "w_o", "b_o", "output", p))  # (B, T, H·V) -> (B, T, Do)
    return ReferenceEvaluator(_model(nodes, feeds, ["output", "weights"], 23)).run(None, feeds)


def _mha_maps(v) -> bool:
    """Every row keeps a key, or onnx 1.23+ (which zeroes a row that keeps none, as the spec)."""
    mask = v.inputs.get("mask")
    return mask is None or ONNX_VERSION >= (1, 23) or bool(mask.any(-1).all())


@pytest.mark.parametrize("v,dtype", cases("mha", where=_mha_maps))
def test_mha(v, dtype):
    output, weights = _mha(v, dtype)
    assert_agrees(output, v, "output", dtype,
                  "MatMul/Add + Attention(q_num_heads=H, kv_num_heads=H_kv)")
    assert_agrees(weights, v, "weights", dtype, "Attention(qk_matmul_output_mode=3)")


# -- GRU (opset 22) as gru_cell and gru ---------------------------------------------------------


def _gru_weights(p, hidden):
    """Spec (I, 3H) blocks r, z, n -> ONNX (1, 3H, I) blocks z, r, h; B = [Wb; Rb] (1, 6H)."""
    def zrh(w):
        r, z, n = np.split(w, 3, axis=-1)
        return np.concatenate([z, r, n], axis=-1)

    dtype = p["w_ih"].dtype
    zero = np.zeros(3 * hidden, dtype)
    w = zrh(p["w_ih"]).T[None]
    r = zrh(p["w_hh"]).T[None]
    b = np.concatenate([zrh(p.get("b_ih", zero)), zrh(p.get("b_hh", zero))])[None]
    return w, r, b


def _gru(x, h0, p, linear_before_reset=1):
    """x (B, T, I), h0 (B, H) or None -> (outputs (B, T, H), h_last (B, H))."""
    hidden = p["w_hh"].shape[0]
    w, r, b = _gru_weights(p, hidden)
    ys, yh = run_node("GRU", 22, {"X": x.transpose(1, 0, 2), "W": w, "R": r, "B": b,
                                  "sequence_lens": None,
                                  "initial_h": None if h0 is None else h0[None]},
                      ["Y", "Y_h"], hidden_size=hidden, linear_before_reset=linear_before_reset)
    return ys[:, 0].transpose(1, 0, 2), yh[0]  # layout 0: Y (T, 1, B, H), Y_h (1, B, H)


@pytest.mark.parametrize("v,dtype", cases("gru_cell"))
def test_gru_cell(v, dtype):
    x = _inputs(v, dtype)
    _, h = _gru(x["x"][:, None], x["h"], _params(v, dtype))
    assert_agrees(h, v, "h", dtype, "GRU(linear_before_reset=1), one step")


@pytest.mark.parametrize("v,dtype", cases("gru"))
def test_gru(v, dtype):
    x = _inputs(v, dtype)
    outputs, h_last = _gru(x["x"], x.get("h0"), _params(v, dtype))
    assert_agrees(outputs, v, "outputs", dtype, "GRU(linear_before_reset=1)")
    assert_agrees(h_last, v, "h_last", dtype, "GRU(linear_before_reset=1)")


def test_gru_default_resets_before_the_hidden_matmul():
    v = SPEC.vector("gru_cell/hidden-bias-001")
    x = _inputs(v, "float64")
    _, h = _gru(x["x"][:, None], x["h"], _params(v, "float64"), linear_before_reset=0)
    assert_disagrees(h, v, "h", "float64")


# -- Gather as embedding(scale=False) ------------------------------------------------------------


@pytest.mark.parametrize("v,dtype", cases("embedding", where=lambda v: v.function == "embedding"
                                          and not _attrs(v)["scale"]))
def test_embedding_unscaled(v, dtype):
    y, = run_node("Gather", 13, {"data": _params(v, dtype)["table"], "indices": v.inputs["ids"]},
                  ["y"], axis=0)
    assert_agrees(y, v, "y", dtype, "Gather")


# -- feedforward: MatMul, Add, Relu or Gelu (opset 20) ---------------------------------------------


def _feedforward(v, dtype):
    p, x = _params(v, dtype), _inputs(v, dtype)["x"]
    act = _attrs(v)["activation"]
    feeds = {"x": x, **{k: p[k] for k in ("w1", "b1", "w2", "b2")}}
    if act == "relu":
        activation = helper.make_node("Relu", ["h"], ["a"])
    else:
        activation = helper.make_node("Gelu", ["h"], ["a"],
                                      approximate="tanh" if act == "gelu_tanh" else "none")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["xw"]), helper.make_node("Add", ["xw", "b1"], ["h"]),
             activation,
             helper.make_node("MatMul", ["a", "w2"], ["aw"]), helper.make_node("Add", ["aw", "b2"], ["y"])]
    return ReferenceEvaluator(_model(nodes, feeds, ["y"], 20)).run(None, feeds)[0]


def _has_biases(v):
    return {"b1", "b2"} <= set(v.params)


@pytest.mark.parametrize("v,dtype", cases("feedforward", where=_has_biases))
def test_feedforward(v, dtype):
    y = _feedforward(v, dtype)
    if _attrs(v)["activation"] != "relu" and dtype == "float64":
        assert_agrees(y, v, "y", "float32", "Gelu at float64 (float32 Erf and constants)")
    else:
        assert_agrees(y, v, "y", dtype, "MatMul/Add/activation")


@pytest.mark.parametrize("vid", ["feedforward/gelu-tail-001", "feedforward/gelu-tanh-tail-001"])
def test_gelu_is_float32_accurate_at_float64(vid):
    v = SPEC.vector(vid)
    assert_disagrees(_feedforward(v, "float64"), v, "y", "float64")


# -- Attention (opset 25) left_window_size: sliding_window_mask ---------------------------------


def _window_rows_see_a_key(v) -> bool:
    a = _attrs(v)
    return v.function == "sliding_window_mask" and 0 < a["t"] <= a["s"]


@pytest.mark.skipif(onnx.defs.onnx_opset_version() < 25,
                    reason="Attention's left_window_size is opset 25 (onnx >= 1.20)")
@pytest.mark.parametrize("v", vectors("masks", where=_window_rows_see_a_key), ids=lambda v: v.id)
def test_sliding_window_is_left_window_size_w_minus_1_with_past_key(v):
    """window = W is is_causal=1, left_window_size=W-1, the S - T cached keys in past_key.
    Q = K = 0 and V = I_S: output row i is uniform over exactly the keys query i sees."""
    a = _attrs(v)
    t, s, w = a["t"], a["s"], a["window"]
    q, k, eye = np.zeros((1, 1, t, 1)), np.zeros((1, 1, s, 1)), np.eye(s)[None, None]
    past = s - t
    y = run_node("Attention", 25, {"Q": q, "K": k[:, :, past:], "V": eye[:, :, past:],
                                   "attn_mask": None, "past_key": k[:, :, :past],
                                   "past_value": eye[:, :, :past]},
                 ["Y", "present_key", "present_value"], is_causal=1, left_window_size=w - 1)[0]
    assert np.array_equal(y[0, 0] > 0, v.outputs["mask"]), (y[0, 0], v.outputs["mask"])
