"""Known-failure files (like array-api-tests' xfail lists).

One pattern per line, ``fnmatch`` style over ``<id>`` or ``<id>[<dtype>]``,
then ``#`` and the reason::

    sdpa/large-001[float16]   # scores of 1000 overflow float16 in this framework
    gru/*                      # not implemented yet

A vector that fails and matches is reported as a known failure (pytest xfail),
not a pass. A pattern that matches no vector at all is itself a failure, so the
file cannot rot.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path


@dataclass(frozen=True)
class Known:
    pattern: str
    reason: str
    line: int


def parse(path: Path | str) -> list[Known]:
    out = []
    for n, raw in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        text, _, reason = raw.partition("#")
        pattern = text.strip()
        if pattern:
            out.append(Known(pattern, reason.strip() or "no reason given", n))
    return out


def match(known: list[Known], vid: str, dtype: str) -> Known | None:
    for k in known:
        if fnmatchcase(vid, k.pattern) or fnmatchcase(f"{vid}[{dtype}]", k.pattern):
            return k
    return None


def unmatched(known: list[Known], ids: list[str], dtypes: list[str]) -> list[Known]:
    keys = [*ids, *(f"{i}[{d}]" for i in ids for d in dtypes)]
    return [k for k in known if not any(fnmatchcase(key, k.pattern) for key in keys)]
