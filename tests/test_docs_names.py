"""What the docs name exists under that name: a newcomer follows README.md and docs/*.md to files,
modules and sections, and a stale name sends them nowhere.

- every file path the docs quote in backticks (``sn40l_sim/...``, ``tests/...``, ``scripts/...``)
  is in the repository;
- in docs/architecture.md's paragraph on a layer (``**mapper/.**``), a bare ``tiling.py`` is a
  module of that layer and ``residency.switch_loads`` a name that module defines;
- a citation of a page's section by its title (``docs/validation.md, "Reading map's totals"``) in
  code, docs or data names a heading, a bold lead-in or the first words of a paragraph of that page;
- every ``--option`` the docs give a command (``python -m sn40l_sim map ... --plot-kernels``, or
  ``run --set`` in prose) is an option of that command's parser, and every option a command's
  parser has is in that command's row of README.md's table of commands;
- every markdown link (``[results.md](results.md)``, ``![...](figures/x.png)``) reaches a file of the
  repository, and a ``#anchor`` in it a heading of that page;
- every ``--option`` the docs give a script (``python scripts/faster_machine.py --fields ...``,
  ``python benchmarks/run_all.py --skip sweep``) is one its parser declares.
"""
from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

from sn40l_sim.commands.cli import COMMANDS, build_parser

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "sn40l_sim"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
QUOTED = re.compile(r"`([^`\n]+)`")
#: a path-like word: folders and a file with an extension the repository uses
PATH = re.compile(r"^(?:[\w.-]+/)+[\w.-]+\.(?:py|yaml|md|json|csv|png|ipynb|toml)$")
#: paths the docs quote that are not this repository's: what a run writes, placeholders, and the
#: files of the public sources docs/reference.md cites (DeepSeek-V3's repository)
NOT_OURS = re.compile(r"^(?:out|OUT)/|[<>*]|^inference/|/\.\./")
CITATION = re.compile(r"((?:docs/)?[a-z_]+\.md|README\.md),? [\"\u201c]([A-Za-z][^\"\u201d\n]{2,120})[\"\u201d]")
#: the results fields docs/results.md lists (``prefix_cache.decode_kv_shared``): a field's name, not a
#: module's attribute
RESULTS_FIELDS = set(QUOTED.findall((REPO / "docs" / "results.md").read_text(encoding="utf-8")))


def missing_paths(text: str) -> list[str]:
    """Quoted file paths in ``text`` (markdown) found neither from the repository's root nor from the
    package's."""
    out = []
    for quoted in QUOTED.findall(text):
        if ": " in quoted:   # a message quoted as the user sees it (``graphs/nope.yaml: file not found``)
            continue
        for word in quoted.split():
            word = word.strip("(),;:")
            if PATH.match(word) and not NOT_OURS.search(word):
                if not ((REPO / word).exists() or (PACKAGE / word).exists()):
                    out.append(word)
    return out


def defines(module: Path, name: str) -> bool:
    """Whether ``module`` defines ``name`` at its top level or in one of its classes."""
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def layer_misnames(text: str, package: Path = PACKAGE) -> list[str]:
    """In each ``**layer/.**`` paragraph of ``text``: bare module files that are not in that layer (or
    a folder under it) and ``module.name`` whose module in the layer does not define the name."""
    out, layer = [], None
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            layer = None
        heading = re.match(r"\*\*([\w/]+)/\.\*\*", line)
        if heading:
            layer = package / heading.group(1)
        if layer is None:
            continue
        for quoted in QUOTED.findall(line):
            for word in re.findall(r"(?<![\w/.])(\w+\.py)\b", quoted):
                if not any(layer.rglob(word)):
                    out.append(f"{number}: {word} is not in {layer.relative_to(package)}/")
            called = re.fullmatch(r"(\w+)\.(\w+)(?:\(.*\))?", quoted)
            if called and called[2] != "py" and (layer / f"{called[1]}.py").is_file() \
                    and quoted not in RESULTS_FIELDS:
                if not defines(layer / f"{called[1]}.py", called[2]):
                    out.append(f"{number}: {quoted}: {called[1]}.py has no {called[2]}")
    return out


def anchors(page: Path) -> list[str]:
    """What a citation may name on ``page``: headings, bold lead-ins and paragraphs' first words."""
    text = page.read_text(encoding="utf-8")
    lines = [re.sub(r"^(#+|[-*]|\d+\.)\s+", "", line.strip()) for line in text.splitlines()]
    bold = [b.strip().rstrip(".:") for b in re.findall(r"\*\*([^*]+)\*\*", text)]
    return [a.lower() for a in lines + bold if a]


def stale_citations(text: str, pages: dict[str, list[str]]) -> list[str]:
    """Citations ``page, "Title"`` in ``text`` whose page has no such heading, lead-in or paragraph."""
    flat = re.sub(r"\s*\n\s*(?:#:?\s*)?", " ", text)
    out = []
    for page, title in CITATION.findall(flat):
        known = pages.get(page) or pages.get(f"docs/{page}")
        if known is not None and not any(anchor.startswith(title.lower()) for anchor in known):
            out.append(f'{page}, "{title}"')
    return out


def command_options(command: str) -> set[str]:
    """The option strings of ``command``'s parser."""
    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return {option for action in sub._actions for option in action.option_strings}


