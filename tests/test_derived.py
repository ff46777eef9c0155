"""The derived text (spec/derived.py): `attnspec generate --check` fails on any hand edit of a
generated block, `generate` writes it back, and every component page has its normative
sections (spec/ADDING_A_COMPONENT.md)."""

import re
from pathlib import Path

import pytest
from attnspec.conformance.cli import main
from attnspec.spec.derived import block_re, generate_derived
from attnspec.spec.vectors import VECTORS_DIR, load

from .conftest import generate_check

ROOT = Path(__file__).resolve().parent.parent
SPEC = load(VECTORS_DIR)


@pytest.fixture
def tree(derived_tree):
    return derived_tree


check = generate_check


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_the_checkout_s_derived_text_is_up_to_date():
    assert generate_derived(ROOT, SPEC, check=True) == []


def test_a_copy_passes_the_check(tree, capsys):
    rc, out = check(capsys)
    assert rc == 0, out
    assert "every derived text block is up to date" in out


def test_a_vector_dropped_from_a_page_s_list_fails_and_generate_restores_it(tree, capsys):
    page = tree / "spec" / "components" / "sdpa.md"
    line = next(v for v in page.read_text().splitlines() if v.startswith("- `sdpa/basic-001`"))
    edit(page, line + "\n", "")
    rc, out = check(capsys)
    assert rc == 1
    assert "spec/components/sdpa.md [vectors]" in out
    assert main(["generate", "--text-only"]) == 0
    assert line in page.read_text()
    assert check(capsys)[0] == 0


def test_a_hand_edited_gradient_list_fails(tree, capsys):
    edit(tree / "spec" / "components" / "layer_norm.md", "`layer_norm/grad-002` *(gradient)*:",
         "`layer_norm/grad-002`:")
    rc, out = check(capsys)
    assert rc == 1 and "spec/components/layer_norm.md [gradient-vectors]" in out


def test_a_hand_edited_readme_count_fails(tree, capsys):
    n = len(SPEC.vectors)
    edit(tree / "README.md", f"{n} vectors", f"{n - 1} vectors")
    rc, out = check(capsys)
    assert rc == 1 and "README.md [components]" in out


def test_a_hand_edited_readme_table_row_fails(tree, capsys):
    readme = tree / "README.md"
    row = next(r for r in readme.read_text().splitlines() if r.startswith("| [learned_pe]"))
    edit(readme, row, row[: row.rindex("|", 0, -1)] + "| 99 |")
    rc, out = check(capsys)
    assert rc == 1 and "README.md [components]" in out


def test_a_hand_edited_functions_table_fails(tree, capsys):
    functions = tree / "spec" / "FUNCTIONS.md"
    row = next(r for r in functions.read_text().splitlines() if r.startswith("| `learned_pe` |"))
    edit(functions, row, row[: row.rindex("|", 0, -1)] + "| 3 |")
    rc, out = check(capsys)
    assert rc == 1 and "spec/FUNCTIONS.md [functions]" in out


def test_a_component_page_without_its_vectors_block_fails(tree, capsys):
    edit(tree / "spec" / "components" / "softmax.md", "<!-- vectors:begin -->", "")
    rc, out = check(capsys)
    assert rc == 2 and "spec/components/softmax.md" in out and "vectors:begin" in out


def test_deprecated_vectors_and_revisions_are_linked_both_ways():
    old = next(v for v in SPEC.vectors if v.deprecated and v.superseded_by)
    text = (ROOT / "spec" / "components" / f"{old.component}.md").read_text()
    assert f"- `{old.id}` *(deprecated, superseded by `{old.superseded_by}`)*" in text
    assert f"- `{old.superseded_by}` *(supersedes `{old.id}`)*" in text


def test_every_live_vector_is_named_on_its_page():
    missing = [v.id for v in SPEC.vectors
               if f"- `{v.id}`" not in block_text(v.component)]
    assert missing == []


def block_text(component: str) -> str:
    text = (ROOT / "spec" / "components" / f"{component}.md").read_text()
    return "".join(m.group(2) for name in ("vectors", "gradient-vectors")
                   for m in block_re(name).finditer(text))


# -- the normative sections (spec/ADDING_A_COMPONENT.md, "The page") ------------

