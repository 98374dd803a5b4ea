"""The project's style rules that a machine can hold (docs/architecture.md describes the package):
every module, public class and public top-level function of the package says what it is in a
docstring, and code, docs and data cite docs/ pages and public sources, never the number of an
issue or a pull request (a reader of the repository cannot follow one)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "sn40l_sim"
ISSUE = re.compile(r"\b(issue|PR|pull request|ticket)\s*#?\s*\d+\b|\bissues\s*#\d+|\bgh-\d+\b"
                   r"|\b(fix(es|ed)?|close[sd]?|resolve[sd]?|see|per)\s+#\d+\b", re.IGNORECASE)


def undocumented(path: Path, root: Path = REPO) -> list[str]:
    """``file:line name`` (the file relative to ``root``) of the module, its public classes and its
    public top-level functions in ``path`` without a docstring."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = path.relative_to(root)
    out = [f"{where}: module"] if ast.get_docstring(tree) is None else []

    def visit(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                if not child.name.startswith("_") and ast.get_docstring(child) is None:
                    out.append(f"{where}:{child.lineno} class {prefix}{child.name}")
                visit(child, f"{prefix}{child.name}.", True)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and not in_class:
                if not child.name.startswith("_") and ast.get_docstring(child) is None:
                    out.append(f"{where}:{child.lineno} def {prefix}{child.name}")

    visit(tree, "", False)
    return out


def test_every_module_public_class_and_top_level_function_has_a_docstring():
    missing = [line for path in sorted(PACKAGE.rglob("*.py")) for line in undocumented(path)]
    assert missing == []


def test_undocumented_finds_what_it_looks_for(tmp_path):
    bare = tmp_path / "bare.py"
    bare.write_text("class Public:\n    def method(self):\n        pass\n\n\nclass _Private:\n    pass\n\n\n"
                    "def visible():\n    def nested():\n        pass\n")
    assert undocumented(bare, tmp_path) == ["bare.py: module", "bare.py:1 class Public", "bare.py:10 def visible"]


def test_nothing_cites_an_issue_number():
    files = [p for pattern in ("*.py", "*.md", "*.yaml", "*.toml") for p in REPO.rglob(pattern)
             if not any(part.startswith(".") or part in ("out", "build") for part in p.relative_to(REPO).parts)
             and p != Path(__file__).resolve()]
    offenders = [f"{p.relative_to(REPO)}:{i}: {line.strip()}" for p in sorted(files)
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if ISSUE.search(line)]
    assert offenders == []
    assert all(ISSUE.search(text) for text in ("fixed in issue 12", "Issue #3", "PR #35", "fixes #4", "gh-7"))
    assert not any(ISSUE.search(text) for text in ('color="#1f4e8c"', "one engine issues 2 transfers", "kernels #2"))


#: the project's limit on a module's length, about which one that grows is split by what it does
MODULE_LINES = 400


def test_no_module_of_the_package_is_longer_than_the_limit():
    # modules that grew past it were split by what they do: serving/point.py's context checks are
    # serving/context_limit.py, a collective's process engine/collective_run.py, the tier split
    # mapper/tier_split.py, the frozen-dataclass helpers frozen.py, and so on
    lengths = {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines())
               for p in sorted(PACKAGE.rglob("*.py"))}
    assert {p: n for p, n in lengths.items() if n > MODULE_LINES} == {}
    assert 0 < lengths["sn40l_sim/serving/point.py"] <= MODULE_LINES and len(lengths) > 100
