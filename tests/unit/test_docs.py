"""The documentation holds together: README.md is a short front door, every page under docs/ can
be reached from it by links, every relative link (and its anchor) leads somewhere, and the
collection has its own readme, which galaxy.yml names and the collection build ships."""
from __future__ import annotations

import fnmatch
import re
import tomllib
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 200

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def prose(text: str) -> str:
    """The text without fenced code blocks and code spans, where `](` means nothing."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces
    to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links → their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text()
    found = set(HTML_ANCHOR.findall(text))
    seen: Counter[str] = Counter()
    for _, heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        found.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path.read_text()))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.IGNORECASE)]


def resolve(source: Path, target: str) -> tuple[Path, str | None]:
    file_part, _, anchor = target.partition("#")
    path = (source.parent / unquote(file_part)).resolve() if file_part else source
    return path, (unquote(anchor) or None)


def reachable_from_readme() -> set[Path]:
    """Markdown files of this repository reached from README.md by following relative links."""
    seen, todo = {README}, [README]
    while todo:
        page = todo.pop()
        for target in relative_links(page):
            path, _ = resolve(page, target)
            if path.suffix == ".md" and path.is_file() and path not in seen and ROOT in path.parents:
                seen.add(path)
                todo.append(path)
    return seen


def documentation_pages() -> list[Path]:
    return sorted({README, ROOT / "COLLECTION.md", *DOCS.rglob("*.md")})


def test_readme_is_a_front_door_of_at_most_200_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_README_LINES}): move detail to a page under docs/")
    text = README.read_text()
    for needed in ("make test", "make site", "docs/README.md"):
        assert needed in text, needed


def test_every_docs_page_is_reachable_from_the_readme():
    reachable = reachable_from_readme()
    orphans = [str(p.relative_to(ROOT)) for p in sorted(DOCS.rglob("*.md")) if p.resolve() not in reachable]
    assert not orphans, f"not linked from README.md or a page it links to: {orphans}"


@pytest.mark.parametrize("page", documentation_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_existing_files_and_anchors(page):
    broken = []
    for target in relative_links(page):
        path, anchor = resolve(page, target)
        if ROOT not in path.parents and path != ROOT:
            broken.append(f"{target}: outside the repository")
        elif not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading or anchor #{anchor} in {path.relative_to(ROOT)}")
    assert not broken, broken


def test_every_module_and_role_has_a_generated_page():
    modules = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
    roles = sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir())
    missing = [f"modules/{m}.md" for m in modules if not (DOCS / "ansible" / "modules" / f"{m}.md").is_file()]
    missing += [f"roles/{r}.md" for r in roles if not (DOCS / "ansible" / "roles" / f"{r}.md").is_file()]
    assert modules and roles and not missing, f"{missing}: run `python hack/generate_module_docs.py`"


def test_the_collection_has_its_own_readme_and_the_package_keeps_the_front_door():
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    readme = ROOT / galaxy["readme"]
    assert galaxy["readme"] != "README.md" and readme.is_file()
    # ansible-galaxy matches build_ignore with fnmatch against paths relative to the collection.
    assert not any(fnmatch.fnmatch(galaxy["readme"], pattern) for pattern in galaxy["build_ignore"])
    text = readme.read_text()
    for module in (ROOT / "plugins" / "modules").glob("*.py"):
        assert f"tidal.colocation.{module.stem}" in text, module.stem
    for role in (ROOT / "roles").iterdir():
        assert f"`{role.name}`" in text, role.name
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["readme"] == "README.md"


def test_slugs_follow_github():
    assert slug("Admission (`controllers/tidal/manager/admission/`)") == "admission-controllerstidalmanageradmission"
    assert slug("Predictors of the online peak, on real traces") == "predictors-of-the-online-peak-on-real-traces"
    assert slug("tidal.colocation — Ansible collection") == "tidalcolocation--ansible-collection"
