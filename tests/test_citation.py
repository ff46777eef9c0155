"""CITATION.cff names the version the package and every vector file carry."""

import re
from pathlib import Path

from attnspec.spec import SPEC_VERSION
from attnspec.spec.vectors import default_spec

ROOT = Path(__file__).parents[1]


def test_citation_cff_version_is_the_spec_version():
    text = (ROOT / "CITATION.cff").read_text()
    assert re.search(r'^version: "?([^"\n]+)"?$', text, re.M).group(1) == SPEC_VERSION


def test_vector_files_carry_the_spec_version():
    assert default_spec().version == SPEC_VERSION
