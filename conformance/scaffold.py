"""``attnspec new-backend NAME``: an installable backend package with every kernel
stubbed (``@missing``), so the suite lists exactly what is left.

The composites (layers, models, decoding, the residual block, the GRU encoder-decoder)
are not stubbed: each module binds attnspec's shared ones (``backends/composite/``) to
the package, and ``ops.py`` holds a stub of each primitive op they call.

The package registers itself in the ``attnspec.backends`` entry-point group;
after ``pip install -e DIR/attnspec-NAME``, ``attnspec verify --backend NAME``
runs the suite against it.
"""

from __future__ import annotations

import keyword
import re
import textwrap
from collections import defaultdict
from pathlib import Path

from attnspec.spec.errors import ConfigError

from .contract import EXTRA_FUNCTIONS

PYPROJECT = '''[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "attnspec-{name}"
version = "0.1.0"
description = "attnspec backend for {name}"
requires-python = ">=3.10"
dependencies = ["attnspec>={version}"]

[project.entry-points."attnspec.backends"]
{name} = "{pkg}:Backend"

[tool.setuptools]
packages = ["{pkg}"]
package-dir = {{"" = "src"}}

[tool.setuptools.package-data]
"{pkg}" = ["known_failures.txt"]
'''

INIT = '''"""attnspec backend "{name}".

Fill in ``asarray``/``to_numpy`` for your framework, then implement the
functions in the component modules one by one (delete ``@missing`` from each):
`attnspec verify --backend {name}` shows the list of missing ones shrink.
See attnspec's backends/README.md for the contract.
"""

from __future__ import annotations

import numpy as np
from attnspec.backends.base import Backend as _Base
from attnspec.spec.errors import ConfigError


class Backend(_Base):
    name = "{name}"
    package = __name__
    # the --backend-option keys this backend reads (``self.options[key]``, strings);
    # any other is refused, so a typo never runs the suite under a default
    OPTIONS: tuple[str, ...] = ()

    def __init__(self, **options):
        super().__init__(**options)
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise ConfigError(f"unknown {name} backend option(s) {{unknown}}; known: "
                              f"{{', '.join(self.OPTIONS) or 'none'}}")

    def devices(self) -> list[str]:
        return ["cpu"]

    def dtypes(self, device: str) -> list[str]:
        return ["float64", "float32"]

    def asarray(self, x, *, dtype=None, device="cpu"):
        """NumPy in -> your framework's array on ``device`` (floats cast to ``dtype``)."""
        self.check_device(device)
        x = np.asarray(x)
        return x.copy() if dtype is None or x.dtype.kind in "biu" else x.astype(dtype)

    def to_numpy(self, x) -> np.ndarray:
        return np.asarray(x)

    def versions(self) -> dict[str, str]:
        return {{"numpy": np.__version__}}

    # Gradients (the suite's test_gradients.py): by default ``vjp`` calls a hand-written
    # ``<name>_vjp(cotangents, **call)`` in the function's module, returning
    # ({{input: gradient}}, {{param path: gradient}}); a framework with autodiff overrides
    # ``vjp(self, name, module, call, cotangents)`` once instead (see attnspec's torch and
    # tensorflow backends). Without either, every gradient vector is reported missing.
'''

MODULE = '''"""{module}:
{functions}.
Stubs: implement them and delete @missing.{shared}"""
'''

SHARED = """
{head}
attnspec's backends/composite/ over this package's kernels and ops.py; to override
one, write it here instead of the binding."""

OPS = '''"""The primitive ops attnspec's shared composites call (backends/composite/, OPS):
replace each stub with your framework's op."""

from attnspec.spec.errors import DomainError, NotImplementedComponent
'''

OP = '''

def {name}({signature}):
    """{doc}."""
    raise NotImplementedComponent("ops.{name} is a scaffold stub; the shared composites need it")
'''


def _signature(fn) -> str:
    req = [n for n in fn.inputs if n not in fn.optional]
    parts = list(req) + [f"{n}=None" for n in fn.optional]
    kw = [*fn.required_attributes, *(f"{k}={v!r}" for k, v in fn.attributes.items())]
    if fn.params:
        kw.append("params")
    if fn.trace:
        kw.append("trace=None")
    if kw:
        parts += ["*", *kw]
    return ", ".join(parts)


def _wrap(doc: str) -> str:
    """A docstring body that keeps the generated code within ruff's 110 columns."""
    return textwrap.fill(doc, width=100, subsequent_indent="    ")


