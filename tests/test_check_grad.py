"""`attnspec check FILE.py:NAME --component C --grad`: a hand-written backward function
against the component's gradient vectors (examples/coursework/*_backward.py)."""

import re
import textwrap
from pathlib import Path

import pytest
from attnspec.conformance.cli import main
from attnspec.spec.vectors import default_spec

EXAMPLES = Path(__file__).parents[1] / "examples" / "coursework"


def check(capsys, target, component: str, *extra: str) -> tuple[int, str, str]:
    code = main(["check", str(target), "--component", component, "--grad", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def student(tmp_path, body: str, name: str = "student.py") -> Path:
    """A student's file that may import the examples (``from attention_backward import``)."""
    path = tmp_path / name
    path.write_text(f"import sys\n\nimport numpy as np\n\nsys.path.insert(0, {str(EXAMPLES)!r})\n"
                    + textwrap.dedent(body))
    return path


def grad_ids(component: str) -> list[str]:
    return [v.id for v in default_spec().vectors
            if v.component == component and v.expect == "gradient" and not v.deprecated]


GRAD_ID = r"(?:stress-)?grad-\d+(?:r\d+)?"  # a gradient vector's id after the component's


def live(vid: str) -> str:
    """The live revision of ``vid`` (its ``superseded_by`` chain followed)."""
    v = default_spec().vector(vid)
    while v.superseded_by:
        v = default_spec().vector(v.superseded_by)
    return v.id


def stating(component: str, *attributes: str) -> list[str]:
    """The gradient vectors of component that state one of the attributes."""
    spec = default_spec()
    return [i for i in grad_ids(component)
            if set(attributes) & {a for a, x in spec.vector(i).attributes.items() if x is not None}]


# what examples/coursework/attention_backward.py:sdpa_backward does not take
SDPA_LATER = ("num_kv_heads", "softcap")


def line_of(out: str, vid: str) -> str:
    return next(ln for ln in out.splitlines() if re.match(rf"(PASS|FAIL|SKIP)  {vid} ", ln))


@pytest.mark.parametrize("target, component, skipped", [
    ("layer_norm_backward.py:layer_norm_backward", "layer_norm", 2),  # variant='annotated'
    ("softmax_backward.py:softmax_backward", "softmax", 0),
    ("attention_backward.py:sdpa_backward", "sdpa", len(stating("sdpa", *SDPA_LATER))),
])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_correct_backward_functions_pass(capsys, target, component, skipped, dtype):
    code, out, err = check(capsys, EXAMPLES / target, component, "--dtype", dtype)
    assert code == 0, out + err
    ids = grad_ids(component)
    assert len(ids) >= 4
    passed = re.findall(rf"PASS  ({component}/{GRAD_ID}) +max abs err \S+, \d+ gradients?", out)
    assert len(passed) == len(ids) - skipped
    assert f"{len(passed)} passed, 0 failed" in out


def test_layer_norm_backward_without_the_mean_terms_fails_on_dx(capsys):
    code, out, _ = check(capsys, EXAMPLES / "layer_norm_backward.py:layer_norm_backward_no_mean",
                         "layer_norm")
    assert code == 1
    for vid in map(live, ("layer_norm/grad-001", "layer_norm/grad-002")):
        assert re.search(rf"FAIL  {vid} +gradients differ from the spec \(rtol=\S+, atol=\S+\)\n"
                         rf" +gradient dx: max abs err [0-9.e+-]+, max ULP \S+, worst at index "
                         rf"\(.*\): expected -?[0-9.e-]+, got -?[0-9.e-]+\n", out)
    # dgamma and dbeta are right: only dx is named
    assert "param 'gamma'" not in out and "param 'beta'" not in out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_softmax_backward_without_the_subtraction_fails(capsys, dtype):
    code, out, _ = check(capsys,
                         EXAMPLES / "softmax_backward.py:softmax_backward_no_subtraction",
                         "softmax", "--dtype", dtype)
    assert code == 1
    for vid in grad_ids("softmax"):
        assert line_of(out, vid).startswith(f"FAIL  {vid}")
    assert len(re.findall(r"\n +gradient dx: max abs err", out)) == len(grad_ids("softmax"))


def test_a_wrong_parameter_gradient_is_named_by_its_path(capsys, tmp_path):
    path = student(tmp_path, """
        def backward(dy, x, gamma, beta, eps=1e-5, variant="canonical"):
            c = x - x.mean(axis=-1, keepdims=True)
            r = np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps)
            z, dz = c / r, dy * gamma
            dx = (dz - dz.mean(-1, keepdims=True) - z * (dz * z).mean(-1, keepdims=True)) / r
            rows = tuple(range(x.ndim - 1))
            return {"x": dx, "gamma": (dy * c).sum(axis=rows), "beta": dy.sum(axis=rows)}
    """)
    code, out, _ = check(capsys, f"{path}:backward", "layer_norm", "--variant", "canonical")
    assert code == 1
    assert re.search(rf"FAIL  {live('layer_norm/grad-001')} .*\n +gradient of param 'gamma': "
                     rf"max abs err", out)
    assert "gradient dx" not in out and "'beta'" not in out


def test_a_forward_function_with_grad_is_a_clear_error(capsys):
    code, out, err = check(capsys, EXAMPLES / "attention_correct.py:scaled_dot_product_attention",
                           "sdpa")
    assert code == 2 and out == ""
    assert "looks like a forward function: it takes no cotangent" in err
    assert "scaled_dot_product_attention(d_output, d_weights, q, k, v, *, mask, bias" in err
    assert len(err.strip().splitlines()) == 1


def test_a_class_with_grad_is_a_clear_error(capsys):
    code, _, err = check(capsys, EXAMPLES / "layer_norm_class.py:LayerNorm", "layer_norm")
    assert code == 2
    assert "--grad checks a backward function; LayerNorm is a class" in err


def test_too_many_positional_arguments_is_one_line(capsys, tmp_path):
    path = student(tmp_path, """
        def backward(dy, dz, dw, x, gamma, beta):
            return dy
    """)
    code, _, err = check(capsys, f"{path}:backward", "layer_norm")
    assert code == 2
    assert re.search(r"takes 4 positional argument\(s\) without a default; with --grad, check "
                     r"calls backward\(dy, x, \*, gamma, beta, eps, variant\): 1 cotangent\(s\) "
                     r"\(y\), then the 1 required input\(s\) \(x\)", err)


@pytest.mark.parametrize("ret, message", [
    ("dx, dgamma", r"returned 2 value\(s\); the gradients here are 3: x, gamma, beta \(the float "
                   r"inputs in the spec's order, then the parameters\)"),
    ("dx", r"returned one array; the gradients here are 3: x, gamma, beta"),
    ("{'dx': dx, 'dgamma': dgamma}", r"returned a dict with keys \['dgamma', 'dx'\]; name the "
                                     r"gradients by input name and parameter path: x, gamma, beta"),
    ("None", r"returned None"),
])
def test_wrong_return_shape_is_one_line(capsys, tmp_path, ret, message):
    path = student(tmp_path, f"""
        def backward(dy, x, gamma, beta):
            dx, dgamma = dy * gamma, dy.sum(axis=tuple(range(x.ndim - 1)))
            return {ret}
    """)
    vid = live("layer_norm/grad-001")
    code, out, _ = check(capsys, f"{path}:backward", "layer_norm", "-k", vid.split("/")[1])
    assert code == 1
    assert re.search(rf"FAIL  {vid} +{message}.*\n +\(", out), out


def test_a_missing_gradient_fails_naming_it(capsys, tmp_path):
    path = student(tmp_path, """
        def backward(d_output, q, k, v, mask=None, bias=None, scale=None):
            return {}
    """)
    # a dict without any known key is one line; one with some keys names the missing ones
    code, out, _ = check(capsys, f"{path}:backward", "sdpa", "-k", "grad-001")
    assert code == 1 and "returned a dict with keys []" in out
    path = student(tmp_path, """
        from attention_backward import sdpa_backward

        def backward(d_output, d_weights, q, k, v, mask=None, bias=None, scale=None):
            dq, dk, dv, dbias = sdpa_backward(d_output, d_weights, q, k, v, mask, bias, scale)
            return {"q": dq, "k": dk, "v": dv}
    """)
    code, out, _ = check(capsys, f"{path}:backward", "sdpa")
    assert code == 1
    assert line_of(out, "sdpa/grad-001").startswith("PASS")
    assert re.search(r"FAIL  sdpa/grad-003 +gradients missing\n +gradient dbias: not returned",
                     out)


def test_only_the_first_cotangent_skips_vectors_that_need_the_second(capsys, tmp_path):
    path = student(tmp_path, """
        from attention_backward import sdpa_backward

        def backward(d_output, q, k, v, mask=None, bias=None, scale=None):
            zero = np.zeros(q.shape[:-1] + k.shape[-2:-1], q.dtype)
            return sdpa_backward(d_output, zero, q, k, v, mask, bias, scale)
    """)
    code, out, _ = check(capsys, f"{path}:backward", "sdpa")
    spec = default_spec()
    two = [i for i in grad_ids("sdpa") if "weights" in spec.vector(i).cotangents]
    assert two  # the spec differentiates the weights output somewhere
    skipped = set(two) | set(stating("sdpa", *SDPA_LATER))
    for vid in grad_ids("sdpa"):
        want = "SKIP" if vid in skipped else "PASS"
        assert line_of(out, vid).startswith(f"{want}  {vid}"), out
    assert "needs cotangent d_weights, which your code does not take" in out
    ran = len(grad_ids("sdpa")) - len(skipped)
    assert ran > 0 and code == 0  # every vector that ran passed: the skipped ones are said so
    assert f"not applicable: {len(skipped)} of " in out


def test_the_backend_vjp_convention_passes(capsys, tmp_path):
    """A function with a ``cotangents`` argument gets the dict, as a backend's hand-written
    ``<name>_vjp``; returning (grad_inputs, grad_params) as Backend.vjp does."""
    path = student(tmp_path, """
        from attnspec.backends.numpy.norm import layer_norm_vjp
    """)
    code, out, _ = check(capsys, f"{path}:layer_norm_vjp", "layer_norm", "--dtype", "float32")
    assert code == 0, out
    passed = re.findall(rf"PASS  layer_norm/{GRAD_ID} +max abs err \S+, 3 gradients", out)
    assert len(passed) == len(grad_ids("layer_norm"))


def test_nan_in_a_gradient_is_reported_as_nan(capsys, tmp_path):
    path = student(tmp_path, """
        def backward(dy, x, mask=None, axis=-1):
            y = np.exp(x) / np.exp(x).sum(axis=axis, keepdims=True)
            dx = y * (dy - (y * dy).sum(axis=axis, keepdims=True))
            dx[..., 0] = np.nan
            return dx
    """)
    code, out, _ = check(capsys, f"{path}:backward", "softmax", "-k", "grad-001")
    assert code == 1
    assert re.search(r"gradient dx is NaN at 3 of 15 element\(s\), first at index \(0, 0\) "
                     r"\(the spec expects -?[0-9.e-]+ there\)", out)


def test_a_backward_that_modifies_the_cotangent_fails(capsys, tmp_path):
    path = student(tmp_path, """
        def backward(dy, x, mask=None, axis=-1):
            y = np.exp(x) / np.exp(x).sum(axis=axis, keepdims=True)
            dy -= (y * dy).sum(axis=axis, keepdims=True)
            return y * dy
    """)
    code, out, _ = check(capsys, f"{path}:backward", "softmax", "-k", "grad-001")
    assert code == 1
    assert "FAIL  softmax/grad-001 " in out
    assert "modified its argument(s) cotangent 0 in place" in out


def test_grad_needs_gradient_vectors_and_excludes_errors(capsys):
    target = EXAMPLES / "pe_correct.py:positional_encoding"
    code, _, err = check(capsys, target, "sinusoidal_pe")
    assert code == 2
    assert re.search(r"sinusoidal_pe has no gradient vectors; components with them: .*layer_norm",
                     err)
    code, _, err = check(capsys, EXAMPLES / "softmax_backward.py:softmax_backward", "softmax",
                         "--errors")
    assert code == 2 and "--grad and --errors cannot be combined" in err


def test_help_says_how_a_backward_function_is_called(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--grad" in text
    assert "layer_norm_backward(dy, x, gamma, beta, eps=1e-5)" in text
    assert "sdpa: d_output, d_weights" in text


GRAD_FUNCTIONS = sorted({(v.component, v.function) for v in default_spec().vectors
                         if v.expect == "gradient" and not v.deprecated})


@pytest.mark.parametrize("component, function", GRAD_FUNCTIONS)
def test_every_component_with_gradient_vectors_can_be_checked(capsys, tmp_path, component,
                                                              function):
    """Looked up from the vectors, not a list: the NumPy backend's own backward pass, wrapped
    as a student's `cotangents=` function, passes every gradient vector of the component."""
    path = student(tmp_path, f"""
        from attnspec.backends import get_backend
        from attnspec.spec.vectors import default_spec

        FN = default_spec().functions[{function!r}]
        REQUIRED = [n for n in FN.inputs if n not in FN.optional]

        def backward(cotangents, *inputs, params=None, **kwargs):
            call = {{**dict(zip(REQUIRED, inputs)), **kwargs}}
            if FN.params:
                call["params"] = params
            return get_backend("numpy").vjp(FN.name, FN.module, call, cotangents)
    """)
    code, out, err = check(capsys, f"{path}:backward", component, "--function", function)
    assert code == 0, out + err
    ids = [v.id for v in default_spec().vectors if v.function == function
           and v.expect == "gradient" and not v.deprecated]
    assert len(re.findall(r"\nPASS  ", out)) == len(ids), out


def test_a_backward_pass_in_float32_is_told_so(capsys, tmp_path):
    path = student(tmp_path, """
        from softmax_backward import softmax_backward

        def backward(dy, x, mask=None, axis=-1):
            x, dy = x.astype(np.float32), dy.astype(np.float32)
            return softmax_backward(dy, x, mask, axis)["x"].astype(x.dtype)
    """)
    code, out, _ = check(capsys, f"{path}:backward", "softmax")
    assert code == 1
    assert re.search(r"note: the \d+ failing vector\(s\) that float32 has all pass at float32", out)


def test_forward_outputs_it_names_are_passed_by_keyword(capsys, tmp_path):
    path = student(tmp_path, """
        def backward(dy, x, y, mask=None, axis=-1):
            return y * (dy - np.sum(y * dy, axis=axis, keepdims=True))
    """)
    code, out, err = check(capsys, f"{path}:backward", "softmax", "--dtype", "float32")
    assert code == 0, out + err
    assert len(re.findall(r"\nPASS  softmax/(?:stress-)?grad-", out)) == len(grad_ids("softmax"))
    # without the input x, the positional count is wrong: one line saying what is passed
    path = student(tmp_path, """
        def backward(dy, y, axis=-1):
            return y * (dy - np.sum(y * dy, axis=axis, keepdims=True))
    """, name="from_y.py")
    code, _, err = check(capsys, f"{path}:backward", "softmax")
    assert code == 2
    assert re.search(r"takes 1 positional argument\(s\) without a default besides y; with "
                     r"--grad, check calls backward\(dy, x, \*, mask, axis\): 1 cotangent\(s\) "
                     r"\(y\), then the 1 required input\(s\) \(x\); the outputs it names \(y\) "
                     r"by keyword", err)
