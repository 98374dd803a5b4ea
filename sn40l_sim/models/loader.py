"""Load ``kind: model`` files into a validated :class:`~sn40l_sim.models.spec.ModelSpec`.

Schema errors (unknown keys, wrong types, missing fields) come from :func:`sn40l_sim.schema.validate`;
this module adds the checks that involve several fields (``dense_layers <= layers``, ``heads``
divisible by ``kv_heads``, ...), resolves the optional ``kernels:`` template path and attaches the
loaded template to the model. Every error is an :class:`~sn40l_sim.errors.InputError` naming the
file, the field and the line.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sn40l_sim.errors import InputError, with_article
from sn40l_sim.models.kv_format import kv_problems
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.models.template import default_template_path, with_template
from sn40l_sim.models.tensors import dense_ffn_needed, dense_layer_count, inventory
from sn40l_sim.schema import validate
from sn40l_sim.yamlio import Document, FieldPath, load_document, not_a_file


def load_model(path: str | Path, overrides: Mapping[str, Any] | None = None) -> ModelSpec:
    """Load, validate and cross-check a model file.

    Parameters
    ----------
    path : str or Path
        A ``kind: model`` YAML file (``base:`` overlays allowed).
    overrides : mapping, optional
        Values replacing the file's, by field name; nested fields by dotted name or nested
        mapping (``{"weight_dtype": "bf16"}``, ``{"moe.routed_experts": 128}``). They are
        validated like the file and errors name them as ``<file> (overrides)``.

    Raises
    ------
    InputError
        For any bad value, naming the file, field path and line.

    Examples
    --------
    >>> from sn40l_sim.models.template import GRAPHS_DIR
    >>> m = load_model(GRAPHS_DIR / "deepseek_r1.yaml")
    >>> m.layers, m.weight_dtype, m.moe.routed_experts
    (61, 'fp8', 256)
    >>> load_model(GRAPHS_DIR / "deepseek_r1.yaml", overrides={"weight_dtype": "bf16"}).weight_dtype
    'bf16'
    """
    doc = load_document(path)
    if overrides:
        _apply_overrides(doc, overrides)
    kind = doc.data.get("kind")
    if kind != "model":
        origin, _ = doc.where(("kind",))
        if kind is not None and origin != str(doc.path):
            # its kind comes through base: (a node file built on another): the file given is named, not
            # the base it names, as the hardware and experiment loaders name it
            raise InputError(f"this is {with_article(str(kind))} file through its base: ({origin} says kind: {kind}); "
                             "expected 'kind: model' in a model file", file=doc.path, field="base")
        raise doc.error(("kind",), f"expected 'kind: model' in a model file, got {kind!r}")
    kernels = doc.data.get("kernels")
    if kernels is not None:
        if not isinstance(kernels, str) or not kernels.strip():   # '' resolved to this file's folder
            raise doc.error(("kernels",), "expected a path (relative to this file) to a kind: kernels file"
                            + (f", got {kernels!r}" if isinstance(kernels, str) else ""))
        resolved = doc.resolve(kernels, ("kernels",))   # relative to the file that wrote it (a base: too)
        if resolved.is_dir():
            raise doc.error(("kernels",), f"{str(resolved)!r} is a folder; expected a path to a kind: kernels file")
        if not resolved.is_file():
            raise doc.error(("kernels",), f"kernel template file {str(resolved)!r} {not_a_file(resolved)}")
        doc.data["kernels"] = str(resolved)
    model = validate(ModelSpec, doc)
    check_consistency(model, doc)
    # the template loaded and checked now (errors located in its file) and carried by the model
    if model.kernels is not None:
        return with_template(model)
    try:
        return with_template(model)
    except InputError as error:
        # the family's default template, which the file never named: the error would point into a
        # shipped file (graphs/kernels_llama.yaml for a Mixtral-like MoE) as if it were the mistake
        raise doc.error(("kernels",), f"no kernels: given, so the {model.attention.kind} family's default "
                        f"template {default_template_path(model)} is used, and it does not fit model "
                        f"{model.name!r}: {error}; expected kernels: naming a template for this model "
                        "(docs/architecture.md, \"Writing a model file\")") from None


def with_overrides(model: ModelSpec, overrides: Mapping[str, Any] | None) -> ModelSpec:
    """A new validated model with fields replaced (``{"kv_dtype": "fp8"}``, ``{"kv_quant.group":
    32}`` or nested mappings), checked like a model file; ``model`` is left unchanged.

    Raises
    ------
    InputError
        Named ``<model name> (overrides)`` with the field path, for an unknown field or a bad value.

    Examples
    --------
    >>> from sn40l_sim.models.template import GRAPHS_DIR
    >>> llama = load_model(GRAPHS_DIR / "llama3_1_8b.yaml")
    >>> with_overrides(llama, {"kv_dtype": "int4", "kv_quant": {"group": 32}}).kv_quant.group
    32
    >>> with_overrides(llama, {"kv_dtype": "int4", "kv_quant": {"group": 48}})
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: llama-3.1-8b (overrides): kv_quant.group: group 48 must divide the head width 128 of the cached 'values' (per-token scales group the channels of one head's row)
    >>> with_overrides(llama, [("layers", 2)])
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: llama-3.1-8b (overrides): expected a mapping of field names to values, such as {'kv_dtype': 'fp8'}, got a list
    """
    if not overrides:
        return model
    doc = Document(model.model_dump(), Path(model.name), {})
    _apply_overrides(doc, overrides)
    changed = validate(ModelSpec, doc)
    check_consistency(changed, doc)
    return changed


def _apply_overrides(doc: Document, overrides: Mapping[str, Any]) -> None:
    label = f"{doc.path} (overrides)"
    if not isinstance(overrides, Mapping):
        # a Python caller's list of pairs: refused in the words of the other override errors
        raise InputError("expected a mapping of field names to values, such as {'kv_dtype': 'fp8'}, "
                         f"got a {type(overrides).__name__}", file=label)
    for key, value in overrides.items():
        if not isinstance(key, str) or not key:
            raise InputError(f"override keys must be field names, got {key!r}", file=label)
        path: FieldPath = tuple(key.split("."))
        if isinstance(value, Mapping):
            _apply_overrides(doc, {f"{key}.{k}": v for k, v in value.items()})
            continue
        node = doc.data
        for i, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise InputError(f"cannot override inside {'.'.join(path[:i + 1])!r}: it is not a mapping",
                                 file=label, field=key)
            node = child
        node[path[-1]] = copy.deepcopy(value)
        for known in [p for p in doc.origins if p[:len(path)] == path]:
            del doc.origins[known]
        doc.origins[path] = (label, None)


def check_consistency(model: ModelSpec, doc: Document | None = None) -> None:
    """Checks across fields that the schema cannot express.

    Raises
    ------
    InputError
        Located at the offending field when ``doc`` is given.

    Examples
    --------
    >>> bad = ModelSpec.model_validate(dict(kind="model", name="x", layers=2, dense_layers=3, hidden=8,
    ...     dense_ffn=16, vocab=10, weight_dtype="bf16",
    ...     attention=dict(kind="gqa", heads=4, kv_heads=2, head_dim=2),
    ...     moe=dict(routed_experts=4, shared_experts=0, experts_per_token=2, expert_ffn=4)))
    >>> check_consistency(bad)
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: dense_layers: dense_layers (3) must be <= layers (2)
    """
    def fail(field: FieldPath, message: str) -> InputError:
        if doc is not None:
            return doc.error(field, message)
        return InputError(message, field=".".join(map(str, field)))

    if model.dense_layers > model.layers:
        raise fail(("dense_layers",), f"dense_layers ({model.dense_layers}) must be <= layers ({model.layers})")
    if model.moe is None and model.dense_layers not in (0, model.layers):
        raise fail(("dense_layers",), "dense_layers splits dense from MoE layers, but the model has no "
                   "moe section (every layer is dense); remove it or add moe")
    if dense_ffn_needed(model) and model.dense_ffn is None:
        raise fail(("dense_ffn",), f"required: the model has {dense_layer_count(model)} dense layer(s) "
                   "(expected the SwiGLU width of their FFN, intermediate_size in a Hugging Face config)")
    if not dense_ffn_needed(model) and model.dense_ffn is not None:
        raise fail(("dense_ffn",), "every layer is MoE (dense_layers: 0), so dense_ffn would be unused; "
                   "remove it (the experts' width is moe.expert_ffn)")
    _check_bf16_tensors(model, fail)
    for field, message in model.attention.problems():  # the attention family's own checks
        raise fail(("attention", field), message)
    for path, message in kv_problems(model):  # the KV format's (datatype, scales, shared layers)
        raise fail(path, message)
    moe = model.moe
    if moe is not None:
        if moe.experts_per_token > moe.routed_experts:
            raise fail(("moe", "experts_per_token"), f"experts_per_token ({moe.experts_per_token}) must be "
                       f"<= routed_experts ({moe.routed_experts})")
        if moe.topk_groups > moe.groups:
            raise fail(("moe", "topk_groups"), f"topk_groups ({moe.topk_groups}) must be <= groups ({moe.groups})")
        if moe.routed_experts % moe.groups:
            raise fail(("moe", "groups"), f"routed_experts ({moe.routed_experts}) must split evenly into "
                       f"groups ({moe.groups})")
        reachable = moe.topk_groups * (moe.routed_experts // moe.groups)
        if moe.experts_per_token > reachable:
            raise fail(("moe", "experts_per_token"), f"experts_per_token ({moe.experts_per_token}) exceeds the "
                       f"{reachable} experts in the top {moe.topk_groups} groups")
        if model.dense_layers == model.layers:
            raise fail(("dense_layers",), "every layer is dense, so the moe section is unused; lower "
                       "dense_layers or remove moe")


def _check_bf16_tensors(model: ModelSpec, fail: Callable[[FieldPath, str], InputError]) -> None:
    """Each group ``bf16_tensors`` keeps in BF16 must be a group of the model's tensors: a name
    without one would be ignored, and with a tied head the head the user meant to keep in BF16
    would stream in ``weight_dtype`` (it is the embedding table)."""
    present = {t.group for t in inventory(model)}
    for name in model.bf16_tensors:
        if name in present:
            continue
        if name == "lm_head":
            why = "the output head is the embedding table (tie_embeddings: true): name embedding instead"
        else:   # the router, the one other optional group
            why = "the model has no router (no moe section)"
        raise fail(("bf16_tensors",), f"bf16_tensors names {name!r}, which the model does not have: {why}")
