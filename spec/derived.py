"""The derived text: every block of the project's Markdown that is written from the vector files.

A derived block sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` and is never
typed. ``attnspec generate`` rewrites each one from ``spec/vectors/*.json`` (read through
:mod:`attnspec.spec.vectors`, never the oracle); ``attnspec generate --check`` writes nothing
and names each file and block that would change. The blocks:

- ``vectors`` on each component page ``spec/components/<component>.md``: every vector of
  the component, deprecated ones with the id that supersedes them, revisions with the id
  they supersede; and ``gradient-vectors``, where the page has one, the gradient vectors
  (then left out of ``vectors``);
- ``components`` in ``README.md``: the counts and the table of components;
- ``functions`` in ``spec/FUNCTIONS.md``: each function's vector counts;
- ``kernel-verdicts`` in ``README.md``: the real CPU kernels' verdict per route and family
  of sdpa vectors, from the committed ``tests/kernels/verdicts.json`` (written by
  ``benchmarks/judge_kernels.py --write``, asserted against the installed kernels by
  tests/kernels; read here as JSON data: no kernel is imported).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from .vectors import Spec, Vector

NOTE = "<!-- Generated from spec/vectors/ by `attnspec generate`; do not edit. -->"
GRADIENT_NOTE = ("Gradient vectors (`expect: \"gradient\"`: a cotangent per output, the expected "
                 "gradient of every float input and parameter; see spec/FUNCTIONS.md):")


class DerivedError(Exception):
    """A file or block the derived text needs is missing or malformed."""


def block_re(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- {re.escape(name)}:begin -->\n)(.*?)(<!-- {re.escape(name)}:end -->)",
                      re.S)


def has_block(text: str, name: str) -> bool:
    return block_re(name).search(text) is not None


def replace_block(text: str, name: str, body: str, where: str) -> str:
    """``text`` with the block ``name`` holding ``body``; exactly one such block must exist."""
    found = block_re(name).findall(text)
    if len(found) != 1:
        raise DerivedError(f"{where}: want one <!-- {name}:begin --> ... <!-- {name}:end --> "
                           f"block, found {len(found)}")
    return block_re(name).sub(lambda m: m.group(1) + body + m.group(3), text)


# -- component pages -----------------------------------------------------------

def vector_line(v: Vector, several_functions: bool) -> str:
    """One bullet: id, function (when the component has several), what it is, its links."""
    tags = []
    if v.expect == "error":
        tags.append(f"error: {v.error}")
    elif v.expect == "gradient":
        tags.append("gradient")
    if v.supersedes:
        tags.append(f"supersedes `{v.supersedes}`")
    if v.deprecated:
        tags.append(f"deprecated, superseded by `{v.superseded_by}`" if v.superseded_by
                    else "deprecated")
    fn = f" (`{v.function}`)" if several_functions else ""
    tag = f" *({'; '.join(tags)})*" if tags else ""
    return f"- `{v.id}`{fn}{tag}: {' '.join(v.description.split())}"


def page_blocks(text: str, vectors: list[Vector], functions: list[str]) -> dict[str, str]:
    """The bodies of a component page's blocks: ``vectors`` and, where the page has the
    block, ``gradient-vectors`` (whose vectors ``vectors`` then leaves out)."""
    several = len(functions) > 1
    split = has_block(text, "gradient-vectors")
    listed = [v for v in vectors if not (split and v.expect == "gradient")]
    blocks = {"vectors": _lines(listed, several)}
    if split:
        grads = [v for v in vectors if v.expect == "gradient"]
        blocks["gradient-vectors"] = _lines(grads, several, GRADIENT_NOTE if grads else None)
    return blocks


def _lines(vectors: list[Vector], several: bool, lead: str | None = None) -> str:
    lines = [NOTE, ""]
    if lead:
        lines += [lead, ""]
    lines += [vector_line(v, several) for v in vectors] or ["(none)"]
    return "\n".join(lines) + "\n"


# -- README.md -----------------------------------------------------------------

def counts(vectors: list[Vector]) -> dict[str, int]:
    live = [v for v in vectors if not v.deprecated]
    return {e: sum(v.expect == e for v in live) for e in ("value", "error", "gradient")}


def components_block(spec: Spec) -> str:
    """README's counts and component table (live vectors)."""
    dep = [v for v in spec.vectors if v.deprecated]
    live, c = len(spec.vectors) - len(dep), counts(spec.vectors)
    superseded = sum(v.superseded_by is not None for v in dep)
    kept = (f" and {len(dep)} deprecated ones kept for their citations"
            + (", each superseded by a revision" if dep and superseded == len(dep)
               else f" ({superseded} superseded by a revision)" if dep else "")) if dep else ""
    lines = [NOTE, "",
             f"{len(spec.components)} components, {len(spec.functions)} functions, "
             f"{len(spec.vectors)} vectors: {live} live ({c['value']} value, {c['error']} "
             f"error, {c['gradient']} gradient){kept}. The table counts live vectors "
             f"(`attnspec list --components`).", "",
             "| component | functions | value vectors | error vectors | gradient vectors |",
             "|---|---|---|---|---|"]
    for comp, vs in sorted(spec.by_component().items()):
        n = counts(vs)
        fns = ", ".join(f"`{f}`" for f in spec.components[comp])
        lines.append(f"| [{comp}](spec/components/{comp}.md) | {fns} | {n['value']} | "
                     f"{n['error']} | {n['gradient']} |")
    return "\n".join(lines) + "\n"


