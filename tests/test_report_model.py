"""report.md and report.html are two renderings of one model (``report.page``): every
section, column and cell of the model appears in both, and nothing is computed twice."""

import html
import re

from attnspec.conformance import report

from tests.test_results import DOC

META = {"spec_version": "1.1.0", "date": "today", "command": "attnspec report --x a|b",
        "python": "3", "platform": "here"}


def _report():
    run = {**DOC, "python": "py", "returncode": 1, "wall_s": 1.5, "available": True,
           "ok": False, "test_failures": ["test_extras.py::test_extra[agree/x] - boom"],
           "problems": ["one problem\nsecond line"]}
    return report.build_report([run], META)


def _cells(doc):
    for sec in doc.sections:
        yield sec.title
        yield from sec.head
        for row in sec.rows:
            yield from (c.text for c in row)


def test_both_renderings_show_every_cell_of_the_model():
    rep = _report()
    doc = report.page(rep)
    md, page = report.render_md(rep), report.render_html(rep)
    # failures: 5 vectors, 1 problem, 1 test
    assert [s.title for s in doc.sections] == ["Runs", "Matrix", "Versions", "Failures (7)"]
    for text in _cells(doc):
        assert report._md(text) in md, text
        assert html.escape(text) in page, text
    assert md.count("\n## ") == page.count("<h2>") == len(doc.sections)
    # one row per model row in each rendering
    rows = sum(len(s.rows) for s in doc.sections)
    assert len(re.findall(r"^\| (?!---)", md, flags=re.M)) == rows + len(doc.sections)
    assert page.count("<tr>") == rows + len(doc.sections)


def test_a_cell_keeps_its_colour_and_its_kind():
    doc = report.page(_report())
    matrix = next(s for s in doc.sections if s.title == "Matrix")
    sdpa = next(row for row in matrix.rows if row[0].text == "sdpa")
    assert sdpa[0].kind == "head" and sdpa[1].kind == "fail" and sdpa[2].kind == "pass"
    page = report.render_html(_report())
    assert f"<td class='fail'>{html.escape(sdpa[1].text)}</td>" in page
    assert "<code>sdpa/c-001[float64] fail</code>" in page
    assert "`sdpa/c-001[float64] fail`" in report.render_md(_report())
