"""Citation lines: ``attnspec <version> · <id> · sha256:<first 12 hex>``."""

from __future__ import annotations

from . import SPEC_VERSION

URL = "https://github.com/attnspec/attnspec"


def cite(spec, target: str, fmt: str = "text") -> str:
    """Cite a vector id, a component id, or ``attnspec`` (the whole spec)."""
    if "/" in target:
        v = spec.vector(target)
        text = v.citation(spec.version)
        key, title, note = v.id.replace("/", ":"), f"attnspec golden vector {v.id}", text
    elif target in spec.components:
        sha = spec.files[f"{target}.json"]
        text = f"attnspec {spec.version} · {target} · sha256:{sha[:12]}"
        key, title, note = target, f"attnspec component {target}", text
    elif target == "attnspec":
        text = f"attnspec {spec.version}"
        key, title, note = "attnspec", "attnspec: a reference specification of the Transformer stack", text
    else:
        raise KeyError(target)
    if fmt == "text":
        return text
    return (f"@misc{{attnspec-{SPEC_VERSION}-{key.replace('/', '-')},\n"
            f"  title        = {{{title}}},\n"
            f"  author       = {{{{The attnspec authors}}}},\n"
            f"  year         = {{2026}},\n"
            f"  version      = {{{spec.version}}},\n"
            f"  howpublished = {{\\url{{{URL}}}}},\n"
            f"  note         = {{{note}}}\n}}")