SECTIONS = {
    "equation": r"Equations?|Definition",
    "signature": r"Signatures?",
    "conventions or edge cases": r"Conventions.*|Edge cases",
    "errors": r"Errors",
    "vectors": r"Vectors",
}


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"(?m)^## (.*)\n", text)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.parametrize("component", sorted(SPEC.components))
def test_every_component_page_has_its_normative_sections(component):
    page = sections((ROOT / "spec" / "components" / f"{component}.md").read_text())
    missing = [what for what, pattern in SECTIONS.items()
               if not any(re.fullmatch(pattern, h) for h in page)]
    if any(v.expect == "gradient" for v in SPEC.vectors if v.component == component):
        missing += [] if "Gradients" in page else ["gradients"]
    assert missing == [], f"{component}.md lacks {missing}"
    assert block_re("vectors").search(page["Vectors"]), f"{component}.md: no vectors block"
    signature = "".join(body for h, body in page.items() if re.fullmatch(SECTIONS["signature"], h))
    names = {n for f in SPEC.components[component] for fn in [SPEC.functions[f]]
             for n in (f, *fn.inputs, *fn.returns, *fn.attributes, *fn.required_attributes)}
    unnamed = sorted(n for n in names if not re.search(rf"\b{re.escape(n)}\b", signature))
    assert unnamed == [], f"{component}.md's signature does not name {unnamed}"


def test_the_section_check_fails_on_a_page_without_errors():
    text = (ROOT / "spec" / "components" / "softmax.md").read_text().replace("## Errors", "## Faults")
    assert not any(re.fullmatch(SECTIONS["errors"], h) for h in sections(text))


# -- CITING.md's statement of what a vector citation pins ------------------------

def citing_fields() -> list[str]:
    """The hashed fields as CITING.md lists them ("the vector's fields `a`, `b` ... (those")."""
    text = " ".join((ROOT / "spec" / "CITING.md").read_text().split())
    listed = re.search(r"the vector's fields (.*?) \(those it has", text)
    assert listed, "CITING.md no longer says which fields a vector's hash covers"
    return re.findall(r"`([a-z_]+)`", listed.group(1))


@pytest.mark.parametrize("expect", ["value", "error", "gradient"])
def test_citing_md_s_field_list_reproduces_the_stored_hash(expect):
    import hashlib
    import json

    v = next(v for v in SPEC.vectors if v.expect == expect and not v.deprecated)
    raw = {k: x for k, x in v.raw.items() if k in citing_fields()}
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           allow_nan=False).encode("utf-8")
    assert hashlib.sha256(canonical).hexdigest() == v.sha256, v.id


# -- README's front doors and the docs pages -------------------------------------

DOCS = sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))


def sh_commands(text: str) -> list[list[str]]:
    """Every `attnspec ...` command of the page's sh blocks, as argument lists (comments cut,
    `&&` chains split)."""
    import shlex

    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.splitlines():
            cmd: list[str] = []
            for token in [*shlex.split(line, comments=True), "&&"]:
                if token != "&&":
                    cmd.append(token)
                    continue
                if cmd[:1] == ["attnspec"]:
                    out.append(cmd)
                cmd = []
    return out


def test_readme_keeps_the_two_first_commands():
    first = re.search(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    assert "pip install -e . && attnspec verify " in first
    assert "pip install 'tox>=4.11' && tox " in first


@pytest.mark.parametrize("door", ["Verify a framework", "Add a backend",
                                  "Check coursework or cite a vector"])
def test_each_front_door_opens_with_a_command(door):
    page = sections((ROOT / "README.md").read_text())
    assert re.match(r"\s*```sh\n\S", page[door]), f"README's {door!r} does not start with a command"


@pytest.mark.parametrize("page", ["README.md", *DOCS])
def test_every_attnspec_command_on_a_page_parses(page):
    from attnspec.conformance.cli import build_parser

    path = ROOT / page
    commands = sh_commands(path.read_text())
    for cmd in commands:
        try:
            build_parser().parse_args(cmd[1:])
        except SystemExit:
            pytest.fail(f"{page}: `{' '.join(cmd)}` is not a valid attnspec command line")
    assert page != "README.md" or len(commands) >= 5


@pytest.mark.parametrize("page", ["README.md", *DOCS])
def test_every_relative_link_resolves(page):
    path = ROOT / page
    links = re.findall(r"\]\((?!https?:|#)([^)#\s]+)", path.read_text())
    broken = [link for link in links if not (path.parent / link).exists()]
    assert broken == []
