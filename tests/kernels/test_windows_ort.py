"""ONNX Runtime's com.microsoft GroupQueryAttention `local_window_size` against the spec's
windows (masks.md, "Local windows (left, right)"): local_window_size = w keeps w keys, the
query's own included, bottom-right after the cache: the spec's sliding_window_mask(window=w),
local_window_mask(left=w-1, right=0)."""

import numpy as np
import onnxruntime as ort
import pytest
from attnspec.spec.vectors import default_spec
from onnx import TensorProto as TP
from onnx import helper

SPEC = default_spec()
D = 8


def _session(t: int, past: int, window: int):
    node = helper.make_node(
        "GroupQueryAttention", ["query", "key", "value", "past_key", "past_value", "seqlens_k",
                                "total_sequence_length"], ["out", "present_key", "present_value"],
        domain="com.microsoft", num_heads=1, kv_num_heads=1, local_window_size=window)
    f = TP.FLOAT
    ins = [helper.make_tensor_value_info(n, f, [1, t, D]) for n in ("query", "key", "value")]
    ins += [helper.make_tensor_value_info(n, f, [1, 1, past, D]) for n in ("past_key", "past_value")]
    ins += [helper.make_tensor_value_info("seqlens_k", TP.INT32, [1]),
            helper.make_tensor_value_info("total_sequence_length", TP.INT32, [])]
    outs = [helper.make_tensor_value_info(n, f, None) for n in ("out", "present_key", "present_value")]
    model = helper.make_model(helper.make_graph([node], "g", ins, outs),
                              opset_imports=[helper.make_opsetid("", 21),
                                             helper.make_opsetid("com.microsoft", 1)])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def gqa_mask(t: int, s: int, window: int) -> np.ndarray:
    """Q = K = 0, V = the first S rows of I: output row i is uniform over the keys it sees."""
    past = s - t
    eye = np.eye(s, D, dtype=np.float32)[None]  # (1, S, D), S <= D
    feeds = {"query": np.zeros((1, t, D), np.float32), "key": np.zeros((1, t, D), np.float32),
             "value": eye[:, past:], "past_key": np.zeros((1, 1, past, D), np.float32),
             "past_value": eye[:, None, :past], "seqlens_k": np.array([s - 1], np.int32),
             "total_sequence_length": np.array(s, np.int32)}
    return _session(t, past, window).run(None, feeds)[0][0, :, :s] > 0


WINDOWS = [v for v in SPEC.vectors if v.function == "sliding_window_mask" and v.expect == "value"
           and not v.deprecated and 0 < v.attributes["t"] <= v.attributes["s"] <= D]


@pytest.mark.parametrize("v", WINDOWS, ids=lambda v: v.id)
def test_local_window_size_w_is_sliding_window_w(v):
    a = v.attributes
    assert np.array_equal(gqa_mask(a["t"], a["s"], a["window"]), v.outputs["mask"])


def test_local_window_size_w_is_local_window_left_w_minus_1_right_0():
    """w = 3 at T = S = 6 keeps 3 keys a row (masks/window-001), not flash-attn's left = 3
    (4 keys)."""
    want = SPEC.vector("masks/window-001").outputs["mask"]  # T = S = 6, window 3
    got = gqa_mask(6, 6, 3)
    assert np.array_equal(got, want)
    assert got.sum(axis=-1).max() == 3
