"""A model whose output head is its embedding table turned over (``tie_embeddings: true``, as
Llama-3.2's small models) builds with the shipped Llama template: the reduction check refused it,
reading the table's ``row`` rule (vocab rows split) as a row-parallel GEMM's partial sums, where the
tied head splits the logits' columns and sampling only asks for its vocab slice."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.commands import cli
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.reductions import unreduced_row_parallel
from sn40l_sim.models.template import GRAPHS_DIR, template_for
from sn40l_sim.models.tensors import inventory

REPO = Path(__file__).resolve().parents[2]


def _tied_llama(tmp_path: Path) -> Path:
    text = (GRAPHS_DIR / "llama3_1_8b.yaml").read_text()
    assert text.count("tie_embeddings: false") == 1
    (tmp_path / "llama3_1_8b.yaml").write_text(text.replace("tie_embeddings: false", "tie_embeddings: true")
                                               .replace("kernels: kernels_llama.yaml",
                                                        f"kernels: {GRAPHS_DIR / 'kernels_llama.yaml'}"))
    return tmp_path / "llama3_1_8b.yaml"


def test_a_tied_model_loads_and_still_reduces_its_embedding(tmp_path: Path) -> None:
    model = load_model(_tied_llama(tmp_path))
    assert "lm_head" not in {t.name for t in inventory(model)}
    template = template_for(model)
    # the gather from the row-split table is still a partial sum: without its all-reduce it is refused
    embedding = template.prefill.kernels["embedding"]
    kernels = {**template.prefill.kernels, "embedding": embedding.model_copy(update={"collectives": ()})}
    broken = template.model_copy(update={"prefill": template.prefill.model_copy(update={"kernels": kernels})})
    assert unreduced_row_parallel(broken, model, "prefill")[0] == ("prefill", "kernels", "embedding", "collectives")


def test_a_tied_model_runs(tmp_path: Path, capsys) -> None:
    # check and run through the CLI's main in this process (a subprocess each paid ~2 CPU-s of start-up
    # and imports; what a command returns and prints is the same)
    exp = (REPO / "experiments" / "llama8b_node8.yaml").read_text()
    exp = exp.replace("../hw_configs/sn40l_node8.yaml", (REPO / "hw_configs" / "sn40l_node8.yaml").as_posix())
    exp = exp.replace("../graphs/llama3_1_8b.yaml", _tied_llama(tmp_path).as_posix()).replace("count: 48", "count: 4")
    (tmp_path / "e.yaml").write_text(exp)
    for command in (["check", str(tmp_path / "e.yaml")],
                    ["run", str(tmp_path / "e.yaml"), "--out", str(tmp_path / "out"), "--no-plot"]):
        status = cli.main(command)
        assert status == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "results.json").exists()
