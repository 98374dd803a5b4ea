"""Write docs/results.md from the results declaration (sn40l_sim/report/fields.py).

    python scripts/make_results_doc.py          # rewrite the page
    python scripts/make_results_doc.py --check  # exit 1 if the committed page is out of date
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# this checkout's package, as every script here imports it: Python puts scripts/ on the path, not
# the checkout, so without it the page was rendered (and --check judged) from whatever sn40l_sim
# is installed, another checkout's declaration of the results
sys.path.insert(0, str(REPO))
from sn40l_sim.report.results_doc import render  # noqa: E402

PAGE = REPO / "docs" / "results.md"


def main(argv: list[str] | None = None) -> int:
    """Write the page (or, with ``--check``, compare it); returns the exit status."""
    # argparse, so that a typo of --check is refused rather than taken as "write the page"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed page is out of date")
    check = parser.parse_args(argv).check
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
