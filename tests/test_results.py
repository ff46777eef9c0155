"""One results model: the verify table and the report read the same counts and worst
errors from the same document."""

import json

import pytest
from attnspec.conformance import report, results
from attnspec.conformance.cli import summary_table


def r(vid, dtype, status, abs_err=None, ulp=None, known=None):
    out = {"id": vid, "component": vid.split("/")[0], "dtype": dtype, "status": status,
           "max_abs_err": abs_err, "max_ulp": ulp, "message": ""}
    return {**out, "known_failure": known} if known else out


DOC = {"backend": "numpy", "device": "cpu", "dtypes": ["float64", "float32"],
       "spec_version": "1.1.0", "options": {}, "versions": {"numpy": "2"}, "problems": [],
       "results": [
           r("sdpa/a-001", "float64", "pass", 1e-16, 1.0),
           r("sdpa/b-001", "float64", "pass", 2e-16, 3.0),
           r("sdpa/c-001", "float64", "fail", 1e-3, 5e5),
           r("sdpa/d-001", "float64", "error"),
           r("sdpa/e-001", "float64", "missing"),
           r("sdpa/f-001", "float64", "fail", 0.5, 1e9, known="framework limit"),
           r("sdpa/a-001", "float32", "pass", 1e-7, 2.0),
           r("softmax/a-001", "float64", "missing"),
       ]}

# By hand: (vectors, pass, fail, error, missing, known, max abs, max ULP as both tables
# print them).
EXPECTED = {("sdpa", "float64"): (6, 2, 1, 1, 1, 1, "0.5", "1e+09"),
            ("sdpa", "float32"): (1, 1, 0, 0, 0, 0, "1e-07", "2"),
            ("softmax", "float64"): (1, 0, 0, 0, 1, 0, "-", "-")}


def cli_rows(doc) -> dict:
    rows = {}
    for line in summary_table(doc).splitlines():
        cols = line.split()
        if len(cols) == 10 and cols[1].startswith("float"):
            rows[cols[0], cols[1]] = (*map(int, cols[2:8]), cols[8], cols[9])
    return rows


def report_cells(doc) -> dict:
    run = {**doc, "python": "py", "returncode": 1, "wall_s": 1.0, "test_failures": [],
           "available": True, "ok": False}
    md = report.render_md(report.build_report([run], {
        "spec_version": "1.1.0", "date": "today", "command": "attnspec report",
        "python": "3", "platform": "here"}))
    lines = md.splitlines()
    head = next(ln for ln in lines if ln.startswith("| component |"))
    columns = [c.strip() for c in head.strip("|").split("|")][1:]
    cells = {}
    for line in lines[lines.index(head) + 2:]:
        if not line.startswith("| "):
            break
        comp, *texts = [c.strip() for c in line.strip("|").split("|")]
        for col, text in zip(columns, texts):
            if text != "—":
                cells[comp, col.rsplit("/", 1)[1]] = text
    return cells


def test_the_verify_table_counts_by_hand():
    assert cli_rows(DOC) == EXPECTED
    total = summary_table(DOC).splitlines()[-1].split()
    assert total == ["total", "8", "3", "1", "1", "2", "1"]


def test_the_report_matrix_agrees_with_the_verify_table():
    cells = report_cells(DOC)
    assert set(cells) == set(EXPECTED)
    for key, (n, passed, _fail, _error, missing, known, abs_err, ulp) in cli_rows(DOC).items():
        text = cells[key]
        assert text.startswith(f"{passed}/{n}"), (key, text)
        assert (f"({known} known)" in text) == bool(known), (key, text)
        assert (f"({missing} missing)" in text) == bool(missing), (key, text)
        assert text.endswith(f", {abs_err}, {ulp} ULP"), (key, text)
    assert cells["sdpa", "float64"] == "2/6 (1 known) (1 missing), 0.5, 1e+09 ULP"


def test_relative_error_uses_the_vector_scale():
    t = results.tally(DOC["results"], scales={"sdpa/c-001": 4.0, "sdpa/a-001": 0.0})
    assert t["sdpa", "float64"].max_rel == pytest.approx(1e-3 / 4.0)
    assert t["sdpa", "float32"].max_rel is None  # a zero scale measures nothing


def test_an_unknown_status_is_refused_not_counted():
    doc = {**DOC, "results": [*DOC["results"], r("sdpa/g-001", "float64", "xpass")]}
    with pytest.raises(results.ResultsError, match=r"results\[8\] \(sdpa/g-001\): status 'xpass'"):
        results.check_document(doc)


@pytest.mark.parametrize("doc,says", [
    ([], "not a JSON object"),
    ({"backend": "numpy", "device": "cpu"}, "field 'results' is missing"),
    ({"backend": "numpy", "device": "cpu", "results": [{"id": "x"}]},
     r"results\[0\]: field 'component' is missing"),
])
def test_a_malformed_results_document_names_the_field(tmp_path, doc, says):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(results.ResultsError, match=says):
        results.load(path)


def test_an_unreadable_results_file_is_named(tmp_path):
    with pytest.raises(results.ResultsError, match="cannot read results .*nope.json"):
        results.load(tmp_path / "nope.json")


def test_verify_hints_at_a_float64_that_is_float32_inside():
    from attnspec.conformance.cli import float64_hints

    doc = {"results": [r("softmax/a-001", "float64", "fail", 1e-8, 4e8),
                       r("softmax/a-001", "float32", "pass", 1e-8, 1.0),
                       r("sdpa/a-001", "float64", "fail", 1e-3, 4e8),  # float32 fails too
                       r("sdpa/a-001", "float32", "fail", 1e-3, 5e3),
                       r("gru/a-001", "float64", "fail", 1e-15, 12.0),  # a real float64 bug
                       r("gru/a-001", "float32", "pass", 1e-8, 1.0)]}
    hints = float64_hints(doc)
    assert len(hints) == 1 and hints[0].startswith("hint: softmax fail at float64")
    assert float64_hints(DOC) == []


def test_a_table_without_vectors_says_so_rather_than_counting_zero():
    empty = summary_table({**DOC, "results": []}).splitlines()
    assert empty[-2].split() == ["total", "0", "0", "0", "0", "0", "0"]
    assert "no golden vector selected" in empty[-1]
    assert "no golden vector" not in summary_table(DOC)
