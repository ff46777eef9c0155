"""ONNX Attention (opset 25) left_window_size / right_window_size against the local_window_mask
vectors, run by onnx's own ReferenceEvaluator (masks.md, "Local windows (left, right)").

With the S - T earlier keys in past_key the band is the spec's (bottom-right); without a
cache it is top-left, and that difference is asserted on `masks/local-002`, so the page goes
stale loudly when onnx changes. onnx is an import here, not a skip: the numpy environment
installs it.
"""

import numpy as np
import onnx
import onnx.defs
import pytest
from attnspec.spec.vectors import default_spec
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

SPEC = default_spec()
pytestmark = pytest.mark.skipif(onnx.defs.onnx_opset_version() < 25,
                                reason="Attention's window attributes are opset 25 (onnx >= 1.20)")


def _attention(feeds: dict, **attributes) -> np.ndarray:
    names = list(feeds)
    node = helper.make_node("Attention", names, ["Y"], **attributes)
    ins = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, a.shape) for n, a in feeds.items()]
    out = [helper.make_tensor_value_info("Y", TensorProto.UNDEFINED, None)]
    model = helper.make_model(helper.make_graph([node], "g", ins, out),
                              opset_imports=[helper.make_opsetid("", 25)])
    return ReferenceEvaluator(model).run(None, feeds)[0]


def _onnx_mask(t, s, left, right, cache: bool) -> np.ndarray:
    """Q = K = 0 and V = I_S: output row i is uniform over exactly the keys query i sees."""
    q, k, eye = np.zeros((1, 1, t, 1)), np.zeros((1, 1, s, 1)), np.eye(s)[None, None]
    window = {"left_window_size": -1 if left is None else left,
              "right_window_size": -1 if right is None else right}
    if not cache:
        return _attention({"Q": q, "K": k, "V": eye}, **window)[0, 0] > 0
    past = s - t
    feeds = {"Q": q, "K": k[:, :, past:], "V": eye[:, :, past:], "attn_mask": np.zeros((t, s)),
             "past_key": k[:, :, :past], "past_value": eye[:, :, :past]}
    node_out = _attention(feeds, **window)
    return node_out[0, 0] > 0


def _every_row_sees_a_key(v) -> bool:
    return bool(np.all(v.outputs["mask"].any(axis=-1))) and v.attributes["t"] > 0


LOCAL = [v for v in SPEC.vectors if v.function == "local_window_mask" and v.expect == "value"
         and not v.deprecated and _every_row_sees_a_key(v)]


@pytest.mark.parametrize("v", LOCAL, ids=lambda v: v.id)
def test_left_right_window_size_with_past_key_is_local_window_mask(v):
    a = v.attributes
    got = _onnx_mask(a["t"], a["s"], a["left"], a["right"], cache=a["t"] < a["s"])
    assert np.array_equal(got, v.outputs["mask"]), (got, v.outputs["mask"])


def test_without_past_key_the_band_is_top_left():
    """masks/local-002 (T = 3 < S = 8) with every key passed as K: ONNX puts query i at
    position i, the spec at i + S - T."""
    v = SPEC.vector("masks/local-002")
    a = v.attributes
    got = _onnx_mask(a["t"], a["s"], a["left"], a["right"], cache=False)
    j, i = np.arange(a["s"])[None, :], np.arange(a["t"])[:, None]
    assert np.array_equal(got, (j >= i - a["left"]) & (j <= i + a["right"]))
    assert not np.array_equal(got, v.outputs["mask"])
