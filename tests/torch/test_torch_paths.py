"""The attention path (``attention=explicit|fused``) is per backend instance: two backends
in one process, or in two threads, never see each other's choice."""

import threading

import pytest

torch = pytest.importorskip("torch")

from attnspec.backends.torch import TorchBackend  # noqa: E402
from attnspec.backends.torch._core import skipping_weights  # noqa: E402


def _qkv(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, 4, generator=g, dtype=torch.float64) for _ in range(3)]


def test_two_backends_in_one_process_keep_their_own_path():
    explicit, fused = TorchBackend(attention="explicit"), TorchBackend(attention="fused")
    q, k, v = _qkv()
    out_e, w_e = explicit.function("sdpa", "attention")(q, k, v)
    out_f, w_f = fused.function("sdpa", "attention")(q, k, v)
    explicit.function("sdpa", "attention")(q, k, v)  # after the fused backend was made
    assert explicit.paths.ran == {"explicit": 2}
    assert fused.paths.ran == {"fused": 1}
    torch.testing.assert_close(out_f, out_e)  # the same equation either way
    torch.testing.assert_close(w_f, w_e)


def test_threads_with_different_attention_options_do_not_interfere():
    backends = {"explicit": TorchBackend(attention="explicit"),
                "fused": TorchBackend(attention="fused")}
    start, calls, errors = threading.Barrier(2), 50, []

    def work(backend):
        sdpa = backend.function("sdpa", "attention")
        q, k, v = _qkv()
        try:
            start.wait()
            for _ in range(calls):
                sdpa(q, k, v)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(b,)) for b in backends.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for name, backend in backends.items():
        assert backend.paths.ran == {name: calls}, (name, backend.paths.ran)


def test_the_modules_fast_path_stays_in_its_thread():
    """A module's no-weights fast path in one thread does not switch another thread's
    backend to the fused kernels."""
    backend = TorchBackend(attention="explicit")
    sdpa = backend.function("sdpa", "attention")
    seen = []
    with skipping_weights(True):
        worker = threading.Thread(target=lambda: seen.append(sdpa(*_qkv())[1]))
        worker.start()
        worker.join()
    assert seen[0] is not None  # weights computed: the explicit path
    assert backend.paths.ran == {"explicit": 1}


def test_the_fused_path_takes_a_key_mask_of_any_rank():
    """A (S,) key mask broadcasts as in the spec (PyTorch's kernel wants (..., T, S)); the
    second case is the one hypothesis found: rank-4 inputs, every key masked."""
    explicit, fused = TorchBackend(attention="explicit"), TorchBackend(attention="fused")
    cases = [((2, 2, 3, 4), [True, False, True]), ((1, 1, 1, 1), [False]),
             ((3, 4), [[True, False, False]])]
    for shape, mask in cases:
        q = torch.randn(*shape, dtype=torch.float64)
        mask = torch.tensor(mask)
        out_e, _ = explicit.function("sdpa", "attention")(q, q, q, mask)
        out_f, _ = fused.function("sdpa", "attention")(q, q, q, mask)
        torch.testing.assert_close(out_f, out_e)
    assert fused.paths.ran == {"fused": len(cases)}
