"""The pages of the spec's static site (docs/site.md), generated from the installed spec,
never typed; conformance/site.py builds them with mkdocs-material:

- ``index.md``: the release, its components and vector counts;
- the spec's own pages (FLAGS, CITING, STRESS, TOLERANCES, ...) and ``components/*.md``, each
  component page followed by a generated list of its vectors;
- one page per vector at ``<release>/vectors/<component>/<case-NNN>/`` (:func:`vector_path`):
  its inputs, attributes and expected outputs (large arrays summarised), the record as the
  vector file holds it (``<case-NNN>.json``, with its hash), a heatmap of attention weights.

A stress vector's arrays are regenerated from recipes (spec/STRESS.md): its page shows the
recipe's shapes and the digests, and the download is its recipe record.
"""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import attnspec.spec
import numpy as np

# The published site; `attnspec cite --base-url` or ATTNSPEC_SITE_URL name another.
# pyproject.toml's [project.urls] Documentation is the same address (tests/test_site.py).
SITE_URL = "https://attnspec.github.io/attnspec"
SPEC_DIR = Path(attnspec.spec.__file__).resolve().parent
SPEC_PAGES = ("FLAGS", "CITING", "STRESS", "TOLERANCES", "NOTATION", "FUNCTIONS")
WEIGHT_OUTPUTS = ("weights",)  # outputs that are attention weights: drawn as heatmaps
SHOWN = 64  # arrays up to this many elements are printed whole
PANELS = 4  # heatmap panels drawn (leading batch/head slices)


def vector_path(version: str, vid: str) -> str:
    """``<release>/vectors/<component>/<case-NNN>/``: the id's slash kept as a path segment."""
    return f"{version}/vectors/{vid}/"


def vector_url(vid: str, version: str, base: str = SITE_URL) -> str:
    return f"{base.rstrip('/')}/{vector_path(version, vid)}"


# -- pages ----------------------------------------------------------------------

def _code(text: str) -> str:
    return f"```text\n{text}\n```\n"


def _array_text(a: np.ndarray) -> str:
    """The whole array when small, else its statistics and first values."""
    a = np.asarray(a)
    head = f"shape {tuple(a.shape)}, {a.dtype}"
    if a.size <= SHOWN:
        return f"{head}\n{np.array2string(a, precision=10, max_line_width=100, threshold=SHOWN)}"
    flat = a.reshape(-1)
    if a.dtype.kind in "fiu":
        fin = flat[np.isfinite(flat)] if a.dtype.kind == "f" else flat
        stats = (f"min {fin.min():.6g}, max {fin.max():.6g}, mean {fin.mean():.6g}"
                 if fin.size else "no finite entry")
        if fin.size < flat.size:
            stats += f", {flat.size - fin.size} non-finite"
    else:
        stats = f"{int(np.count_nonzero(flat))} of {flat.size} true"
    first = np.array2string(flat[:8], precision=6, max_line_width=100)
    return f"{head}, {flat.size} elements: {stats}\nfirst: {first} ... (all of them: the record)"


def _arrays(title: str, arrays: dict) -> str:
    if not arrays:
        return ""
    parts = [f"## {title}\n"]
    for name, a in arrays.items():
        parts.append(f"### `{name}`\n\n{_code(_array_text(a))}")
    return "\n".join(parts) + "\n"


