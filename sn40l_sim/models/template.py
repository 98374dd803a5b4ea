"""Fused-kernel templates: the declarative half of the graph builder (``graphs/kernels_*.yaml``).

A template says, for one model family on SN40L, how TP splits every weight tensor (``sharding``),
the FlashAttention tile sizes, and for each phase which fused kernels make up the head of the
graph, a dense layer, an MoE layer, an MTP module and the tail; for each kernel the operators it
contains (names of formulas of the shared modules ``common``, ``moe``, ``ffn`` and of the
attention family, :mod:`sn40l_sim.models.formulas`) and the collectives it needs (a size formula,
a kind, and whether it overlaps the kernel's compute). The numbers come from the formulas; the
structure comes from here.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sn40l_sim.errors import InputError, shown
from sn40l_sim.ir import CollectiveKind
from sn40l_sim.models.dataflow import dataflow_problem
from sn40l_sim.models.families import FAMILIES, known_kinds
from sn40l_sim.models.formulas import operators, sizes
from sn40l_sim.models.gathers import ungathered_column_parallel
from sn40l_sim.models.reductions import unreduced_row_parallel
from sn40l_sim.models.tensors import OPTIONAL_TENSORS, ShardRule, dense_layer_count, inventory
from sn40l_sim.models.weight_use import split_weight_of_whole_rows, unread_weight
from sn40l_sim.schema import Flag, Name, PositiveInt, StrictModel, validate
from sn40l_sim.yamlio import Document, load_document

if TYPE_CHECKING:
    from sn40l_sim.models.spec import ModelSpec

#: repository folder holding the model and template files
GRAPHS_DIR = Path(__file__).resolve().parents[2] / "graphs"


class CollectiveEntry(StrictModel):
    """One collective of a kernel: its size formula, its kind, and whether it overlaps compute."""

    size: str
    kind: CollectiveKind
    overlapped: Flag = False
    #: the kernel's operator whose output an overlapped collective carries (see
    #: :attr:`sn40l_sim.ir.Collective.after`); only with ``overlapped: true``. In decode it runs in
    #: that operator's window of the stream; in prefill, whose data tiles are token slices, it only
    #: places the collective in the kernel's order for the template checks
    after: str | None = None


class KernelEntry(StrictModel):
    """One fused kernel: the node name suffix, its kind, its operators and collectives."""

    #: shown in map's table and the Chrome trace: one line, not blank (a blank one fell back to the id unsaid)
    name: Name | None = None
    kind: Name | None = None
    operators: tuple[str, ...] = Field(min_length=1)
    collectives: tuple[CollectiveEntry, ...] = ()


class Blocks(StrictModel):
    """Kernel sequences (template ids) of each part of a phase's graph."""

    head: tuple[str, ...] = ()
    #: required for a model with dense layers (checked against the model), as moe_layer for one with experts
    dense_layer: tuple[str, ...] = ()
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
    """FlashAttention tiles of prefill attention (docs/reference.md §3: K/V tiles of 8192)."""

    block_q: PositiveInt
    block_kv: PositiveInt


class KernelTemplates(StrictModel):
    """A ``kind: kernels`` file."""

    kind: Literal["kernels"]
    name: Name
    #: kind of a registered attention family (:mod:`sn40l_sim.models.families`)
    attention: str
    flash: FlashSpec
    sharding: dict[str, ShardRule]
    prefill: PhaseTemplate
    decode: PhaseTemplate


def default_template_path(model: ModelSpec) -> Path:
    """The template a model uses when its file names none: its attention family's default."""
    return GRAPHS_DIR / model.attention.default_template


def template_for(model: ModelSpec) -> KernelTemplates:
    """The template of ``model``, checked against the model's tensors: the one the loader attached
    (:func:`with_template`), else read (and cached) from the file the model names.

    >>> from sn40l_sim.models.loader import load_model
    >>> template_for(load_model(GRAPHS_DIR / "deepseek_r1.yaml")).sharding["expert_down"]
    'row'
    """
    if model._kernel_templates is not None:
        return model._kernel_templates
    path = Path(model.kernels) if model.kernels else default_template_path(model)
    template, doc = _load(*_keys(path))
    check_against_model(template, doc, model)
    check_dataflow(template, doc, model)
    return template


def with_template(model: ModelSpec) -> ModelSpec:
    """``model`` (changed in place) carrying its checked template, so that a copy pickled to
    another process builds graphs and sizes weights without reading the template file.

    Raises
    ------
    InputError
        For a bad template, or one that does not fit the model, located in the template file.

    >>> from sn40l_sim.models.loader import load_model
    >>> import pickle
    >>> model = load_model(GRAPHS_DIR / "llama3_1_8b.yaml")
    >>> pickle.loads(pickle.dumps(model))._kernel_templates is not None
    True
    """
    model._kernel_templates = template_for(model)
    return model


def load_templates(path: str | Path) -> KernelTemplates:
    """Load and validate a template file (operator and size names included).

    Raises
    ------
    InputError
        Naming the file, field and line of the first problem.
    """
    return _load(*_keys(path))[0]


