"""The API reference renders docstring examples as code and every parameter with a type;
the generated pages repeat no heading; long code lines wrap (issue 27, the docs site).

The source checks need nothing but the files. The rendering checks build the API page alone
with mkdocs (a few seconds) and are skipped where mkdocs or mkdocstrings is not installed.
"""

import re
import runpy
import shutil
import subprocess
import sys

import pytest

from helpers.docs import DOCS, ROOT

SRC = ROOT / "src" / "deepfault"


def _repeated_headings(text: str) -> list[str]:
    return runpy.run_path(str(ROOT / "scripts" / "cli_reference.py"), run_name="cli_reference")[
        "repeated_headings"](text)


def test_docstring_example_sections_are_spelled_examples():
    # griffe's Google parser reads "Examples:" as an examples section (its >>> lines become
    # code); "Example:" is an admonition, whose lines the site flattens into one paragraph.
    wrong = [f"{path.relative_to(ROOT)}:{n}" for path in sorted(SRC.rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.fullmatch(r"\s+Example:\s*", line)]
    assert not wrong, f"write 'Examples:' (the section griffe renders as code): {', '.join(wrong)}"


@pytest.mark.parametrize("name", ["cli.md", "api.md"])
def test_generated_pages_repeat_no_heading(name):
    assert _repeated_headings((DOCS / name).read_text(encoding="utf-8")) == []


def test_no_line_starts_a_heading_by_accident():
    # Python-Markdown reads "#RF. (The ..." at the start of a line as a heading (no space
    # needed), so a wrapped "#RF" or "#URF" became a big title in the middle of a paragraph.
    found = []
    for path in [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]:
        fenced = False
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                fenced = not fenced
            elif not fenced and re.match(r"#+[^#\s]", line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line[:40]}")
    assert not found, "a line starting with '#' is a heading; reflow it: " + "; ".join(found)


def test_repeated_headings_sees_headings_outside_code_only():
    text = "# A\n## B\n```\n## B\n```\n## C\n## B\n"
    assert _repeated_headings(text) == ["## B"]


def test_cli_reference_refuses_a_page_with_a_repeated_heading(tmp_path, capsys):
    script = runpy.run_path(str(ROOT / "scripts" / "cli_reference.py"), run_name="cli_reference")
    BEGIN, END = script["BEGIN"], script["END"]
    page = tmp_path / "docs" / "cli.md"
    page.parent.mkdir()
    page.write_text("# Command line\n\n## Every option of every command\n\n" + BEGIN + "\n" + END + "\n")
    script = tmp_path / "scripts" / "cli_reference.py"  # the script writes the cli.md beside its folder
    script.parent.mkdir()
    shutil.copy(ROOT / "scripts" / "cli_reference.py", script)
    assert runpy.run_path(str(script), run_name="cli_reference")["main"]() == 1
    assert "headings written twice: ## Every option of every command" in capsys.readouterr().err
    assert BEGIN + "\n" + END in page.read_text()  # left as it was


@pytest.fixture(scope="module")
def api_page(tmp_path_factory):
    """The API page built alone: ``(html, css)``."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    yaml = pytest.importorskip("yaml")
    tmp = tmp_path_factory.mktemp("site")
    docs = tmp / "docs"
    docs.mkdir()
    shutil.copy(DOCS / "api.md", docs / "api.md")
    shutil.copytree(DOCS / "stylesheets", docs / "stylesheets")
    # mkdocs.yml has no custom tags, so the safe loader reads it.
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    quiet = {"omitted_files": "ignore", "absolute_links": "ignore", "unrecognized_links": "ignore",
             "links": {"not_found": "ignore", "anchors": "ignore"}}  # links to pages left out
    config.update(docs_dir=str(docs), site_dir=str(tmp / "site"), strict=False,
                  nav=[{"Python API": "api.md"}], validation=quiet)
    config.pop("exclude_docs", None)
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            python = plugin["mkdocstrings"]["handlers"]["python"]
            python["paths"] = [str(ROOT / "src")]
            python["options"]["extensions"] = [str(ROOT / e) for e in python["options"].get("extensions", [])]
    cfg = tmp / "mkdocs.yml"
    cfg.write_text(yaml.safe_dump(config), encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "-f", str(cfg)],
                         capture_output=True, text=True, timeout=300,
                         env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp)})
    assert out.returncode == 0, out.stdout + out.stderr
    html = (tmp / "site" / "api" / "index.html").read_text(encoding="utf-8")
    css = (tmp / "site" / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    return html, css


def _objects(html: str) -> dict[str, str]:
    """Each documented object's part of the page, by its dotted path."""
    parts = re.split(r'<h[2-5] id="(deepfault\.[^"]+)"', html)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_docstring_example_is_a_code_block(api_page):
    # Each documented object shows each ">>>" line of its docstring as a prompt inside a code
    # block; an "Example:" admonition rendered them as nested block quotes of one paragraph.
    griffe = pytest.importorskip("griffe")
    html, _ = api_page
    package = griffe.load("deepfault", search_paths=[str(ROOT / "src")])
    shown = 0
    for name, part in _objects(html).items():
        docstring = package[name.removeprefix("deepfault.")].docstring
        lines = [line.strip() for line in (docstring.value if docstring else "").splitlines()]
        want = sum(line.startswith(">>>") for line in lines)
        in_code = sum(block.count('<span class="gp">&gt;&gt;&gt; </span>')
                      for block in re.findall(r"<pre>.*?</pre>", part, flags=re.S))
        assert in_code == want, f"{name}: {want} lines of >>> examples, {in_code} shown as code"
        assert "<blockquote>" not in part, f"{name}: an example rendered as a quote"
        shown += want
    assert shown >= 40, "the API page should show the docstrings' >>> examples"


def test_every_parameter_has_a_type(api_page):
    html, _ = api_page
    rows = 0
    for name, part in _objects(html).items():
        for table in re.findall(r"<table>.*?</table>", part, flags=re.S):
            if "<th>Type</th>" not in table:
                continue
            for row in re.findall(r'<tr class="doc-section-item">(.*?)</tr>', table, flags=re.S):
                cells = [re.sub(r"<[^>]+>", "", c).strip()
                         for c in re.findall(r"<td>(.*?)</td>", row, flags=re.S)]
                rows += 1
                assert cells[1], f"{name}: parameter {cells[0]} has no type (annotate it)"
    assert rows >= 100


def test_code_lines_wrap(api_page):
    html, css = api_page
    assert "stylesheets/extra.css" in html
    rule = re.search(r"\.md-typeset \.highlight pre > code\s*\{([^}]*)\}", css.replace(",\n", ", "))
    assert rule, "extra.css has no rule for the docstring examples' code"
    assert "white-space: pre-wrap" in rule.group(1)


def test_no_sphinx_role_shows_as_text(api_page):
    # scripts/griffe_sphinx_roles.py: :func:`x` is a link where x is on the page, else code.
    html, _ = api_page
    literal = sorted(set(re.findall(r":(?:func|meth|class|data|attr|mod|exc|obj|const):", html)))
    assert not literal, f"Sphinx roles shown as text on the API page: {literal}"
    link = r'<a class="autorefs autorefs-internal"[^>]*href="#deepfault\.coverage\.surprise\.fit_surprise">'
    assert re.search(link + r"<code>fit_surprise</code></a>", html)


def test_code_breaks_at_spaces_never_inside_an_option():
    """`--num-seeds` wrapped as `--num-` / `seeds`: the site's CSS breaks a word only when it alone
    overflows, and its script keeps every hyphenated run in a span that does not wrap (a break
    after a hyphen is one CSS cannot forbid)."""
    import yaml

    site = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert "javascripts/nobreak.js" in site["extra_javascript"]
    css = (DOCS / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert "overflow-wrap: anywhere" not in css
    rule = re.search(r"\.md-typeset pre > code \.df-nobr\s*\{([^}]*)\}", css)
    assert rule
    assert "white-space: nowrap" in rule.group(1)
    script = (DOCS / "javascripts" / "nobreak.js").read_text(encoding="utf-8")
    assert 'span.className = "df-nobr"' in script
    assert "document$.subscribe" in script
    assert "textContent = part" in script  # the text itself unchanged: the copy button copies it as written