def heatmap_svg(weights: np.ndarray, title: str) -> str:
    """Up to PANELS (T, S) slices of ``weights`` (..., T, S) as an SVG grid, white 0 to blue 1."""
    w = np.asarray(weights, dtype=float)
    w = w.reshape((-1, *w.shape[-2:])) if w.ndim >= 2 else w.reshape(1, 1, -1)
    n, T, S = min(len(w), PANELS), w.shape[1], w.shape[2]
    cell = max(2, min(24, 240 // max(T, S, 1)))
    pw, ph, top = S * cell + 12, T * cell + 22, 18
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{n * pw}" height="{ph + top}" '
           f'font-family="sans-serif" font-size="11"><title>{html.escape(title)}</title>']
    for p in range(n):
        x0 = p * pw
        out.append(f'<text x="{x0}" y="12">slice {p} (T={T}, S={S})</text>')
        for i in range(T):
            for j in range(S):
                v = w[p, i, j]
                v = 0.0 if not np.isfinite(v) else min(max(v, 0.0), 1.0)
                r, g = int(255 * (1 - v)), int(255 * (1 - 0.6 * v))
                out.append(f'<rect x="{x0 + j * cell}" y="{top + i * cell}" width="{cell}" '
                           f'height="{cell}" fill="rgb({r},{g},255)"/>')
    out.append("</svg>\n")
    return "".join(out)


def _facts(v, version: str, download: str) -> str:
    rows = [("id", f"`{v.id}`"), ("function", f"[`{v.function}`](../../../../components/{v.component}.md)"),
            ("expect", v.expect), ("flags", ", ".join(f"`{f}`" for f in v.flags)),
            ("dtypes", ", ".join(v.dtypes)), ("sha256", f"`{v.sha256}`"),
            ("citation", f"`{v.citation(version)}`"), ("file", f"`{v.file}`"),
            ("record", f"[{download}]({download})")]
    if v.deprecated:
        rows.append(("deprecated", f"superseded by [`{v.superseded_by}`](../../{v.superseded_by}/index.md)"
                     if v.superseded_by else "yes"))
    return "| | |\n|---|---|\n" + "".join(f"| {k} | {val} |\n" for k, val in rows)


def _tolerances(v) -> str:
    rows = "".join(f"| {d} | {t['rtol']:g} | {t['atol']:g} |\n" for d, t in v.tolerances.items())
    return f"## Tolerances\n\n| dtype | rtol | atol |\n|---|---|---|\n{rows}\n"


def _stress(v) -> str:
    rec = v.raw
    digests = rec["digests"]
    shapes = "".join(f"| `inputs.{k}` | {tuple(r.get('shape', ()))} | `{digests.get('inputs.' + k, '')}` |\n"
                     for k, r in rec["recipes"].get("inputs", {}).items())
    shapes += "".join(f"| `{a['name']}` | {tuple(a['shape'])} | (in `{rec['data']['file']}`, "
                      f"sha256 `{rec['data']['sha256']}`) |\n" for a in rec["data"]["arrays"])
    return ("## Arrays (regenerated from recipes, spec/STRESS.md)\n\n| array | shape | sha256 |\n"
            f"|---|---|---|\n{shapes}\n")


def vector_page(v, version: str) -> tuple[str, dict[str, str]]:
    """The page of vector ``v`` and its files (name -> text)."""
    case = v.id.split("/", 1)[1]
    download = f"{case}.json"
    files = {download: json.dumps(v.raw, indent=1) + "\n"}
    stress = v.file.startswith("stress")
    body = [f"---\nsearch:\n  exclude: true\n---\n\n# {v.id}\n",
            f'<div class="attnspec-vector" data-id="{v.id}" data-sha256="{v.sha256}" markdown>\n',
            f"{v.description}\n\n{_facts(v, version, download)}\n</div>\n\n"]
    if v.attributes:
        rows = "".join(f"| `{k}` | `{json.dumps(a)}` |\n" for k, a in v.attributes.items())
        body.append(f"## Attributes\n\n| attribute | value |\n|---|---|\n{rows}\n")
    if stress:
        body.append(_stress(v))
    else:
        body += [_arrays("Inputs", v.inputs), _arrays("Parameters", v.params)]
        if v.expect == "error":
            body.append(f"## Expected error\n\n`{v.error}`, its message naming "
                        f"{', '.join(f'`{m}`' for m in v.error_mentions) or 'nothing in particular'}.\n\n")
        body += [_arrays("Expected outputs", v.outputs), _arrays("Cotangents", v.cotangents),
                 _arrays("Expected gradients", v.gradients)]
        for name in WEIGHT_OUTPUTS:
            if name in v.outputs and np.asarray(v.outputs[name]).ndim >= 2 and np.size(v.outputs[name]):
                files[f"{name}.svg"] = heatmap_svg(v.outputs[name], f"{v.id} {name}")
                body.append(f"## Heatmap of `{name}`\n\n![{name} of {v.id}]({name}.svg)\n\n")
    body.append(_tolerances(v))
    return "".join(body), files


def display_math(text: str) -> str:
    """Blank lines around each ``$$`` block, as arithmatex needs (GitHub renders two blocks
    with no line between them, the site would leave them raw); code blocks left alone."""
    out, fenced, inside = [], False, False
    for line in text.split("\n"):
        bare = line.strip()
        fenced ^= bare.startswith("```")
        if bare == "$$" and not fenced:
            if not inside and out and out[-1].strip():
                out.append("")
            out.append(line)
            if inside:
                out.append("")
            inside = not inside
        else:
            out.append(line)
    return "\n".join(out)


def component_vectors(spec, component: str, vectors: list) -> str:
    rows = "".join(f"| [`{v.id}`](../{vector_path(spec.version, v.id)}index.md) | {v.expect} | "
                   f"{', '.join(v.flags)} |\n" for v in vectors)
    return (f"\n\n## Vectors of attnspec {spec.version} (generated)\n\n{len(vectors)} vectors.\n\n"
            f"| vector | expect | flags |\n|---|---|---|\n{rows}")


def index_page(spec, by: dict) -> str:
    rows = "".join(f"| [{c}](components/{c}.md) | {len(vs)} |\n" for c, vs in by.items())
    pages = ", ".join(f"[{p}]({p}.md)" for p in SPEC_PAGES)
    return (f"# attnspec {spec.version}\n\nA reference specification of the Transformer stack: "
            f"normative pages and {len(spec.vectors)} golden vectors in {len(by)} components. "
            f"Every vector has its own page at `{spec.version}/vectors/<component>/<case>/`, "
            f"which `attnspec cite ID` prints.\n\nThe spec's pages: {pages}.\n\n"
            f"| component | vectors |\n|---|---|\n{rows}")


def write_pages(spec, docs: Path, config_dir: Path) -> int:
    """Write every page of the site under ``docs``; returns the number of vector pages."""
    by = {c: vs for c, vs in sorted(spec.by_component().items()) if vs}
    (docs / "components").mkdir(parents=True)
    shutil.copytree(config_dir / "assets", docs / "assets")
    (docs / "index.md").write_text(index_page(spec, by), encoding="utf-8")
    for p in SPEC_PAGES:
        (docs / f"{p}.md").write_text(display_math((SPEC_DIR / f"{p}.md").read_text(encoding="utf-8")),
                                      encoding="utf-8")
    for page in sorted((SPEC_DIR / "components").glob("*.md")):
        text = display_math(page.read_text(encoding="utf-8"))
        if page.stem in by:
            text += component_vectors(spec, page.stem, by[page.stem])
        (docs / "components" / page.name).write_text(text, encoding="utf-8")
    for v in spec.vectors:
        d = docs / vector_path(spec.version, v.id)
        d.mkdir(parents=True)
        text, files = vector_page(v, spec.version)
        (d / "index.md").write_text(text, encoding="utf-8")
        for name, content in files.items():
            (d / name).write_text(content, encoding="utf-8")
    return len(spec.vectors)


def nav(spec, docs: Path) -> list:
    comps = [{p.stem: f"components/{p.name}"} for p in sorted((docs / "components").glob("*.md"))]
    return [{"Home": "index.md"}, {"Spec": [{p: f"{p}.md"} for p in SPEC_PAGES]},
            {"Components": comps}]
