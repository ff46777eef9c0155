"""Build the spec as a static site (docs/site.md): ``python -m attnspec.conformance.site
--config docs/site/mkdocs.yml --out DIR`` writes the pages (conformance/sitepages.py) into
DIR's sibling ``DIR.src`` and builds them with mkdocs-material (``attnspec[site]``)."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from attnspec.spec.errors import ConfigError
from mkdocs.commands.build import build as mkdocs_build
from mkdocs.config import load_config

from .sitepages import nav, write_pages


def build(config: Path, out: Path, spec=None) -> dict:
    """Write the pages and build the site into ``out``; returns counts and seconds."""
    if not config.is_file():
        raise ConfigError(f"config {config}: no such file (the repository's docs/site/mkdocs.yml)")
    from attnspec.spec.vectors import default_spec

    spec = spec or default_spec()
    t0 = time.perf_counter()
    docs = out.with_name(out.name + ".src")
    for d in (docs, out):
        if d.exists():
            shutil.rmtree(d)
    n = write_pages(spec, docs, config.parent)
    t1 = time.perf_counter()
    cfg = load_config(config_file=str(config), docs_dir=str(docs), site_dir=str(out),
                      nav=nav(spec, docs), not_in_nav=f"/{spec.version}/")
    mkdocs_build(cfg)
    return {"vectors": n, "write_s": t1 - t0, "mkdocs_s": time.perf_counter() - t1}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnspec.conformance.site", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=Path("docs/site/mkdocs.yml"))
    p.add_argument("--out", type=Path, default=Path("build/site"))
    args = p.parse_args(argv)
    try:
        r = build(args.config, args.out)
    except ConfigError as e:
        print(f"site: {e}", file=sys.stderr)
        return 2
    print(f"site: {r['vectors']} vector pages in {args.out}: pages written in {r['write_s']:.1f} s, "
          f"mkdocs build {r['mkdocs_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
