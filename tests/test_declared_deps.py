"""Every third-party module a script, test or backend imports is declared where it runs.

Read from the source (ast), never by importing it:
- every import names a distribution that pyproject.toml (dependencies, an extra) or a tox
  environment declares;
- what a file imports unconditionally (at module level, and through the local modules it
  imports so) is one install line: the core dependencies and one extra, or one tox env;
- a test that a tox environment runs gets everything it imports there, in test functions
  and ``pytest.importorskip`` included (else it would skip in its own environment).
The tox environments and what their ``pytest`` commands run are read from tox.ini, so a
new extra, env or test folder needs no edit here; a new import name whose distribution is
named differently does (IMPORT_TO_DIST).
"""

from __future__ import annotations

import ast
import configparser
import re
import shlex
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest requires tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("benchmarks", "tests", "examples", "spec", "backends", "conformance")
PACKAGE = {"attnspec.spec": "spec", "attnspec.backends": "backends",
           "attnspec.conformance": "conformance", "tests": "tests", "benchmarks": "benchmarks"}

# import name -> the distributions that provide it (any one will do); an import name not
# listed is its own distribution name
IMPORT_TO_DIST = {
    "tensorflow": {"tensorflow", "tensorflow-cpu", "tensorflow-gpu"},
    "ml_dtypes": {"ml-dtypes"},
    "jsonschema": {"jsonschema"}, "mpmath": {"mpmath"}, "torch": {"torch"},
    "keras": {"keras"}, "jax": {"jax"}, "jaxlib": {"jaxlib"}, "flax": {"flax"},
    "optax": {"optax"}, "transformers": {"transformers"}, "onnx": {"onnx"},
    "onnxruntime": {"onnxruntime", "onnxruntime-gpu"}, "matplotlib": {"matplotlib"},
    "hypothesis": {"hypothesis"}, "pytest": {"pytest"}, "numpy": {"numpy"},
    "xdist": {"pytest-xdist"}, "yaml": {"pyyaml"}, "PIL": {"pillow"},
    "sklearn": {"scikit-learn"}, "packaging": {"packaging", "pytest"},  # pytest requires these
    "tomli": {"tomli", "pytest"}, "_pytest": {"pytest"},
    "setuptools": {"setuptools"}, "wheel": {"wheel"},
}


def _dist(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(requirement).name).lower()


def dists_of(module: str) -> set[str]:
    return IMPORT_TO_DIST.get(module, {re.sub(r"[-_.]+", "-", module).lower()})


# -- what is declared -----------------------------------------------------------------------

@cache
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


@cache
def core() -> frozenset:
    return frozenset(_dist(r) for r in pyproject()["project"]["dependencies"])


@cache
def extras() -> dict[str, frozenset]:
    raw = pyproject()["project"].get("optional-dependencies", {})

    def expand(name, seen=()):
        out = set()
        for r in raw[name]:
            req = Requirement(r)
            if _dist(r) == "attnspec":  # attnspec[other] inside an extra
                for e in req.extras - set(seen):
                    out |= expand(e, (*seen, name))
            else:
                out.add(_dist(r))
        return out

    return {name: frozenset(expand(name)) for name in raw}


@dataclass
class ToxEnv:
    name: str
    installs: frozenset
    runs: list = field(default_factory=list)  # [(paths, ignored paths)] of its pytest commands


def _lines(value: str) -> list[str]:
    return [ln.split("#", 1)[0].strip() for ln in value.splitlines() if ln.split("#", 1)[0].strip()]


