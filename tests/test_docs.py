"""The README stays a first read, and the README's and docs' links and commands stay true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"`[^`]*`")
_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_MODULE_RUN = re.compile(r"python -m ([A-Za-z_][\w.]*)")
# The repository's own top-level packages: a `python -m` of anything else is not ours to check.
_OURS = ("benchmarks", "executor", "tests", "workers")


def _prose(page: Path) -> list[str]:
    """The page's lines outside fenced code blocks (a ``# comment`` in one is no heading)."""
    lines: list[str] = []
    fenced = False
    for line in page.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        lines.append("" if fenced else line)
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor GitHub makes for the page's headings (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in _prose(page):
        match = _HEADING.match(line)
        if match is None:
            continue
        slug = _slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """The page's relative links whose file, or whose anchor in that file, does not exist
    (each named by the page's path relative to ``root``, its line and the link)."""
    broken: list[str] = []
    for number, line in enumerate(_prose(page), start=1):
        for target in _LINK.findall(_CODE_SPAN.sub("", line)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            path_part, _, anchor = target.partition("#")
            linked = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(root)}:{number}: {target}"
            if not linked.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{where} (no such heading in {linked.name})")
    return broken


def test_the_readme_stays_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, more than {README_MAX_LINES}: move details to docs/"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_point_to_what_exists(page: Path) -> None:
    assert broken_links(page) == []


def missing_modules(text: str, root: Path = ROOT) -> list[str]:
    """The repository's modules that ``python -m MODULE`` in ``text`` names and that do not
    exist under ``root`` (a placeholder such as ``benchmarks.NAME`` is skipped)."""
    missing = []
    for module in _MODULE_RUN.findall(text):
        parts = module.rstrip(".").split(".")
        if parts[0] not in _OURS or any(part.isupper() for part in parts):
            continue
        base = root.joinpath(*parts)
        if not (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()):
            missing.append(".".join(parts))
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_python_m_commands_name_modules_that_exist(page: Path) -> None:
    """A command printed beside a figure must still run: its module is in the repository."""
    assert missing_modules(page.read_text()) == []


def test_the_link_check_finds_a_broken_link_and_a_missing_anchor(tmp_path: Path) -> None:
    """The checks above can fail: a missing file and a missing heading are both reported."""
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](other.md#a-code-heading) [also fine](#page) [web](https://example.com/x.md)\n"
        "[gone](missing.md) [no heading](other.md#nowhere)\n"
        "```sh\n[in code](not-checked.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "page.md:4: missing.md (no such file)",
        "page.md:4: other.md#nowhere (no such heading in other.md)",
    ]


def test_the_module_check_finds_a_module_that_is_gone(tmp_path: Path) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "calls.py").write_text("")
    text = (
        "`python -m benchmarks.calls`, `python -m benchmarks.NAME`, `python -m pip install x`, "
        "`python -m benchmarks.gone --quick`."
    )
    assert missing_modules(text, tmp_path) == ["benchmarks.gone"]