# -- spec/FUNCTIONS.md ---------------------------------------------------------

def functions_block(spec: Spec) -> str:
    """FUNCTIONS.md's table: each spec function's module and live vector counts."""
    by_fn: dict[str, list[Vector]] = {f: [] for f in spec.functions}
    for v in spec.vectors:
        by_fn[v.function].append(v)
    lines = [NOTE, "",
             "| function | component | module | value vectors | error vectors | gradient vectors |",
             "|---|---|---|---|---|---|"]
    for name in sorted(by_fn, key=lambda f: (spec.functions[f].component, f)):
        fn, n = spec.functions[name], counts(by_fn[name])
        lines.append(f"| `{name}` | [{fn.component}](components/{fn.component}.md) | {fn.module} | "
                     f"{n['value']} | {n['error']} | {n['gradient']} |")
    return "\n".join(lines) + "\n"


# -- README.md: the real kernels' verdicts ---------------------------------------

KERNEL_RESULTS = "tests/kernels/verdicts.json"
KERNEL_RESULTS_MAX_BYTES = 1 << 20
KERNEL_NOTE = ("<!-- Generated from tests/kernels/verdicts.json (benchmarks/judge_kernels.py "
               "--write) by `attnspec generate`; do not edit. -->")
KERNELS = {"flex": "FlexAttention, `torch.compile` (CPU)", "sdpa-math": "SDPA math path (CPU)",
           "sdpa-flash": "SDPA flash kernel (CPU)", "ort-attention": "ONNX `Attention` (23)",
           "ort-gqa": "`com.microsoft.GroupQueryAttention`", "ort-mha": "`com.microsoft.MultiHeadAttention`"}