@cache
def tox_envs() -> dict[str, ToxEnv]:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini", encoding="utf-8")
    base = ini["testenv"] if ini.has_section("testenv") else {}
    envs = {}
    for section in ini.sections():
        if not section.startswith("testenv:"):
            continue
        sec = ini[section]

        def get(key, sec=sec):
            return sec.get(key, base.get(key, ""))

        installs = set() if get("skip_install").strip() == "true" else set(core())
        for e in re.split(r"[\s,]+", get("extras").strip()):
            if e:
                installs |= extras()[e]
        for d in _lines(get("deps")):
            if not d.startswith(("-", "{")):
                installs.add(_dist(d))
        env = ToxEnv(section.split(":", 1)[1], frozenset(installs))
        for cmd in _lines(get("commands")):
            words = shlex.split(cmd)
            if words and words[0] == "pytest":
                paths = [w for w in words[1:] if not w.startswith("-") and (ROOT / w).exists()]
                ignored = [w.split("=", 1)[1] for w in words if w.startswith("--ignore=")]
                env.runs.append((paths, ignored))
        envs[env.name] = env
    return envs


def declared_anywhere() -> set[str]:
    out = set(core())
    for e in extras().values():
        out |= e
    for env in tox_envs().values():
        out |= env.installs
    return out


# -- what is imported -----------------------------------------------------------------------

LOCAL_TOPS = {"attnspec", *FOLDERS}


def _guarded(tries: list) -> bool:
    """Inside a try whose handler catches ImportError (an optional import)."""
    for t in tries:
        for h in t.handlers:
            names = {getattr(n, "id", getattr(n, "attr", "")) for n in
                     ([h.type] if not isinstance(h.type, ast.Tuple) else h.type.elts)}
            if h.type is None or names & {"ImportError", "ModuleNotFoundError", "Exception"}:
                return True
    return False


@dataclass
class Imports:
    top: set = field(default_factory=set)       # third-party, unconditional, module level
    lazy: set = field(default_factory=set)      # in functions, guarded, importorskip
    local_top: set = field(default_factory=set)  # local modules imported at module level


def _resolve(path: Path, module: str | None, level: int) -> str | None:
    """The repository file of a local module, or None."""
    if level:
        base = path.parent
        for _ in range(level - 1):
            base = base.parent
        parts = module.split(".") if module else []
    else:
        if not module:
            return None
        parts = module.split(".")
        for prefix, folder in PACKAGE.items():
            if module == prefix or module.startswith(prefix + "."):
                parts = [folder] + module[len(prefix) + 1:].split(".") if module != prefix \
                    else [folder]
                break
        else:
            sibling = path.parent / f"{parts[0]}.py"  # a script's own folder is on sys.path
            if sibling.is_file():
                return str(sibling.relative_to(ROOT))
            return None
        base = ROOT
    target = base.joinpath(*parts)
    for cand in (target.with_suffix(".py"), target / "__init__.py"):
        if cand.is_file():
            return str(cand.relative_to(ROOT))
    return None


def _is_local(path: Path, module: str) -> bool:
    return module.split(".")[0] in LOCAL_TOPS or (path.parent / f"{module.split('.')[0]}.py").is_file()


def _targets(path: Path, node) -> list[tuple[str | None, str | None]]:
    """(local file, None) or (None, third-party module) for each name an import reads."""
    if isinstance(node, ast.Import):
        return [(_resolve(path, a.name, 0), None) if _is_local(path, a.name) else (None, a.name)
                for a in node.names]
    if not node.level and not _is_local(path, node.module):
        return [(None, node.module)]
    out = []
    for a in node.names:  # a submodule (from . import x), else the module itself
        sub = f"{node.module}.{a.name}" if node.module else a.name
        out.append((_resolve(path, sub, node.level) or _resolve(path, node.module, node.level),
                    None))
    return out


@cache
def imports_of(rel: str) -> Imports:
    path = ROOT / rel
    out = Imports()

    def note(name: str, lazy: bool):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top == "__future__":
            return
        (out.lazy if lazy else out.top).add(top)

    def walk(node, lazy: bool, tries: list):
        for ch in ast.iter_child_nodes(node):
            ch_lazy = lazy or isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            ch_tries = tries + [ch] if isinstance(ch, ast.Try) else tries
            if isinstance(ch, (ast.Import, ast.ImportFrom)):
                opt = lazy or _guarded(tries)
                for local, module in _targets(path, ch):
                    if local and not opt:
                        out.local_top.add(local)
                    elif not local and module:
                        note(module, opt)
            elif (isinstance(ch, ast.Call) and getattr(ch.func, "attr", "") == "importorskip"
                  and ch.args and isinstance(ch.args[0], ast.Constant)):
                note(ch.args[0].value, True)
            walk(ch, ch_lazy, ch_tries)

    walk(ast.parse(path.read_text(encoding="utf-8")), False, [])
    out.local_top.discard(rel)
    return out


