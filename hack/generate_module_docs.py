#!/usr/bin/env python3
"""Generate docs/ansible/modules/: one Markdown page per module of tidal.colocation, and an index.

The pages come from the modules' own DOCUMENTATION, EXAMPLES and RETURN, read the way
antsibull-docs reads them: `ansible-doc --json` on the collection as installed under
``.venv/collections`` (where ``ansible_collections/tidal/colocation`` links to this checkout),
normalised and validated by antsibull-docs' schemas (`normalize_plugin_info`), their markup
(``O(...)``, ``V(...)``, ``C(...)``, ``E(...)``, ``M(...)``) rendered to Markdown by
antsibull-docs-parser. antsibull-docs itself writes only reStructuredText (its Markdown-free
``simplified-rst`` output puts the option tables in raw HTML), so the page layout is here.

Protocol of every ``hack/generate_*.py``:

    python hack/generate_module_docs.py          rewrite the generated files
    python hack/generate_module_docs.py --check  write nothing; exit 1 listing stale or missing
                                                 files (and files that should not be there)

The output depends only on the modules' documentation and the pinned antsibull-docs: no
timestamps, no absolute paths.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from antsibull_docs.process_docs import normalize_plugin_info
from antsibull_docs_parser import dom
from antsibull_docs_parser.format import Formatter, LinkProvider
from antsibull_docs_parser.md import to_md
from antsibull_docs_parser.parser import Context, parse

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = "tidal.colocation"
OUT = ROOT / "docs" / "ansible" / "modules"
INSTALLED = ROOT / ".venv" / "collections"
GENERATOR = "hack/generate_module_docs.py"


def module_names() -> list[str]:
    return sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__")


def ansible_doc(fqcns: list[str]) -> dict[str, Any]:
    """`ansible-doc --json` for the modules, from the collection installed under .venv/collections."""
    link = INSTALLED / "ansible_collections" / "tidal" / "colocation"
    if not link.exists() or link.resolve() != ROOT:
        sys.exit(f"{link} must be this checkout ({ROOT}); `make collections` (or "
                 "tests/ansible/install_collections.py) links it")
    bindir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(INSTALLED), ANSIBLE_NOCOLOR="1",
               PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", LC_ALL="C.UTF-8")
    proc = subprocess.run([str(bindir / "ansible-doc"), "--json", "-t", "module", *fqcns], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"ansible-doc failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


class Links(LinkProvider):
    """Options and return values of this page link to their anchors, other modules of the
    collection to their pages; everything else stays plain text."""

    def plugin_link(self, plugin: dom.PluginIdentifier) -> str | None:
        prefix = COLLECTION + "."
        if plugin.type == "module" and plugin.fqcn.startswith(prefix):
            return f"{plugin.fqcn[len(prefix):]}.md"
        return None

    def plugin_option_like_link(self, plugin, entrypoint, what, name, current_plugin) -> str | None:
        anchor = f"{'parameter' if what == 'option' else 'return'}-{'/'.join(name)}"
        if current_plugin:
            return f"#{anchor}"
        page = self.plugin_link(plugin)
        return f"{page}#{anchor}" if page else None


LINKS = Links()

# Characters that could start Markdown syntax inline or end a table cell; `_` only at a word's
# edge (GFM never reads an underscore inside a word as emphasis).
_ESCAPE = re.compile(r"([\\`*\[\]<>|~&])|(?<!\w)_|_(?!\w)")


def md_escape(text: str) -> str:
    return _ESCAPE.sub(lambda m: "\\" + m.group(0), text)


def code(text: str) -> str:
    """A code span, safe in a table cell."""
    text = text.replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" or text.startswith(" ") or text.endswith(" ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


class Markdown(Formatter):
    """antsibull-docs-parser's parts as plain, readable Markdown (its own MDFormatter escapes
    every punctuation character and writes HTML for code)."""

    def format_error(self, part):
        raise ValueError(part.message)

    def format_bold(self, part):
        return f"**{md_escape(part.text)}**"

    def format_code(self, part):
        return code(part.text)

    def format_horizontal_line(self, part):
        return "<hr>"

    def format_italic(self, part):
        return f"*{md_escape(part.text)}*"

    def format_link(self, part):
        return f"[{md_escape(part.text)}]({part.url})"

    def format_module(self, part, url):
        return f"[{md_escape(part.fqcn)}]({url})" if url else md_escape(part.fqcn)

    def format_rst_ref(self, part):
        return md_escape(part.text)

    def format_url(self, part):
        return f"<{part.url}>"

    def format_text(self, part):
        return md_escape(part.text)

    def format_env_variable(self, part):
        return code(part.name)

    def _option_like(self, part, url):
        text = code(part.name if part.value is None else f"{part.name}={part.value}")
        return f"[{text}]({url})" if url else text

    def format_option_name(self, part, url):
        return self._option_like(part, url)

    def format_option_value(self, part):
        return code(part.value)

    def format_plugin(self, part, url):
        return f"[{md_escape(part.plugin.fqcn)}]({url})" if url else md_escape(part.plugin.fqcn)

    def format_return_value(self, part, url):
        return self._option_like(part, url)


MARKDOWN = Markdown()


def markup(text: str | list[str] | None, fqcn: str, sep: str = "\n\n") -> str:
    """Ansible markup → Markdown; paragraphs joined by `sep`, each on one line."""
    if not text:
        return ""
    plugin = dom.PluginIdentifier(fqcn=fqcn, type="module")
    paragraphs = parse(text, Context(current_plugin=plugin), errors="exception")
    md = to_md(paragraphs, formatter=MARKDOWN, link_provider=LINKS, current_plugin=plugin, par_sep="\x00")
    return sep.join(" ".join(p.split("\n")) for p in md.split("\x00"))


def cell(text: str) -> str:
    """Markdown for a table cell: no line breaks."""
    return text.replace("\n", " ").strip()


def literal(value: Any) -> str:
    return code(value if isinstance(value, str) else json.dumps(value, sort_keys=True))


def type_of(entry: dict[str, Any]) -> str:
    kind = entry.get("type") or "str"
    if kind == "list" and entry.get("elements"):
        kind = f"list / elements={entry['elements']}"
    return kind


def option_rows(options: dict[str, Any], fqcn: str, parents: tuple[str, ...] = ()) -> list[str]:
    rows = []
    for name in sorted(options):
        entry = options[name]
        path = (*parents, name)
        anchor = "parameter-" + "/".join(path)
        title = f'<a id="{anchor}"></a>**{md_escape(".".join(path))}**'
        if entry.get("aliases"):
            title += "<br>aliases: " + ", ".join(md_escape(a) for a in entry["aliases"])
        facts = [type_of(entry)]
        if entry.get("required"):
            facts.append("required")
        details = [markup(entry.get("description"), fqcn, sep="<br><br>")]
        if entry.get("choices"):
            details.append("Choices: " + ", ".join(literal(c) for c in entry["choices"]))
        if entry.get("default") is not None:
            details.append("Default: " + literal(entry["default"]))
        rows.append(f"| {title} | {' '.join(facts)} | {cell('<br><br>'.join(d for d in details if d))} |")
        if entry.get("suboptions"):
            rows += option_rows(entry["suboptions"], fqcn, path)
    return rows


def return_rows(values: dict[str, Any], fqcn: str, parents: tuple[str, ...] = ()) -> list[str]:
    rows = []
    for name in sorted(values):
        entry = values[name]
        path = (*parents, name)
        anchor = "return-" + "/".join(path)
        title = f'<a id="{anchor}"></a>**{md_escape(".".join(path))}**'
        details = [markup(entry.get("description"), fqcn, sep="<br><br>")]
        if entry.get("sample") is not None:
            details.append("Sample: " + literal(entry["sample"]))
        returned = md_escape(str(entry.get("returned") or ""))
        rows.append(f"| {title} | {type_of(entry)} | {returned} | {cell('<br><br>'.join(d for d in details if d))} |")
        if entry.get("contains"):
            rows += return_rows(entry["contains"], fqcn, path)
    return rows


def module_page(name: str, raw: dict[str, Any]) -> str:
    fqcn = f"{COLLECTION}.{name}"
    info, errors = normalize_plugin_info(fqcn, "module", raw)
    if errors:
        sys.exit(f"{fqcn}: {'; '.join(errors)}")
    doc = info["doc"]
    out = [f"<!-- Generated by {GENERATOR} from plugins/modules/{name}.py; do not edit. -->", "",
           f"# {fqcn} — {markup(doc['short_description'], fqcn)}", "",
           f"A module of the Ansible collection `{COLLECTION}`"
           + (f", new in {doc['version_added']}" if doc.get("version_added") not in (None, "historical") else "")
           + f". Source: [plugins/modules/{name}.py](../../../plugins/modules/{name}.py); "
           "all modules: [index](README.md).", ""]
    out += ["## Synopsis", ""] + [f"- {markup(p, fqcn)}" for p in doc["description"]] + [""]
    if doc.get("requirements"):
        out += ["## Requirements", "", "On the host that executes the module:", ""]
        out += [f"- {markup(r, fqcn)}" for r in doc["requirements"]] + [""]
    if doc.get("options"):
        out += ["## Parameters", "", "| parameter | type | comments |", "|---|---|---|"]
        out += option_rows(doc["options"], fqcn) + [""]
    if doc.get("attributes"):
        out += ["## Attributes", "", "| attribute | support | description |", "|---|---|---|"]
        for attr in sorted(doc["attributes"]):
            entry = doc["attributes"][attr]
            support = entry.get("support", "")
            if entry.get("platforms"):
                platforms = entry["platforms"]
                support += ": " + ", ".join(platforms if isinstance(platforms, list) else [platforms])
            text = markup(entry.get("description"), fqcn, sep="<br><br>")
            if entry.get("details"):
                text += "<br><br>" + markup(entry["details"], fqcn, sep="<br><br>")
            out.append(f"| {md_escape(attr)} | {md_escape(support)} | {cell(text)} |")
        out.append("")
    if doc.get("notes"):
        out += ["## Notes", ""] + [f"- {markup(n, fqcn)}" for n in doc["notes"]] + [""]
    if doc.get("seealso"):
        out += ["## See also", ""]
        for ref in doc["seealso"]:
            target = ref.get("module") or ref.get("plugin") or ref.get("link") or ref.get("name") or ""
            out.append(f"- {md_escape(str(target))}: {markup(ref.get('description'), fqcn)}")
        out.append("")
    if info.get("examples"):
        out += ["## Examples", "", "```yaml", info["examples"].strip("\n"), "```", ""]
    if info.get("return"):
        out += ["## Return values", "", "| key | type | returned | description |", "|---|---|---|---|"]
        out += return_rows(info["return"], fqcn) + [""]
    if doc.get("author"):
        out += ["## Authors", ""] + [f"- {md_escape(a)}" for a in doc["author"]] + [""]
    return "\n".join(out)


def index_page(pages: dict[str, dict[str, Any]]) -> str:
    out = [f"<!-- Generated by {GENERATOR}; do not edit. -->", "",
           f"# Modules of {COLLECTION}", "",
           "One page per module, generated from the module's own documentation "
           f"(`python {GENERATOR}`). The roles, playbooks and how the modules fit together: "
           "[docs/ansible.md](../../ansible.md).", "",
           "| module | what it does |", "|---|---|"]
    for name, raw in pages.items():
        fqcn = f"{COLLECTION}.{name}"
        out.append(f"| [{fqcn}]({name}.md) | {cell(markup(raw['doc']['short_description'], fqcn))} |")
    return "\n".join(out) + "\n"


def render() -> dict[Path, str]:
    names = module_names()
    raw = ansible_doc([f"{COLLECTION}.{n}" for n in names])
    docs = {n: raw[f"{COLLECTION}.{n}"] for n in names}
    files = {OUT / f"{n}.md": module_page(n, docs[n]) for n in names}
    files[OUT / "README.md"] = index_page(docs)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is stale or missing")
    args = parser.parse_args(argv)
    files = render()
    extra = sorted(set(OUT.glob("*.md")) - set(files)) if OUT.exists() else []
    stale = sorted(p for p, text in files.items() if not p.exists() or p.read_text() != text)
    if args.check:
        for path in stale:
            print(f"{'stale' if path.exists() else 'missing'}: {path.relative_to(ROOT)}")
        for path in extra:
            print(f"not generated: {path.relative_to(ROOT)}")
        if stale or extra:
            print(f"run: python {GENERATOR}")
            return 1
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for path in stale:
        path.write_text(files[path])
        print(f"wrote {path.relative_to(ROOT)}")
    for path in extra:
        path.unlink()
        print(f"removed {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