def kernel_results(root: Path) -> dict:
    """The committed verdicts, checked for the fields the table reads."""
    path = root / KERNEL_RESULTS
    if not path.is_file():
        raise DerivedError(f"{KERNEL_RESULTS}: missing (python benchmarks/judge_kernels.py --write)")
    if path.stat().st_size > KERNEL_RESULTS_MAX_BYTES:
        raise DerivedError(f"{KERNEL_RESULTS}: {path.stat().st_size} bytes, over {KERNEL_RESULTS_MAX_BYTES}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        columns, causes = list(data["columns"]), dict(data["causes"])
        for route, res in data["routes"].items():
            for col in columns:
                cell = res["families"][col]
                if not all(isinstance(cell[k], int) for k in ("pass", "fail", "skip")):
                    raise TypeError(f"routes.{route}.families.{col}: counts must be integers")
                unknown = set(cell["causes"]) - set(causes)
                if unknown:
                    raise KeyError(f"routes.{route}.families.{col}.causes: {sorted(unknown)} not in causes")
        dict(data["versions"])
    except (ValueError, KeyError, TypeError) as exc:
        raise DerivedError(f"{KERNEL_RESULTS}: malformed ({type(exc).__name__}: {exc})") from exc
    return data


def kernel_cell(cell: dict, causes: dict) -> str:
    judged = cell["pass"] + cell["fail"]
    if not judged:
        return "skip" if cell["skip"] else "not run"
    if not cell["fail"]:
        return "pass"
    links = ", ".join(f"[{c}]({causes[c][0]}#{causes[c][1]})" for c in cell["causes"])
    return f"FAIL {cell['fail']}/{judged}: {links}"


def kernels_block(root: Path) -> str:
    """README's verdict table of the real CPU kernels."""
    data = kernel_results(root)
    versions = ", ".join(f"{k} {v}" for k, v in sorted(data["versions"].items()))
    cols = data["columns"]
    lines = [KERNEL_NOTE, "", "## Real attention kernels", "",
             f"Real attention kernels judged by the sdpa value vectors on the CPU ({versions}; "
             "no GPU). A cell is `pass` (every judged vector of the family passes at every dtype "
             "of the row), `FAIL a/b` (a of b judged (vector, dtype) pairs fail, each cause a line "
             "of its kernel page), `skip` (the kernel cannot express the family) or `not run` "
             "(left out: FlexAttention's small GQA vectors, compiled only by `python "
             "benchmarks/judge_kernels.py --all-flex`). Only the output is judged. `tests/kernels` "
             "asserts this table against the installed kernels.", "",
             f"| route | kernel | dtypes | {' | '.join(cols)} |",
             f"|---|---|---|{'---|' * len(cols)}"]
    for route, res in data["routes"].items():
        cells = " | ".join(kernel_cell(res["families"][c], data["causes"]) for c in cols)
        lines.append(f"| `{route}` | {KERNELS.get(route, route)} | {', '.join(res['dtypes'])} | {cells} |")
    return "\n".join(lines) + "\n"


# -- every file ----------------------------------------------------------------

def derived_blocks(spec: Spec, root: Path | None = None) -> dict[str, Callable[[str], dict[str, str]]]:
    """file (relative to the root) -> the bodies of its blocks, given the file's text (README's
    kernel table only with ``root``, the checkout holding its results)."""
    out: dict[str, Callable[[str], dict[str, str]]] = {
        "README.md": lambda text: {"components": components_block(spec),
                                   **({"kernel-verdicts": kernels_block(root)} if root else {})},
        "spec/FUNCTIONS.md": lambda text: {"functions": functions_block(spec)},
    }
    for comp, vectors in spec.by_component().items():
        out[f"spec/components/{comp}.md"] = (
            lambda text, vectors=vectors, fns=spec.components[comp]: page_blocks(text, vectors, fns))
    return out


def render(root: Path, spec: Spec) -> dict[str, tuple[str, str, list[str]]]:
    """file -> (text on disk, text with every block derived, names of the blocks that differ)."""
    out = {}
    for rel, bodies in derived_blocks(spec, root).items():
        path = root / rel
        if not path.is_file():
            raise DerivedError(f"{rel}: missing (every component needs its page; "
                               f"see spec/ADDING_A_COMPONENT.md)")
        old = path.read_text(encoding="utf-8")
        new, changed = old, []
        for name, body in bodies(old).items():
            before = new
            new = replace_block(new, name, body, rel)
            if new != before:
                changed.append(name)
        out[rel] = (old, new, changed)
    return out


def generate_derived(root: Path | str, spec: Spec, check: bool = False) -> list[str]:
    """Write (or, with ``check``, only compare) every derived block under ``root``;
    returns ``"<file> [<block>, ...]"`` for each file that changed (or would)."""
    root = Path(root)
    changed = []
    for rel, (old, new, blocks) in render(root, spec).items():
        if new == old:
            continue
        changed.append(f"{rel} [{', '.join(blocks)}]")
        if not check:
            (root / rel).write_text(new, encoding="utf-8")
    return changed


def source_root(start: Path | None = None) -> Path:
    """The checkout whose text is derived: the current folder, else the folder above the
    package's ``spec/`` (an editable install); it must hold README.md and spec/components."""
    for root in (start or Path.cwd(), Path(__file__).resolve().parent.parent):
        if (root / "README.md").is_file() and (root / "spec" / "components").is_dir():
            return root
    raise DerivedError("no attnspec checkout here (README.md and spec/components/): run "
                       "`attnspec generate` from the repository root")