def load_templates_for(path: str | Path, model: ModelSpec) -> KernelTemplates:
    """Load a template file to build ``model``'s graphs with in place of its own: validated, and
    checked against the model as :func:`template_for` checks the model's own.

    Raises
    ------
    InputError
        Naming the file, field and line of the first problem.
    """
    template, doc = _load(*_keys(path))
    check_against_model(template, doc, model)
    check_dataflow(template, doc, model)
    return template


def _keys(path: str | Path) -> tuple[str, str, bytes | None]:
    """``(resolved, as given, its bytes)``: the cache goes by the file and what it holds (a file
    edited in a notebook's session is read again, as every YAML file is, :mod:`sn40l_sim.yamlio`),
    its messages by the path the user gave (``graphs/k.yaml``, not the absolute path;
    docs/robustness.md). A file that cannot be read has no bytes: loading it says why."""
    resolved = Path(path).resolve()
    try:
        held = resolved.read_bytes()
    except OSError:
        held = None
    return str(resolved), str(path), held


@lru_cache(maxsize=16)
def _load(resolved: str, given: str, held: bytes | None = None) -> tuple[KernelTemplates, Document]:
    doc = load_document(given)
    template = validate(KernelTemplates, doc)
    _check_names(template, doc)
    return template, doc


def _check_names(template: KernelTemplates, doc: Document) -> None:
    if template.attention not in FAMILIES:
        raise doc.error(("attention",), f"unknown attention kind {shown(template.attention)}; expected one of "
                        f"{known_kinds()}")
    known_ops, known_sizes = operators(template.attention), sizes(template.attention)
    for phase in ("prefill", "decode"):
        spec: PhaseTemplate = getattr(template, phase)
        for part, ids in spec.blocks.model_dump().items():
            for i, kernel_id in enumerate(ids):
                if kernel_id not in spec.kernels:
                    raise doc.error((phase, "blocks", part, i),
                                    f"kernel {shown(kernel_id)} is not defined under {phase}.kernels "
                                    f"(defined: {', '.join(sorted(spec.kernels))})")
        used = {kernel_id for ids in spec.blocks.model_dump().values() for kernel_id in ids}
        for kernel_id in spec.kernels:
            if kernel_id not in used:   # a block entry deleted by mistake would drop the kernel silently
                raise doc.error((phase, "kernels", kernel_id), f"kernel {shown(kernel_id)} is defined but no block of "
                                f"{phase} uses it (blocks: head, dense_layer, moe_layer, tail, mtp_head, mtp_tail)")
        for kernel_id, entry in spec.kernels.items():
            for i, op in enumerate(entry.operators):
                if op not in known_ops:
                    raise doc.error((phase, "kernels", kernel_id, "operators", i),
                                    f"unknown operator formula {shown(op)} for {template.attention} attention; "
                                    f"known: {', '.join(sorted(known_ops))}")
                only = FAMILIES[template.attention].phase_operators.get(op, phase)
                if only != phase:
                    # its formula reads the other phase's shape: a decode attention in prefill
                    # attends over no prompt token, a FlashAttention in decode over no tile
                    raise doc.error((phase, "kernels", kernel_id, "operators", i),
                                    f"operator {op!r} runs only in {only}, not in {phase} (expected "
                                    f"{_phase_ops(template.attention, phase)} for {phase} attention)")
            for i, coll in enumerate(entry.collectives):
                if coll.size not in known_sizes:
                    raise doc.error((phase, "kernels", kernel_id, "collectives", i, "size"),
                                    f"unknown collective size formula {shown(coll.size)} for {template.attention} "
                                    f"attention; known: {', '.join(sorted(known_sizes))}")
                if coll.after is not None and (not coll.overlapped or coll.after not in entry.operators):
                    raise doc.error((phase, "kernels", kernel_id, "collectives", i, "after"),
                                    f"expected one of the kernel's operators ({', '.join(entry.operators)}) "
                                    f"on an overlapped collective, got {shown(coll.after)}"
                                    + ("" if coll.overlapped else " on a collective not overlapped"))


def _phase_ops(kind: str, phase: str) -> str:
    """The attention operators family ``kind`` runs in ``phase`` only, for a message."""
    return ", ".join(op for op, only in FAMILIES[kind].phase_operators.items() if only == phase)


#: the (template, attention family, model) triples whose dataflow passed :func:`check_dataflow`, by
#: the template's and the family's identity and the model's fields (held in the value, so that
#: neither identity is reused while its entry stands). The check reads nothing else, and a model is
#: loaded again, and checked again, for every run of a sweep, every ``check`` of a sweep point and
#: most tests: some 1,700 checks of a few dozen distinct models in a run of the test suite, 2-8 ms
#: each. A check that fails is never kept: it raises again, located in the document it is given.
_DATAFLOW_PASSED: dict[tuple[int, int, str], tuple[KernelTemplates, object]] = {}
#: entries kept at most (distinct models in one process are a few dozen; a sweep over model fields more)
DATAFLOW_PASSED_KEPT = 512