def unknown_options(text: str, options: dict[str, set[str]]) -> list[str]:
    """``command --option`` in ``text`` (a command line of ``python -m sn40l_sim``, continued lines
    joined, or a quoted ``run --set`` in prose) whose command has no such option."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        uses = [(m[1], m[2]) for m in re.finditer(r"python -m sn40l_sim (\w+)([^`|]*)", line)]
        uses += [(m[1], m[2]) for m in re.finditer(r"`(\w+) (--[\w-]+)", line) if m[1] in options]
        for command, rest in uses:
            out += [f"{command} {option}" for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest)
                    if option not in options.get(command, set())]
    return out


def test_every_option_the_docs_give_a_command_is_one_of_its_options():
    options = {command: command_options(command) for command in COMMANDS}
    unknown = [f"{doc.relative_to(REPO)}: {use}" for doc in DOCS
               for use in unknown_options(doc.read_text(encoding="utf-8"), options)]
    assert unknown == []
    assert unknown_options("`python -m sn40l_sim map x.yaml --phase decode \\\n    --plots f.png`; `run --set`",
                           {"map": {"--phase"}, "run": {"--set"}}) == ["map --plots"]


def test_every_option_of_a_command_is_in_the_readmes_table():
    rows = [line for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| `python -m sn40l_sim ")]
    missing = []
    for command in COMMANDS:
        row = next((r for r in rows if r.startswith(f"| `python -m sn40l_sim {command} ")), "")
        missing += [f"{command} {option}" for option in sorted(command_options(command) - {"-h", "--help"})
                    if not re.search(re.escape(option) + r"(?![\w-])", row)]
    assert missing == []


def script_options(script: Path) -> set[str]:
    """The ``--option`` strings ``script`` declares with ``add_argument`` (read, not run: a script's
    parser is built inside its ``main``)."""
    return {arg.value for node in ast.walk(ast.parse(script.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument"
            for arg in node.args if isinstance(arg, ast.Constant) and str(arg.value).startswith("-")}


def unknown_script_options(text: str, root: Path = REPO) -> list[str]:
    """``python scripts/x.py --option`` (or ``benchmarks/``, ``notebooks/``) in ``text``, its lines
    joined, whose script is missing or declares no such option."""
    flat = re.sub(r"\s*\n\s*", " ", text.replace("\\\n", " "))
    out = []
    for use in re.finditer(r"python ((?:scripts|benchmarks|notebooks)/\w+\.py)([^`|;)]*)", flat):
        script = root / use[1]
        if not script.is_file():
            out.append(f"{use[1]}: no such script")
            continue
        declared = script_options(script)
        out += [f"{use[1]} {option}" for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", use[2])
                if option not in declared]
    return out


def test_every_option_the_docs_give_a_script_is_one_of_its_options():
    unknown = [f"{doc.relative_to(REPO)}: {use}" for doc in DOCS
               for use in unknown_script_options(doc.read_text(encoding="utf-8"))]
    assert unknown == []
    assert unknown_script_options("`python scripts/faster_machine.py --fields hbm --fast`, `python\n"
                                  "benchmarks/bench_sockets.py --sockets 64`, `python scripts/nope.py`") == \
        ["scripts/faster_machine.py --fast", "scripts/nope.py: no such script"]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(page: Path) -> list[str]:
    """Relative links of ``page`` (markdown) to a file that does not exist or an anchor no heading of
    the target page has."""
    out = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):   # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            out.append(f"{target}: no such file")
        elif anchor and anchor not in {slug(h) for h in re.findall(r"(?m)^#+ (.+)$", file.read_text(encoding="utf-8"))}:
            out.append(f"{target}: no such heading")
    return out


def test_every_markdown_link_resolves(tmp_path):
    broken = [f"{doc.relative_to(REPO)}: {link}" for doc in DOCS for link in broken_links(doc)]
    assert broken == []
    (tmp_path / "a.md").write_text("# A page\n## The disk cache\n")
    page = tmp_path / "b.md"
    page.write_text("[a](a.md#the-disk-cache), [b](a.md#speed), ![f](figures/f.png), [c](https://x.org), [d](#a-page)")
    assert broken_links(page) == ["a.md#speed: no such heading", "figures/f.png: no such file",
                                  "#a-page: no such heading"]


def test_every_quoted_path_exists():
    missing = [f"{doc.relative_to(REPO)}: {word}" for doc in DOCS
               for word in missing_paths(doc.read_text(encoding="utf-8"))]
    assert missing == []


def test_architecture_names_each_layers_own_modules():
    assert layer_misnames((REPO / "docs" / "architecture.md").read_text(encoding="utf-8")) == []


def test_every_section_cited_by_title_exists():
    pages = {str(doc.relative_to(REPO)): anchors(doc) for doc in DOCS}
    files = [p for pattern in ("*.py", "*.md", "*.yaml") for p in REPO.rglob(pattern)
             if not any(part.startswith(".") or part in ("out", "build") for part in p.relative_to(REPO).parts)
             and p != Path(__file__).resolve()]
    stale = [f"{p.relative_to(REPO)}: {cited}" for p in sorted(files)
             for cited in stale_citations(p.read_text(encoding="utf-8"), pages)]
    assert stale == []


def test_the_checks_find_what_they_look_for():
    assert missing_paths("see `sn40l_sim/mapper/nowhere.py` and `out/run/results.json`") == \
        ["sn40l_sim/mapper/nowhere.py"]
    text = "**mapper/.** `tiling.py` cuts, `traces.py` reads, `residency.switch_loads` and `graph.no_such`"
    assert layer_misnames(text) == ["1: traces.py is not in mapper/", "1: graph.no_such: graph.py has no no_such"]
    pages = {"README.md": ["## Million-token prompts".lower(), "million-token prompts"]}
    assert stale_citations('(README.md, "Million-token prompts")', pages) == []
    assert stale_citations('(README.md,\n    # "maximum context")', pages) == ['README.md, "maximum context"']
