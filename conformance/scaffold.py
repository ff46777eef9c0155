"""``attnspec new-backend NAME``: an installable backend package with every spec
function stubbed (``@missing``), so the suite lists exactly what is left.

The package registers itself in the ``attnspec.backends`` entry-point group;
after ``pip install -e DIR/attnspec-NAME``, ``attnspec verify --backend NAME``
runs the suite against it.
"""

from __future__ import annotations

import keyword
import re
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


class Backend(_Base):
    name = "{name}"
    package = __name__

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
'''

MODULE = '''"""{module}: {functions} (stubs: implement them and delete @missing)."""

from attnspec.backends.base import missing

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


def scaffold(spec, name: str, path: Path | str = ".") -> Path:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise ConfigError(f"backend name must be a lowercase identifier, got {name!r}")
    pkg = f"attnspec_{name}"
    root = Path(path) / f"attnspec-{name}"
    if root.exists():
        raise ConfigError(f"{str(root)!r} already exists")
    src = root / "src" / pkg
    src.mkdir(parents=True)
    from attnspec.spec import SPEC_VERSION

    (root / "pyproject.toml").write_text(
        PYPROJECT.format(name=name, pkg=pkg, version=SPEC_VERSION))
    (root / "README.md").write_text(
        f"# attnspec-{name}\n\nAn attnspec backend. Install with `pip install -e .`, then run "
        f"`attnspec verify --backend {name}`.\n")
    (src / "__init__.py").write_text(INIT.format(name=name))
    (src / "known_failures.txt").write_text(
        "# One fnmatch pattern per line over <id> or <id>[<dtype>], then # and the reason.\n")
    modules = defaultdict(list)
    for fn in spec.functions.values():
        modules[fn.module].append(fn)
    for module, fns in sorted(modules.items()):
        text = MODULE.format(module=module, functions=", ".join(f.name for f in fns))
        for fn in fns:
            returns = ", ".join(fn.returns)
            text += (f"\n@missing\ndef {fn.name}({_signature(fn)}):\n"
                     f'    """Spec component {fn.component}; returns {returns}. '
                     f'See spec/components/{fn.component}.md."""\n'
                     f"    raise NotImplementedError\n\n")
        for name, mod, signature, returns in EXTRA_FUNCTIONS:
            if mod == module:
                text += (f"\n@missing\ndef {name}({signature}):\n"
                         f'    """Incremental decoding API; returns {returns}. See '
                         f'spec/components/greedy_decode.md."""\n'
                         f"    raise NotImplementedError\n\n")
        (src / f"{module}.py").write_text(text.rstrip() + "\n")
    return root
