"""Write docs/results.md from the results declaration (sn40l_sim/report/fields.py).

    python scripts/make_results_doc.py          # rewrite the page
    python scripts/make_results_doc.py --check  # exit 1 if the committed page is out of date
"""
from __future__ import annotations

import sys
from pathlib import Path

from sn40l_sim.report.results_doc import render

PAGE = Path(__file__).resolve().parents[1] / "docs" / "results.md"


def main(argv: list[str] | None = None) -> int:
    """Write the page (or, with ``--check``, compare it); returns the exit status."""
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    text = render()
    current = PAGE.read_text(encoding="utf-8") if PAGE.is_file() else None
    if check:
        if current != text:
            print(f"{PAGE} is out of date: run python scripts/make_results_doc.py")
            return 1
        return 0
    if current != text:
        PAGE.write_text(text, encoding="utf-8")
        print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
