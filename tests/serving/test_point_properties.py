"""The serving properties of ``test_serving_properties.py`` on whole points (serving/point.py) with
the fixed step costs and a stand-in memory placer (``serving_doubles.py``): random prompts and
outputs up to the point's lengths and the model's context, DeepSeek-R1 with and without its MTP
drafts, the full cache and SnapStream, prefix caching, chunked prefill, tight and roomy HBM (a batch
of 16 per node or more), one or two nodes of each kind. A point either serves every request with
the properties holding or is refused before serving with an InfeasibleError or InputError naming
the field; nothing else.
"""
from __future__ import annotations

import numpy as np
import pytest
from serving_doubles import DECODE, PREFILL, R1_KV_PER_TOKEN, FakePlacer, fixed_costs, r1_model
from test_serving_properties import Case, check_first_come_first_served, check_serve

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.kvcache import make_policy
from sn40l_sim.serving.point import PointSetup, simulate_point
from sn40l_sim.serving.prefix_cache import with_prefixes
from sn40l_sim.serving.speculation import Speculation
from sn40l_sim.serving.workload import Request
from sn40l_sim.study.experiment import POWERS_OF_TWO_BATCH, POWERS_OF_TWO_PREFILL

NODE = load_hardware("hw_configs/sn40l_node16.yaml")


def random_point(seed: int) -> tuple[PointSetup, list[Request], int]:
    rng = np.random.default_rng(seed)
    prompt, new = int(rng.choice([512, 4096])), int(rng.choice([1, 2, 16, 64]))
    model = r1_model(mtp=bool(rng.random() < 0.5))
    limit = rng.choice([None, prompt + new, prompt + new + 5])   # the context filled exactly, or not stated
    if limit is not None:
        model = model.model_copy(update={"max_context": int(limit)})
    drafts = int(rng.choice([1, 2])) if model.mtp is not None and rng.random() < 0.7 else 0
    policy = make_policy("full", {}) if rng.random() < 0.5 else make_policy("snapstream", {"budget": int(rng.choice([64, 256]))})
    mode = str(rng.choice(["disaggregated", "colocated"]))
    chunk = int(rng.choice([64, 256])) if mode == "colocated" and rng.random() < 0.4 else None
    prefix = chunk is None and rng.random() < 0.3
    setup = PointSetup(name="p", node=NODE, model=model, policy=policy, prompt_len=prompt, prefill_plan=PREFILL,
                       decode_plan=DECODE, mode=mode, prefill_nodes=int(rng.integers(1, 3)) if mode == "disaggregated" else 0,
                       decode_nodes=int(rng.integers(1, 3)), batch="max" if rng.random() < 0.8 else 16,
                       batch_sizes=POWERS_OF_TWO_BATCH, prefill_lens=POWERS_OF_TWO_PREFILL, max_new_tokens=new,
                       speculation=Speculation(drafts, 0.7), seed=seed % 3, prefix_cache=prefix, prefill_chunk=chunk)
    n = int(rng.integers(1, 150))
    arrivals = np.cumsum(rng.choice([0, 0, 10**6, 10**7, 10**8], size=n))   # bursts: slots fill, requests queue
    requests = [Request(i, int(arrivals[i]), int(rng.choice([1, prompt, int(rng.integers(1, prompt + 1))])),
                        int(rng.integers(1, new + 1))) for i in range(n)]
    if prefix:
        requests = with_prefixes(requests, 0.7, int(rng.choice([16, 300])), 2, seed)
    # HBM free per socket for about one full slot (a batch of 16 over attention_dp 16), 3, or 32
    free = int(rng.choice([0.07, 0.07, 0.2, 2.0]) * (prompt + new) * R1_KV_PER_TOKEN * 16)
    return setup, requests, free


@pytest.mark.parametrize("block", range(4))
def test_random_points_serve_every_request_with_every_property_or_are_refused(block):
    served = 0
    for seed in range(block, 160, 4):
        setup, requests, free = random_point(seed)
        try:
            result = simulate_point(setup, lambda slots, r=requests: r, fixed_costs(setup.policy),
                                    FakePlacer(40 * 2**30, free))
        except (InfeasibleError, InputError) as exc:   # refused before serving, naming the field
            assert exc.field, f"seed {seed}: {exc}"
            continue
        log, served = result.log, served + 1
        case = Case(requests, log.setup)
        try:
            check_serve(case, log, result.clock_hz)
            check_first_come_first_served(case, log)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}") from exc
    assert served > 25
