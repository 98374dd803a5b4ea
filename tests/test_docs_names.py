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
  ``python benchmarks/run_all.py --skip sweep``) is one its parser declares;
- every fully qualified name the docs and docstrings quote (``sn40l_sim.kvcache.register``,
  ``:meth:`~sn40l_sim.serving.step_costs.StepTimer.decode_step```) is defined where it says, and
  every ``Class.member`` of a package class (``StepTimer.prefill``) is a member of it or a base.
"""
from __future__ import annotations

import argparse
import ast
import functools
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


def _module_file(dotted: str, root: Path = REPO) -> Path | None:
    """The source file of the module ``dotted`` (``sn40l_sim.mapper.graph``), or None."""
    base = root.joinpath(*dotted.split("."))
    for file in (base.with_suffix(".py"), base / "__init__.py"):
        if file.is_file():
            return file
    return None


@functools.cache
def _parsed(module: Path) -> ast.Module:
    return ast.parse(module.read_text(encoding="utf-8"))


@functools.cache
def _package_classes(root: Path = REPO) -> dict[str, list[ast.ClassDef]]:
    """The package's classes by name (a name may be two modules' classes)."""
    out: dict[str, list[ast.ClassDef]] = {}
    for module in sorted((root / "sn40l_sim").rglob("*.py")):
        for node in ast.walk(_parsed(module)):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append(node)
    return out


def _has_member(cls: str, name: str, root: Path = REPO) -> bool:
    """Whether a package class called ``cls``, or a base of it, has the member ``name``; a base
    outside the package (``NamedTuple``, a library's class) is trusted with dunders only, pydantic's
    ``BaseModel`` with its ``model_*`` names too."""
    chain, seen = [cls], set()
    while chain:
        current = chain.pop()
        if current in seen:
            continue
        seen.add(current)
        for node in _package_classes(root).get(current, []):
            if _class_defines(node, name):
                return True
            chain += [getattr(b, "id", getattr(b, "attr", "")) for b in node.bases]
        if current not in _package_classes(root) and (name.startswith("__") or (
                current == "BaseModel" and name.startswith("model_"))):
            return True
    return False


@functools.cache
def _top_level(module: Path) -> frozenset[str]:
    """The names ``module`` defines at its top level (in an ``if`` or ``try`` there too)."""
    names = set()
    for node in _parsed(module).body:
        for inner in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(inner.name)
            for target in inner.targets if isinstance(inner, ast.Assign) else [inner.target] if isinstance(
                    inner, (ast.AnnAssign, ast.AugAssign)) else []:
                names.update(t.id for t in ast.walk(target) if isinstance(t, ast.Name))
    return frozenset(names)


def _class_defines(cls: ast.ClassDef, name: str) -> bool:
    """Whether ``cls`` defines ``name`` in its body or assigns ``self.name`` in a method."""
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        for target in node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []:
            if isinstance(target, ast.Name) and target.id == name and node in cls.body:
                return True
            if isinstance(target, ast.Attribute) and target.attr == name and getattr(target.value, "id", "") == "self":
                return True
    return False


def unresolved_qualified_names(text: str, root: Path = REPO) -> list[str]:
    """Names quoted in ``text``, in markdown backticks or a Sphinx role, that do not exist: a
    package class's ``Class.member`` that neither it nor a base has, and a fully qualified
    ``sn40l_sim.module.name`` (or ``.Class.member``) that the module does not define (a top-level definition or
    import, or a member of the class or of one of its bases)."""
    out = [f"{cls}.{member}" for cls, member in sorted(set(re.findall(r"`~?([A-Z]\w*)\.(\w+)\b(?![.\w])", text)))
           if cls in _package_classes(root) and not _has_member(cls, member, root)]
    for dotted in sorted(set(re.findall(r"`~?(sn40l_sim(?:\.\w+)+)", text))):
        parts = dotted.split(".")
        split = next((k for k in range(len(parts), 0, -1) if _module_file(".".join(parts[:k]), root)), None)
        module, rest = _module_file(".".join(parts[:split]), root), parts[split:]
        if not rest:
            continue
        tree = _parsed(module)
        imported = {(a.asname or a.name).split(".")[0] for node in tree.body
                    if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
        if not (rest[0] in _top_level(module) or rest[0] in imported or _module_file(f"{dotted}", root)):
            out.append(dotted)
        elif len(rest) == 2 and rest[0] in _package_classes(root) and not _has_member(rest[0], rest[1], root):
            out.append(dotted)
    return out


def test_every_qualified_name_the_docs_and_docstrings_quote_exists():
    files = [*DOCS, *(p for folder in ("sn40l_sim", "scripts", "benchmarks", "notebooks", "tests")
                      for p in sorted((REPO / folder).rglob("*.py")) if p != Path(__file__).resolve())]
    missing = [f"{p.relative_to(REPO)}: {name}" for p in files
               for name in unresolved_qualified_names(p.read_text(encoding="utf-8"))]
    assert missing == []
    assert unresolved_qualified_names("`sn40l_sim.mapper.graph.map_graph`, `sn40l_sim.mapper.graph.gone()`, "
                                      ":meth:`~sn40l_sim.serving.step_costs.StepTimer.decode_step`, "
                                      ":attr:`sn40l_sim.serving.step_costs.StepTimer.nowhere`, "
                                      "`StepTimer.prefill`, :meth:`StepTimer.decode`, `SocketSpec.memory`") == \
        ["StepTimer.decode", "sn40l_sim.mapper.graph.gone", "sn40l_sim.serving.step_costs.StepTimer.nowhere"]
