"""The repository is self-contained: what the code and the data files cite is in ``docs/``.

Every citation of a design or reference section (``docs/design.md §5``, ``[reference.md](reference.md)
§2``) names a page of ``docs/`` that has that section, and nothing cites the design and reference
notes kept outside the repository any more.
"""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CITED = ("*.py", "*.md", "*.yaml")
CITATION = re.compile(r"(design|reference)\.md\)? §(\d)")


def cited_files() -> list[Path]:
    """Files of the repository that may cite a section (code, docs, data)."""
    out = []
    for pattern in CITED:
        out += [p for p in REPO.rglob(pattern) if ".git" not in p.parts and "out" not in p.parts]
    return sorted(out)


def test_no_citation_of_notes_outside_the_repository():
    outside = re.compile(r"(?<![\w/])(DESIGN|REFERENCE)(\.md| §)")
    offenders = [f"{p.relative_to(REPO)}:{i}" for p in cited_files()
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if outside.search(line) and p.parent.name != "docs"]
    assert offenders == []


def test_every_cited_section_is_in_docs():
    sections = {name: set(re.findall(r"(?m)^## (\d)\.", (REPO / "docs" / f"{name}.md").read_text(encoding="utf-8")))
                for name in ("design", "reference")}
    missing = [f"{p.relative_to(REPO)}: {name}.md §{number}" for p in cited_files()
               for name, number in CITATION.findall(p.read_text(encoding="utf-8"))
               if number not in sections[name]]
    assert missing == []
    assert sections["design"] >= {"3", "4", "5"} and sections["reference"] >= {"1", "2", "3", "4"}
