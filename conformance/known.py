"""Known-failure files (like array-api-tests' xfail lists).

One pattern per line: an ``fnmatch`` pattern over the vector id, optionally
followed by ``[dtype pattern]`` (brackets there delimit the dtype, they are not a
character class), then ``#`` and the reason::

    sdpa/large-001[float16]   # scores of 1000 overflow float16 in this framework
    gru/*                      # not implemented yet

A vector that fails and matches is reported as a known failure (pytest xfail),
not a pass. The same pattern covers the vector's differential test (its perturbed
copies against the NumPy backend, at the suite's property dtype), so one line states
one cause. A pattern may also name a property test by its function name::

    test_softmax_of_a_row_of_neg_inf_*[float16]   # the framework's softmax gives NaN

(a property test runs at the suite's property dtype, which the bracket matches). A
pattern that matches no vector and no property test is itself a failure, and one whose
every result and test passes now is reported as stale (exit 1), so the file cannot rot.
A file that cannot be read or is not UTF-8 stops the run with one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path


@dataclass(frozen=True)
class Outcome:
    """A differential or property test's outcome, as known failures judge it: ``id`` is
    the vector id (differential) or the test's function name (property)."""
    test: str
    id: str
    dtype: str
    status: str  # pass | fail


@dataclass(frozen=True)
class Known:
    pattern: str
    reason: str
    line: int


class KnownFailuresError(ValueError):
    """The known-failures file cannot be read (missing, a folder, not UTF-8)."""


def parse(path: Path | str) -> list[Known]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise KnownFailuresError(f"known-failures file {path} is not UTF-8 text "
                                 f"(byte {exc.start}: {exc.reason})") from None
    except OSError as exc:
        raise KnownFailuresError(f"known-failures file {path} cannot be read: "
                                 f"{exc.strerror or exc}") from None
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        text, _, reason = raw.partition("#")
        pattern = text.strip()
        if pattern:
            out.append(Known(pattern, reason.strip() or "no reason given", n))
    return out


_WITH_DTYPE = re.compile(r"(?P<id>.+)\[(?P<dtype>[^\[\]]+)\]")


def _matches(k: Known, vid: str, dtype: str | None) -> bool:
    m = _WITH_DTYPE.fullmatch(k.pattern)
    if m is None:
        return fnmatchcase(vid, k.pattern)
    return fnmatchcase(vid, m["id"]) and (dtype is None or fnmatchcase(dtype, m["dtype"]))


def match(known: list[Known], vid: str, dtype: str) -> Known | None:
    return next((k for k in known if _matches(k, vid, dtype)), None)


def unmatched(known: list[Known], ids, dtypes: list[str]) -> list[Known]:
    """The patterns that match none of ``ids`` (vector ids and property test names)."""
    return [k for k in known
            if not any(_matches(k, i, d) for i in ids for d in dtypes)]


def now_passing(known: list[Known], results) -> list[tuple[Known, int]]:
    """Patterns that matched results of this run, all of which passed: (pattern, count)."""
    out = []
    for k in known:
        ran = [r for r in results if _matches(k, r.id, r.dtype)]
        if ran and all(r.status == "pass" for r in ran):
            out.append((k, len(ran)))
    return out
