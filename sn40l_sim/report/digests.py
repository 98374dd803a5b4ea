"""Short digests of the hardware and the model a point simulated, kept in its record so that
``compare`` can tell two machines (or models) of one name apart: an architect's edited copy of
``hw_configs/sn40l.yaml`` keeps the name ``SN40L``, and without a digest the two runs' records would
name the same hardware while their numbers differ.

Examples
--------
>>> from pydantic import BaseModel
>>> class Toy(BaseModel):
...     name: str
...     rate: float
>>> a, b = digest(Toy(name="x", rate=1.0)), digest(Toy(name="x", rate=2.0))
>>> len(a), a == digest(Toy(name="x", rate=1.0)), a == b
(12, True, False)
"""
from __future__ import annotations

import hashlib

from pydantic import BaseModel

from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.models.template import template_for
from sn40l_sim.report.registry import Field

#: hex digits kept: 48 bits, far from a chance collision between the handful of runs compared
DIGEST_DIGITS = 12


def digest(*specs: BaseModel | None) -> str:
    """The first :data:`DIGEST_DIGITS` hex digits of the SHA-256 of ``specs``' JSON dumps (``None``
    entries skipped), the same for equal specs in every process."""
    h = hashlib.sha256()
    for spec in specs:
        if spec is not None:
            h.update(spec.model_dump_json().encode("utf-8") + b"\0")
    return h.hexdigest()[:DIGEST_DIGITS]


def model_digest(model: ModelSpec) -> str:
    """:func:`digest` of ``model`` with its kernel template's contents in place of the template's path
    (as a sweep's run key holds them, :func:`~sn40l_sim.study.sweep.plan.assembly_parameters`): the
    path is spelled from the working folder the model file was named from, so one model run from two
    folders had two digests and ``compare`` called it another model, while a template edited under
    its own name kept its digest."""
    return digest(model.model_copy(update={"kernels": None}), template_for(model))


#: the results fields :func:`~sn40l_sim.report.records.build_record` fills with :func:`digest`
#: (declared here, spliced into :data:`~sn40l_sim.report.fields.RESULTS` after ``hardware``)
DIGEST_FIELDS = (
    Field("hardware_digest", "", "12 hex digits of the SHA-256 of the node as simulated (the decode node with its "
          "socket, after any --set): two records of one hardware name and different digests ran different "
          "machines (an edited copy of a hardware file keeps its name).", axis="hardware digest"),
    Field("model_digest", "", "12 hex digits of the SHA-256 of the model as simulated (after model_overrides, with "
          "its kernel template's contents, not its path): two records of one model name and different digests "
          "ran different models.", axis="model digest"),
)
#: the prefill nodes' digest, in the ``prefill_hardware`` group of fields
PREFILL_HARDWARE_DIGEST = Field(
    "prefill_hardware_digest", "", "12 hex digits of the SHA-256 of the prefill nodes' description, as "
    "hardware_digest is of the decode node's.", axis="prefill hardware digest", group="prefill_hardware")
