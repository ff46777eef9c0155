"""The composite tape (backends/composite/tape.py) against torch autograd: the NumPy
backend's VJP of a composite, built from its kernels' hand-written VJPs, equals
``torch.autograd.grad`` through the same composite over the torch kernels, at float64.
Skipped (only) where torch is not installed: the ``numpy`` tox environment."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnspec.backends.numpy import NumpyBackend  # noqa: E402
from attnspec.backends.torch import TorchBackend  # noqa: E402
from attnspec.spec.cases._build import Rng  # noqa: E402


def _ffn_ln(r, d, f, prefix="", norm="norm"):
    return {f"{prefix}ffn.w1": r.uniform((d, f)), f"{prefix}ffn.b1": r.uniform((f,)),
            f"{prefix}ffn.w2": r.uniform((f, d)), f"{prefix}ffn.b2": r.uniform((d,)),
            f"{prefix}{norm}.gamma": 1.0 + r.uniform((d,), -0.5, 0.5),
            f"{prefix}{norm}.beta": r.uniform((d,))}


def _residual(position, activation):
    r = Rng(f"test/tape/residual/{position}/{activation}")
    call = {"x": r.uniform((2, 3, 4)), "position": position, "activation": activation,
            "params": _ffn_ln(r, 4, 6)}
    return "residual", "feedforward", call, {"y": r.uniform((2, 3, 4))}


CASES = {f"residual-{pos}-{act}": (_residual, pos, act)
         for pos in ("post", "pre") for act in ("relu", "gelu")}


def _both(name, module, call, cot):
    """(numpy tape gradients, torch autograd gradients), each (inputs, params) as NumPy."""
    nb, tb = NumpyBackend(), TorchBackend()
    got = nb.vjp(name, module, call, cot)

    def t(a):
        return tb.asarray(a, dtype="float64") if isinstance(a, np.ndarray) else a

    tcall = {k: ({p: t(a) for p, a in v.items()} if k == "params" else t(v))
             for k, v in call.items()}
    want = tb.vjp(name, module, tcall, {k: t(c) for k, c in cot.items()})
    return got, tuple({k: tb.to_numpy(g) for k, g in w.items()} for w in want)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_tape_equals_torch_autograd(case):
    make, *args = CASES[case]
    (gi, gp), (wi, wp) = _both(*make(*args))
    assert set(gi) == set(wi) and set(gp) == set(wp)
    for group, got, want in (("input", gi, wi), ("param", gp, wp)):
        for k in want:
            assert got[k].dtype == np.float64, (group, k)
            np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-12,
                                       err_msg=f"{case}: gradient of {group} {k}")


def test_the_comparison_can_fail(monkeypatch):
    """A tape whose additions pass no gradient to their first operand (the skip path of
    x + f(x) lost) differs from autograd."""
    from attnspec.backends.composite import tape

    keep = tape.Tape.add

    def lossy(self, shapes, nodes, out):
        return keep(self, shapes, [None] + list(nodes[1:]), out)

    monkeypatch.setattr(tape.Tape, "add", lossy)
    with pytest.raises(AssertionError):
        test_the_tape_equals_torch_autograd("residual-pre-relu")