def check_dataflow(template: KernelTemplates, doc: Document | None, model: ModelSpec) -> None:
    """Each phase of the template must run every operator of a layer once, in dataflow order
    (:mod:`sn40l_sim.models.dataflow`), reduce what its row-parallel GEMMs leave partial
    (:mod:`sn40l_sim.models.reductions`), gather what its column-parallel ones leave split before a
    whole reader and switch layouts around data-parallel decode attention
    (:mod:`sn40l_sim.models.gathers`) and read every weight the model stores
    (:mod:`sn40l_sim.models.weight_use`). A triple that passed once is not checked again
    (:data:`_DATAFLOW_PASSED`).

    Raises
    ------
    InputError
        Naming the kernel whose operators break the chain or whose partial sums are left unreduced.
    """
    family = FAMILIES.get(model.attention.kind)
    key = (id(template), id(family), model.model_dump_json())
    passed = _DATAFLOW_PASSED.get(key)
    if passed is not None and passed[0] is template and passed[1] is family:
        return
    for phase in ("prefill", "decode"):
        problem = (dataflow_problem(template, model, phase) or unreduced_row_parallel(template, model, phase)
                   or ungathered_column_parallel(template, model, phase) or unread_weight(template, model, phase)
                   or split_weight_of_whole_rows(template, model, phase))
        if problem is not None:
            field, message = problem
            raise doc.error(field, message) if doc else InputError(f"{'.'.join(map(str, field))}: {message}")
    if len(_DATAFLOW_PASSED) >= DATAFLOW_PASSED_KEPT:
        _DATAFLOW_PASSED.clear()
    _DATAFLOW_PASSED[key] = (template, family)


def check_against_model(template: KernelTemplates, doc: Document | None, model: ModelSpec) -> None:
    """The template must be for the model's attention kind and shard every one of its tensors."""
    where = (lambda field, msg: doc.error(field, msg)) if doc else (lambda field, msg: InputError(msg))
    kind = model.attention.kind
    if template.attention != kind:
        raise where(("attention",), f"template is for {template.attention} attention but model "
                    f"{model.name!r} uses {kind}")
    for phase in ("prefill", "decode"):
        # before the sharding rules: a dense template given to an MoE model (Mixtral with
        # kernels_llama.yaml) lacks the MoE kernels first, and its missing expert rules follow from that
        if dense_layer_count(model) and not getattr(template, phase).blocks.dense_layer:
            raise where((phase, "blocks", "dense_layer"), f"model {model.name!r} has dense layers but "
                        f"the template defines no {phase} dense_layer kernels")
        if model.moe is not None and not getattr(template, phase).blocks.moe_layer:
            raise where((phase, "blocks", "moe_layer"), f"model {model.name!r} has MoE layers but "
                        f"the template defines no {phase} moe_layer kernels")
    names = [t.name for t in inventory(model)]
    missing = [name for name in names if name not in template.sharding]
    if missing:
        raise where(("sharding",), f"no sharding rule for tensor(s) {', '.join(missing)} of model "
                    f"{model.name!r} (expected column, row or replicated)")
    for name in template.sharding:
        # a rule for no tensor would be ignored: a misspelt key left the rule it meant to change as it was
        if name not in names and name not in OPTIONAL_TENSORS:
            raise where(("sharding", name), f"no tensor named {name!r} in model {model.name!r} nor in any model "
                        f"option (expected one of {', '.join(sorted({*names, *OPTIONAL_TENSORS}))})")
    for phase in ("prefill", "decode"):
        _check_names_unique(template, phase, model, where)


def _check_names_unique(template: KernelTemplates, phase: str, model: ModelSpec, where) -> None:
    """The graph names a call ``<layer>.<name>`` (the head's and the tail's by ``<name>`` alone,
    :mod:`sn40l_sim.models.builder`): two kernels of one layer, of an MTP run, or of the head and the
    tail together, named alike would be one node of the graph."""
    spec: PhaseTemplate = getattr(template, phase)
    b = spec.blocks
    body = ("moe_layer", b.moe_layer) if model.moe is not None else ("dense_layer", b.dense_layer)
    groups = [("head and tail", [("head", b.head), ("tail", b.tail)]),
              ("dense_layer", [("dense_layer", b.dense_layer)]), ("moe_layer", [("moe_layer", b.moe_layer)]),
              ("an MTP run", [("mtp_head", b.mtp_head), body, ("mtp_tail", b.mtp_tail)] if b.mtp_head or b.mtp_tail
               else [])]
    for group, parts in groups:
        seen: dict[str, str] = {}
        for part, kernel_ids in parts:
            for i, kernel_id in enumerate(kernel_ids):
                name = spec.kernels[kernel_id].name or kernel_id
                if name in seen and seen[name] != kernel_id:
                    # the name: field that made them alike, else the block entry
                    named = [k for k in (kernel_id, seen[name]) if spec.kernels[k].name]
                    field = (phase, "kernels", named[0], "name") if named else (phase, "blocks", part, i)
                    raise where(field, f"kernels {seen[name]!r} and {kernel_id!r} of {phase}'s {group} are both "
                                f"named {name!r}: the graph names each call by its layer and name, so they would "
                                f"be one kernel (expected distinct names)")
                seen[name] = kernel_id