def closure(rel: str) -> tuple[set, set]:
    """(unconditional, every) third-party import of ``rel`` with the module-level imports
    of the local modules it imports at module level."""
    seen, todo, top = {rel}, [rel], set()
    while todo:
        imp = imports_of(todo.pop())
        top |= imp.top
        for loc in imp.local_top - seen:
            seen.add(loc)
            todo.append(loc)
    own = imports_of(rel)
    return top, top | own.lazy


# -- which tox env runs which file ----------------------------------------------------------

def _collected(rel: str) -> bool:
    name = Path(rel).name
    return name == "conftest.py" or (name.startswith("test_") and name.endswith(".py"))


def envs_running(rel: str) -> list[ToxEnv]:
    """The tox envs whose pytest commands collect ``rel`` (or a test that imports it)."""
    return [env for env in tox_envs().values() if rel in _run_by(env.name)]


@cache
def _run_by(name: str) -> frozenset:
    out = set()
    for paths, ignored in tox_envs()[name].runs:
        for t in FILES:
            if _collected(t) and _under(t, paths) and not _under(t, ignored):
                out |= _local_closure(t)
    return frozenset(out)


def _under(rel: str, paths: list[str]) -> bool:
    return any(rel == p.rstrip("/") or rel.startswith(p.rstrip("/") + "/") for p in paths)


@cache
def _local_closure(rel: str) -> frozenset:
    seen, todo = {rel}, [rel]
    while todo:
        for loc in imports_of(todo.pop()).local_top - seen:
            seen.add(loc)
            todo.append(loc)
    return frozenset(seen)


FILES = sorted(str(p.relative_to(ROOT)) for folder in FOLDERS
               for p in (ROOT / folder).rglob("*.py") if ".tox" not in p.parts)


def _missing(modules: set, installs: set) -> list[str]:
    return sorted(m for m in modules if not dists_of(m) & installs)


# -- the tests ------------------------------------------------------------------------------

@pytest.mark.parametrize("rel", FILES)
def test_every_import_is_declared(rel):
    top, every = closure(rel)
    envs = envs_running(rel)
    bad = _missing(every, declared_anywhere())
    assert not bad, (f"{rel} imports {bad}, which neither pyproject.toml (dependencies, "
                     f"an extra) nor tox.ini declares")
    lines = [("core", core())] + [(f"core + [{e}]", core() | d) for e, d in extras().items()]
    lines += [(f"tox -e {env.name}", env.installs) for env in tox_envs().values()]
    assert any(not _missing(top, inst) for _, inst in lines), (
        f"{rel} imports {sorted(top)} at module level: no extra (nor tox env) installs all of "
        f"them: declare them together")
    for env in envs:
        bad = _missing(every, env.installs)
        assert not bad, f"tox -e {env.name} runs {rel}, which imports {bad}: not installed there"


def test_the_scan_sees_what_it_must():
    """The scan itself: the import the issue found undeclared, a test's env, a lazy one."""
    top, _ = closure("benchmarks/tolerances.py")
    assert "ml_dtypes" in top and "numpy" in top
    assert "torch-cpu" in [e.name for e in envs_running("tests/torch/test_torch_backend.py")]
    assert [e.name for e in envs_running("tests/test_tolerances.py")] == ["numpy"]
    assert "tests/hf/small.py" in _local_closure("tests/hf/test_hf_convert.py")
    assert "tests/orders.py" in _local_closure("benchmarks/tolerances.py")
    assert "matplotlib" in imports_of("conformance/plot.py").lazy
    assert dists_of("tensorflow") & extras()["tensorflow"]
