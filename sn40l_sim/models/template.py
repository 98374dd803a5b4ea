"""Fused-kernel templates: the declarative half of the graph builder (``graphs/kernels_*.yaml``).

A template says, for one model family on SN40L, how TP splits every weight tensor (``sharding``),
the FlashAttention tile sizes, and for each phase which fused kernels make up the head of the
graph, a dense layer, an MoE layer, an MTP module and the tail; for each kernel the operators it
contains (names of formulas in the family modules ``common``, ``mla``, ``gqa``, ``moe``, ``ffn``)
and the collectives it needs (a size formula, a kind, and whether it overlaps the kernel's compute).
The numbers come from the formulas; the structure comes from here.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field

from sn40l_sim.errors import InputError
from sn40l_sim.ir import CollectiveKind
from sn40l_sim.models.spec import MLAAttentionSpec, ModelSpec
from sn40l_sim.models.tensors import ShardRule, inventory
from sn40l_sim.schema import PositiveInt, StrictModel, validate
from sn40l_sim.yamlio import Document, load_document

#: repository folder holding the model and template files
GRAPHS_DIR = Path(__file__).resolve().parents[2] / "graphs"
DEFAULT_TEMPLATES = {"mla": "kernels_deepseek.yaml", "gqa": "kernels_llama.yaml"}


class CollectiveEntry(StrictModel):
    """One collective of a kernel: its size formula, its kind, and whether it overlaps compute."""

    size: str
    kind: CollectiveKind
    overlapped: bool = False


class KernelEntry(StrictModel):
    """One fused kernel: the node name suffix, its kind, its operators and collectives."""

    name: str | None = None
    kind: str | None = None
    operators: tuple[str, ...] = Field(min_length=1)
    collectives: tuple[CollectiveEntry, ...] = ()


class Blocks(StrictModel):
    """Kernel sequences (template ids) of each part of a phase's graph."""

    head: tuple[str, ...] = ()
    dense_layer: tuple[str, ...]
    moe_layer: tuple[str, ...] = ()
    tail: tuple[str, ...] = ()
    #: around an MTP module's transformer block (decode only)
    mtp_head: tuple[str, ...] = ()
    mtp_tail: tuple[str, ...] = ()


class PhaseTemplate(StrictModel):
    """The kernels of one phase."""

    blocks: Blocks
    kernels: dict[str, KernelEntry]


class FlashSpec(StrictModel):
    """FlashAttention tiles of prefill attention (REFERENCE.md section 3: K/V tiles of 8192)."""

    block_q: PositiveInt
    block_kv: PositiveInt


class KernelTemplates(StrictModel):
    """A ``kind: kernels`` file."""

    kind: Literal["kernels"]
    name: str
    attention: Literal["mla", "gqa"]
    flash: FlashSpec
    sharding: dict[str, ShardRule]
    prefill: PhaseTemplate
    decode: PhaseTemplate


def default_template_path(model: ModelSpec) -> Path:
    """The template a model uses when its file names none."""
    return GRAPHS_DIR / DEFAULT_TEMPLATES[model.attention.kind]


def template_for(model: ModelSpec) -> KernelTemplates:
    """The (cached) template of ``model``, checked against the model's tensors.

    >>> from sn40l_sim.models.loader import load_model
    >>> template_for(load_model(GRAPHS_DIR / "deepseek_r1.yaml")).sharding["expert_down"]
    'row'
    """
    path = Path(model.kernels) if model.kernels else default_template_path(model)
    template, doc = _load(str(path.resolve()))
    check_against_model(template, doc, model)
    return template


def load_templates(path: str | Path) -> KernelTemplates:
    """Load and validate a template file (operator and size names included).

    Raises
    ------
    InputError
        Naming the file, field and line of the first problem.
    """
    return _load(str(Path(path).resolve()))[0]


@lru_cache(maxsize=16)
def _load(path: str) -> tuple[KernelTemplates, Document]:
    doc = load_document(path)
    template = validate(KernelTemplates, doc)
    _check_names(template, doc)
    return template, doc


def _check_names(template: KernelTemplates, doc: Document) -> None:
    # formulas imported here: they import this module's siblings, not the other way round
    from sn40l_sim.models.formulas import OPERATORS, SIZES

    for phase in ("prefill", "decode"):
        spec: PhaseTemplate = getattr(template, phase)
        for part, ids in spec.blocks.model_dump().items():
            for i, kernel_id in enumerate(ids):
                if kernel_id not in spec.kernels:
                    raise doc.error((phase, "blocks", part, i),
                                    f"kernel {kernel_id!r} is not defined under {phase}.kernels "
                                    f"(defined: {', '.join(sorted(spec.kernels))})")
        for kernel_id, entry in spec.kernels.items():
            for i, op in enumerate(entry.operators):
                if op not in OPERATORS:
                    raise doc.error((phase, "kernels", kernel_id, "operators", i),
                                    f"unknown operator formula {op!r}; known: {', '.join(sorted(OPERATORS))}")
            for i, coll in enumerate(entry.collectives):
                if coll.size not in SIZES:
                    raise doc.error((phase, "kernels", kernel_id, "collectives", i, "size"),
                                    f"unknown collective size formula {coll.size!r}; known: "
                                    f"{', '.join(sorted(SIZES))}")


def check_against_model(template: KernelTemplates, doc: Document | None, model: ModelSpec) -> None:
    """The template must be for the model's attention kind and shard every one of its tensors."""
    where = (lambda field, msg: doc.error(field, msg)) if doc else (lambda field, msg: InputError(msg))
    kind = "mla" if isinstance(model.attention, MLAAttentionSpec) else "gqa"
    if template.attention != kind:
        raise where(("attention",), f"template is for {template.attention} attention but model "
                    f"{model.name!r} uses {kind}")
    missing = [t.name for t in inventory(model) if t.name not in template.sharding]
    if missing:
        raise where(("sharding",), f"no sharding rule for tensor(s) {', '.join(missing)} of model "
                    f"{model.name!r} (expected column, row or replicated)")
    for phase in ("prefill", "decode"):
        if model.moe is not None and not getattr(template, phase).blocks.moe_layer:
            raise where((phase, "blocks", "moe_layer"), f"model {model.name!r} has MoE layers but "
                        f"the template defines no {phase} moe_layer kernels")