def _def_line(name: str, signature: str) -> str:
    """``def name(signature):``, its parameters wrapped under the parenthesis past ruff's
    110 columns (moe_router's attributes alone are longer)."""
    line = f"def {name}({signature}):"
    if len(line) <= 110:
        return line
    indent = " " * (len(name) + 5)
    body = textwrap.fill(f"{signature}):", width=110, initial_indent=indent,
                         subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
    return f"def {name}(" + body[len(indent):]


def _stub(name: str, signature: str, doc: str) -> str:
    return (f"\n\n@missing\n{_def_line(name, signature)}\n    \"\"\"{_wrap(doc)}\"\"\"\n"
            f"    raise NotImplementedError\n")


def _bind(family, names: list[str]) -> str:
    """``a, b = Family.bind(__package__, "a", "b")``: the functions named, so a backend made
    from this scaffold keeps importing when attnspec adds a composite to the family (the new
    one is then reported ``missing``, not an unpacking error at import)."""
    exports = list(family.__dict__["EXPORTS"])
    names = [n for n in exports if n in names] or names
    lhs = f"({names[0]},)" if len(names) == 1 else ", ".join(names)
    args = ", ".join(f'"{n}"' for n in names)
    line = f"{lhs} = {family.__name__}.bind(__package__, {args})"
    if len(line) <= 100:
        return f"\n\n{line}\n"
    call = f" = {family.__name__}.bind("
    head = textwrap.fill(f"({lhs})", width=100 - len(call), subsequent_indent=" ") + call
    tail = textwrap.fill(f"__package__, {args})", width=96, initial_indent="    ",
                         subsequent_indent="    ")
    return f"\n\n{head}\n{tail}\n"


def _isort(name: str) -> tuple:
    """isort's order of imported names: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def _module(module: str, fns: list) -> str:
    """A module: a stub per kernel, one binding per shared composite family."""
    from attnspec.backends.composite import shared

    families = shared()
    own = [f for f in fns if f[0] not in families]
    bound = defaultdict(list)
    for name, _, _ in fns:
        if name in families:
            bound[families[name]].append(name)
    names = ", ".join(n for ns in bound.values() for n in ns)
    text = MODULE.format(module=module, functions=_wrap(", ".join(f[0] for f in fns)),
                         shared=SHARED.format(head=_wrap(f"Shared composites ({names}):")) if bound
                         else "")
    if not own:
        text = text.replace("\nStubs: implement them and delete @missing.", "")
    imports = ["from attnspec.backends.base import missing"] if own else []
    by_module = defaultdict(list)  # one import line per composite module (isort)
    for f in bound:
        by_module[f.__module__.rsplit('.', 1)[1]].append(f.__name__)
    imports += [f"from attnspec.backends.composite.{m} import {', '.join(sorted(ns, key=_isort))}"
                for m, ns in by_module.items()]
    text += "\n" + "\n".join(imports) + "\n"
    text += "".join(_stub(*f) for f in own)
    binds = "".join(_bind(family, ns) for family, ns in bound.items())
    # ruff (isort): one blank line between the imports and a first statement that is no def
    return text + (binds if own else binds[1:])


def _ops() -> str:
    from attnspec.backends.composite import OPS as ops

    return OPS + "".join(OP.format(name=n, signature=sig, doc=_wrap(doc)) for n, (sig, doc) in ops.items())


BUILTIN_STEPS = """\
next, to register the built-in backend {name!r} (see backends/README.md, "A built-in backend"):
  pyproject.toml: "attnspec.backends.{name}" in [tool.setuptools] packages;
    {name} = "attnspec.backends.{name}:Backend" under [project.entry-points."attnspec.backends"];
    an extra {name} = [<your framework, pinned>]
  backends/__init__.py: "{name}": "attnspec.backends.{name}:Backend" in _BUILTIN
  conformance/report.py FRAMEWORK_MODULE and conformance/check.py FRAMEWORK_OF_MODULE:
    "{name}": <your framework's import name>
  tox.ini: envs {name}-cpu (in env_list) and, for an accelerator, one that fails at once without it
then: pip install -e . && attnspec verify --backend {name}"""


def scaffold(spec, name: str, path: Path | str = ".", builtin: bool = False) -> Path:
    """Write the package; ``builtin``: as ``backends/NAME/`` of the attnspec checkout at
    ``path`` (no pyproject of its own: attnspec's registers it, see BUILTIN_STEPS)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise ConfigError(f"backend name must be a lowercase identifier, got {name!r}")
    pkg = f"attnspec_{name}"
    if builtin:
        if not (Path(path) / "backends" / "base.py").is_file():
            raise ConfigError(f"--builtin needs --path to be an attnspec checkout (with "
                              f"backends/base.py); {str(path)!r} is not one")
        root = src = Path(path) / "backends" / name
        if root.exists():
            raise ConfigError(f"{str(root)!r} already exists")
        src.mkdir()
    else:
        root = Path(path) / f"attnspec-{name}"
        if root.exists():
            raise ConfigError(f"{str(root)!r} already exists")
        src = root / "src" / pkg
        src.mkdir(parents=True)
        from attnspec.spec import SPEC_VERSION

        (root / "pyproject.toml").write_text(
            PYPROJECT.format(name=name, pkg=pkg, version=SPEC_VERSION))
        (root / "README.md").write_text(
            f"# attnspec-{name}\n\nAn attnspec backend. Install with `pip install -e .`, then "
            f"run `attnspec verify --backend {name}`.\n")
    (src / "__init__.py").write_text(INIT.format(name=name))
    (src / "known_failures.txt").write_text(
        "# One fnmatch pattern per line over <id> or <id>[<dtype>], then # and the reason.\n")
    modules = defaultdict(list)
    for fn in spec.functions.values():
        modules[fn.module].append((fn.name, _signature(fn), f"Spec component {fn.component}; "
                                   f"returns {', '.join(fn.returns)}. See "
                                   f"spec/components/{fn.component}.md."))
    for fname, module, signature, returns in EXTRA_FUNCTIONS:
        modules[module].append((fname, signature, f"Incremental decoding API; returns "
                                f"{returns}. See spec/components/greedy_decode.md."))
    for module, fns in sorted(modules.items()):
        (src / f"{module}.py").write_text(_module(module, fns))
    (src / "ops.py").write_text(_ops())
    return root
