#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Generate docs/ansible/modules/ and docs/ansible/roles/: one Markdown page per module and per role
of tidal.colocation, and an index of each.

The pages come from the modules' own DOCUMENTATION, EXAMPLES and RETURN and from the roles'
``meta/argument_specs.yml``, read the way
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

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

try:
    from antsibull_docs.process_docs import normalize_plugin_info
    from antsibull_docs_parser import dom
    from antsibull_docs_parser.format import Formatter, LinkProvider
    from antsibull_docs_parser.md import to_md
    from antsibull_docs_parser.parser import Context, parse
except ImportError as err:  # pragma: no cover
    sys.exit(f"{err}: run with the project's venv (.venv/bin/python; antsibull-docs is in the test extra)")

from _generated import ROOT, run  # noqa: E402 (after the optional imports above)

COLLECTION = "tidal.colocation"
OUT = ROOT / "docs" / "ansible"
KINDS = ("module", "role")
INSTALLED = ROOT / ".venv" / "collections"
GENERATOR = "hack/generate_module_docs.py"


def names(kind: str) -> list[str]:
    if kind == "module":
        return sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
    return sorted(p.parent.parent.name for p in (ROOT / "roles").glob("*/meta/argument_specs.yml"))


def ansible_doc(kind: str, fqcns: list[str]) -> dict[str, Any]:
    """`ansible-doc --json` for modules or roles, from the collection installed under .venv/collections."""
    link = INSTALLED / "ansible_collections" / "tidal" / "colocation"
    if not link.exists() or link.resolve() != ROOT:
        sys.exit(f"{link} must be this checkout ({ROOT}); `make collections` (or "
                 "tests/ansible/install_collections.py) links it")
    bindir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(INSTALLED), ANSIBLE_NOCOLOR="1",
               PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", LC_ALL="C.UTF-8")
    proc = subprocess.run([str(bindir / "ansible-doc"), "--json", "-t", kind, *fqcns], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"ansible-doc failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def anchor(what: str, path: tuple[str, ...] | list[str], entrypoint: str | None = None) -> str:
    """The id of an option's (``what="option"``) or return value's row: modules
    ``parameter-a/b``, roles ``parameter-<entry point>--a/b`` (as antsibull-docs names them)."""
    kind = "parameter" if what == "option" else "return"
    return f"{kind}-{entrypoint}--{'/'.join(path)}" if entrypoint else f"{kind}-{'/'.join(path)}"


class Links(LinkProvider):
    """Options and return values of this page link to their anchors, other modules and roles of
    the collection to their pages (docs/ansible/<kind>s/); everything else stays plain text."""

    def plugin_link(self, plugin: dom.PluginIdentifier) -> str | None:
        prefix = COLLECTION + "."
        if plugin.type in KINDS and plugin.fqcn.startswith(prefix):
            return f"../{plugin.type}s/{plugin.fqcn[len(prefix):]}.md"
        return None

    def plugin_option_like_link(self, plugin, entrypoint, what, name, current_plugin) -> str | None:
        anchor_id = anchor(what, name, entrypoint)
        if current_plugin:
            return f"#{anchor_id}"
        page = self.plugin_link(plugin)
        return f"{page}#{anchor_id}" if page else None


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


def markup(text: str | list[str] | None, plugin: dom.PluginIdentifier, sep: str = "\n\n",
           entrypoint: str | None = None) -> str:
    """Ansible markup → Markdown; paragraphs joined by `sep`, each on one line."""
    if not text:
        return ""
    context = Context(current_plugin=plugin, role_entrypoint=entrypoint)
    paragraphs = parse(text, context, errors="exception")
    md = to_md(paragraphs, formatter=MARKDOWN, link_provider=LINKS, current_plugin=plugin, par_sep="\x00")
    return sep.join(" ".join(p.split("\n")) for p in md.split("\x00"))


def cell(text: str) -> str:
    """Markdown for a table cell: no line breaks."""
    return text.replace("\n", " ").strip()


def literal(value: Any) -> str:
    return code(value if isinstance(value, str) and value else json.dumps(value, sort_keys=True))


def type_of(entry: dict[str, Any]) -> str:
    kind = entry.get("type") or "str"
    if kind == "list" and entry.get("elements"):
        kind = f"list / elements={entry['elements']}"
    return kind


def option_rows(options: dict[str, Any], plugin: dom.PluginIdentifier, entrypoint: str | None = None,
                parents: tuple[str, ...] = ()) -> list[str]:
    """One table row per option, suboptions after their parent as ``parent.child``."""
    rows = []
    for name in sorted(options):
        entry = options[name]
        path = (*parents, name)
        title = f'<a id="{anchor("option", path, entrypoint)}"></a>**{md_escape(".".join(path))}**'
        if entry.get("aliases"):
            title += "<br>aliases: " + ", ".join(md_escape(a) for a in entry["aliases"])
        facts = [type_of(entry)]
        if entry.get("required"):
            facts.append("required")
        details = [markup(entry.get("description"), plugin, "<br><br>", entrypoint)]
        if entry.get("choices"):
            details.append("Choices: " + ", ".join(literal(c) for c in entry["choices"]))
        if entry.get("default") is not None:
            details.append("Default: " + literal(entry["default"]))
        rows.append(f"| {title} | {' '.join(facts)} | {cell('<br><br>'.join(d for d in details if d))} |")
        # modules nest under `suboptions`, role argument specs under `options`
        children = entry.get("suboptions") or entry.get("options")
        if children:
            rows += option_rows(children, plugin, entrypoint, path)
    return rows


def return_rows(values: dict[str, Any], plugin: dom.PluginIdentifier, parents: tuple[str, ...] = ()) -> list[str]:
    rows = []
    for name in sorted(values):
        entry = values[name]
        path = (*parents, name)
        title = f'<a id="{anchor("retval", path)}"></a>**{md_escape(".".join(path))}**'
        details = [markup(entry.get("description"), plugin, "<br><br>")]
        if entry.get("sample") is not None:
            details.append("Sample: " + literal(entry["sample"]))
        returned = md_escape(str(entry.get("returned") or ""))
        rows.append(f"| {title} | {type_of(entry)} | {returned} | {cell('<br><br>'.join(d for d in details if d))} |")
        if entry.get("contains"):
            rows += return_rows(entry["contains"], plugin, path)
    return rows


def bullets(items: list[str] | None, plugin: dom.PluginIdentifier, entrypoint: str | None = None) -> list[str]:
    return [f"- {markup(item, plugin, entrypoint=entrypoint)}" for item in items or []]


def common_sections(doc: dict[str, Any], plugin: dom.PluginIdentifier, level: str,
                    entrypoint: str | None = None) -> list[str]:
    """Synopsis, requirements, parameters, attributes, notes and see-also of a module or of one
    entry point of a role."""
    out = [f"{level} Synopsis", ""] + bullets(doc.get("description"), plugin, entrypoint) + [""]
    if doc.get("requirements"):
        where = "On the host that executes the module:" if plugin.type == "module" else "Requirements:"
        out += [f"{level} Requirements", "", where, ""] + bullets(doc["requirements"], plugin, entrypoint) + [""]
    if doc.get("options"):
        out += [f"{level} Parameters", "", "| parameter | type | comments |", "|---|---|---|"]
        out += option_rows(doc["options"], plugin, entrypoint) + [""]
    if doc.get("attributes"):
        out += [f"{level} Attributes", "", "| attribute | support | description |", "|---|---|---|"]
        for attr in sorted(doc["attributes"]):
            entry = doc["attributes"][attr]
            support = entry.get("support", "")
            if entry.get("platforms"):
                platforms = entry["platforms"]
                support += ": " + ", ".join(platforms if isinstance(platforms, list) else [platforms])
            text = markup(entry.get("description"), plugin, "<br><br>", entrypoint)
            if entry.get("details"):
                text += "<br><br>" + markup(entry["details"], plugin, "<br><br>", entrypoint)
            out.append(f"| {md_escape(attr)} | {md_escape(support)} | {cell(text)} |")
        out.append("")
    if doc.get("notes"):
        out += [f"{level} Notes", ""] + bullets(doc["notes"], plugin, entrypoint) + [""]
    if doc.get("seealso"):
        out += [f"{level} See also", ""]
        for ref in doc["seealso"]:
            target = ref.get("module") or ref.get("plugin") or ref.get("link") or ref.get("name") or ""
            out.append(f"- {md_escape(str(target))}: {markup(ref.get('description'), plugin, entrypoint=entrypoint)}")
        out.append("")
    return out


def new_in(doc: dict[str, Any]) -> str:
    version = doc.get("version_added")
    return f", new in {version}" if version not in (None, "", "historical") else ""


def module_page(name: str, raw: dict[str, Any]) -> str:
    plugin = dom.PluginIdentifier(fqcn=f"{COLLECTION}.{name}", type="module")
    info, errors = normalize_plugin_info(plugin.fqcn, "module", raw)
    if errors:
        sys.exit(f"{plugin.fqcn}: {'; '.join(errors)}")
    doc = info["doc"]
    out = [f"<!-- Generated by {GENERATOR} from plugins/modules/{name}.py; do not edit. -->", "",
           f"# {plugin.fqcn} — {markup(doc['short_description'], plugin)}", "",
           f"A module of the Ansible collection `{COLLECTION}`{new_in(doc)}. "
           f"Source: [plugins/modules/{name}.py](../../../plugins/modules/{name}.py); "
           "all modules: [index](README.md).", ""]
    out += common_sections(doc, plugin, "##")
    if info.get("examples"):
        out += ["## Examples", "", "```yaml", info["examples"].strip("\n"), "```", ""]
    if info.get("return"):
        out += ["## Return values", "", "| key | type | returned | description |", "|---|---|---|---|"]
        out += return_rows(info["return"], plugin) + [""]
    if doc.get("author"):
        out += ["## Authors", ""] + [f"- {md_escape(a)}" for a in doc["author"]] + [""]
    return "\n".join(out)


def role_page(name: str, raw: dict[str, Any]) -> str:
    plugin = dom.PluginIdentifier(fqcn=f"{COLLECTION}.{name}", type="role")
    info, errors = normalize_plugin_info(plugin.fqcn, "role", raw)
    if errors:
        sys.exit(f"{plugin.fqcn}: {'; '.join(errors)}")
    entry_points = info["entry_points"]
    main = entry_points.get("main") or next(iter(entry_points.values()))
    source = f"roles/{name}/meta/argument_specs.yml"
    out = [f"<!-- Generated by {GENERATOR} from {source}; do not edit. -->", "",
           f"# {plugin.fqcn} — {markup(main.get('short_description'), plugin, entrypoint='main')}", "",
           f"A role of the Ansible collection `{COLLECTION}`{new_in(main)}. "
           f"Source: [roles/{name}/](../../../roles/{name}/), its variables in "
           f"[{source}](../../../{source}); all roles: [index](README.md).", ""]
    # One section level per entry point when there are several; the page's own when only `main`.
    level = "##" if list(entry_points) == ["main"] else "###"
    for entrypoint in sorted(entry_points, key=lambda e: (e != "main", e)):
        doc = entry_points[entrypoint]
        if level == "###":
            short = markup(doc.get("short_description"), plugin, entrypoint=entrypoint)
            out += [f"## Entry point `{entrypoint}` — {short}", ""]
        out += common_sections(doc, plugin, level, entrypoint)
        if doc.get("examples"):
            out += [f"{level} Examples", "", "```yaml", doc["examples"].strip("\n"), "```", ""]
        if doc.get("author"):
            out += [f"{level} Authors", ""] + [f"- {md_escape(a)}" for a in doc["author"]] + [""]
    return "\n".join(out)


def index_page(kind: str, docs: dict[str, dict[str, Any]]) -> str:
    what = {"module": "the module's own documentation", "role": "the role's `meta/argument_specs.yml`"}[kind]
    out = [f"<!-- Generated by {GENERATOR}; do not edit. -->", "",
           f"# {kind.capitalize()}s of {COLLECTION}", "",
           f"One page per {kind}, generated from {what} (`python {GENERATOR}`). "
           "How the modules, roles and playbooks fit together: [docs/ansible.md](../../ansible.md).", "",
           f"| {kind} | what it does |", "|---|---|"]
    for name, raw in docs.items():
        plugin = dom.PluginIdentifier(fqcn=f"{COLLECTION}.{name}", type=kind)
        if kind == "module":
            short = markup(raw["doc"]["short_description"], plugin)
        else:
            short = markup(raw["entry_points"]["main"]["short_description"], plugin, entrypoint="main")
        out.append(f"| [{plugin.fqcn}]({name}.md) | {cell(short)} |")
    return "\n".join(out) + "\n"


def render() -> dict[Path, str]:
    files: dict[Path, str] = {}
    for kind in KINDS:
        kind_names = names(kind)
        raw = ansible_doc(kind, [f"{COLLECTION}.{n}" for n in kind_names])
        docs = {n: raw[f"{COLLECTION}.{n}"] for n in kind_names}
        page = module_page if kind == "module" else role_page
        files.update({OUT / f"{kind}s" / f"{n}.md": page(n, docs[n]) for n in kind_names})
        files[OUT / f"{kind}s" / "README.md"] = index_page(kind, docs)
    return files


def existing_pages() -> list[Path]:
    return [p for kind in KINDS for p in (OUT / f"{kind}s").glob("*.md")]


if __name__ == "__main__":
    sys.exit(run(__doc__.splitlines()[0], render, owned=existing_pages))
