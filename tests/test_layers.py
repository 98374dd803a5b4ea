"""The floor plan of docs/architecture.md, held by the imports themselves.

The layers are read from the import-linter contract in pyproject.toml (CI also runs
``lint-imports``); this test checks the same picture with the standard library's ``ast`` so that it
runs with the rest of the suite, and adds what import-linter does not check: no module imports a
package module inside a function (outside ``commands/``, whose lazy imports keep ``check`` quick),
because such an import is how a cycle hides.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "sn40l_sim"


def contract() -> list[list[str]]:
    """The layers of the import-linter contract, top first, each a list of top-level names."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    layers = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")["layers"]
    return [[name.strip().removeprefix("sn40l_sim.") for name in layer.split("|")] for layer in layers]


def imports(path: Path) -> list[tuple[int, str, bool, bool]]:
    """``(line, module, inside a function, under TYPE_CHECKING)`` of every package import in ``path``
    (one pass over the tree, carrying whether a function or a ``TYPE_CHECKING`` block encloses it)."""
    out: list[tuple[int, str, bool, bool]] = []

    def visit(node: ast.AST, in_function: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            names: list[str] = []
            if isinstance(child, ast.ImportFrom) and child.module and child.module.split(".")[0] == "sn40l_sim":
                names = [child.module] if child.module != "sn40l_sim" else [f"sn40l_sim.{a.name}" for a in child.names]
            elif isinstance(child, ast.Import):
                names = [a.name for a in child.names if a.name.split(".")[0] == "sn40l_sim"]
            out.extend((child.lineno, name, in_function, type_only) for name in names)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)),
                  type_only or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)))

    visit(ast.parse(path.read_text(encoding="utf-8")), False, False)
    return out


def top(module: str) -> str | None:
    """``sn40l_sim.engine.fluid`` -> ``engine``; ``sn40l_sim.ir`` -> ``ir``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def layer_violations(package: Path = PACKAGE) -> list[str]:
    """Every import of a package module that goes up or sideways in the contract's picture, or into
    ``reference/``, plus every package import placed inside a function outside ``commands/``."""
    rank = {name: i for i, layer in enumerate(contract()) for name in layer}
    out = []
    for path in sorted(package.rglob("*.py")):
        me = path.relative_to(package).parts[0].removesuffix(".py")
        for line, module, inside, _ in imports(path):
            other = top(module)
            where = f"{path.relative_to(package.parent)}:{line} imports {module}"
            if inside and me != "commands":
                out.append(f"{where} inside a function")
            if me == "reference" or other is None or other == me:
                continue
            if other == "reference":
                out.append(f"{where}: reference/ is for tests only")
            elif me in rank and other in rank and rank[other] <= rank[me]:
                out.append(f"{where}: {other} is not below {me}")
    return out


def test_the_package_keeps_the_layers_and_has_no_function_local_imports():
    assert layer_violations() == []


def test_the_check_catches_an_upward_import(tmp_path):
    # a copy of two modules with an import of serving/ added to engine/ must be reported
    (tmp_path / "engine").mkdir()
    (tmp_path / "serving").mkdir()
    (tmp_path / "engine" / "fluid.py").write_text("from sn40l_sim.serving.loop import simulate\n")
    (tmp_path / "serving" / "loop.py").write_text("def simulate():\n    from sn40l_sim.engine import fluid\n")
    found = layer_violations(tmp_path)
    assert any("engine/fluid.py:1 imports sn40l_sim.serving.loop: serving is not below engine" in v for v in found)
    assert any("serving/loop.py:2 imports sn40l_sim.engine inside a function" in v for v in found)


@pytest.mark.parametrize("layer", ["commands", "study", "report", "serving", "engine", "mapper", "kvcache",
                                   "models", "ir", "hardware", "schema", "yamlio", "quantities", "errors"])
def test_every_part_of_the_package_is_in_the_picture(layer):
    assert any(layer in names for names in contract())
    assert (PACKAGE / layer).is_dir() or (PACKAGE / f"{layer}.py").is_file()


def test_the_forbidden_contract_covers_every_layer():
    # docs/architecture.md: "a second contract that nothing in the package imports reference/";
    # frozen and schema_keys, layers of the first contract, were missing from the second's sources
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    forbidden = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "forbidden")
    assert forbidden["forbidden_modules"] == ["sn40l_sim.reference"]
    sources = {name.removeprefix("sn40l_sim.") for name in forbidden["source_modules"]}
    assert sources == {name for layer in contract() for name in layer}


def readme_layers(text: str) -> list[list[str]]:
    """The layer chain of the README's layout table (``commands/ -> study/ -> ... -> quantities.py,
    errors.py``), top first, each a list of names as the contract writes them."""
    chain = re.search(r"in layers: `([^`]+)`", text)
    assert chain, "README.md's layout table has no `in layers: ...` chain"
    return [[name.strip().removesuffix("/").removesuffix(".py") for name in row.split(",")]
            for row in chain[1].split("->")]


def test_the_readmes_layer_chain_is_the_contracts():
    # a newcomer reads the layers off the README first: frozen.py and schema_keys.py were missing
    assert readme_layers((REPO / "README.md").read_text(encoding="utf-8")) == contract()
    assert readme_layers("in layers: `a/ -> b/, c/ -> d.py`") == [["a"], ["b", "c"], ["d"]]
