"""The code cell every notebook starts with (``make_notebooks.py`` and the ``*_cells.py`` modules
import it): find the repository from the working directory and load the main experiment."""
from __future__ import annotations

#: every notebook starts here: find the repository from the working directory (notebooks/ or the root)
SETUP = '''\
%matplotlib inline
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from sn40l_sim.study.assemble import step_timer
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.points import make_point_policy, points
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache.base import slot_new_tokens
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.runner import simulate_points

# SN40L_SIM_NOTEBOOK_QUICK=1 (tests/test_notebooks.py sets it): every cell runs, on fewer points per sweep
QUICK = os.environ.get("SN40L_SIM_NOTEBOOK_QUICK") == "1"
REPO = next(p for p in (Path.cwd(), *Path.cwd().parents) if (p / "experiments" / "deepseek_tp16.yaml").is_file())
exp = load_experiment(REPO / "experiments" / "deepseek_tp16.yaml")
spec = exp.spec
node = load_hardware(exp.resolve(spec.hardware))
model = load_model(exp.resolve(spec.model), spec.model_overrides or None)
prefill_plan = ParallelPlan(spec.parallel.prefill.tp, spec.parallel.prefill.attention_dp)
decode_plan = ParallelPlan(spec.parallel.decode.tp, spec.parallel.decode.attention_dp)
policies = {p.name: make_point_policy(exp, p) for p in points(exp)}
# speculative decoding: each decode step verifies DRAFTS MTP drafts and yields MTP tokens on average
# (and the prefill runs the MTP module over the prompt, as run's does)
DRAFTS, MTP = exp.speculation.drafts, exp.speculation.tokens_per_step
timers = {name: step_timer(node, model, policy, prefill_plan, decode_plan, spec.graph_options, prefill_drafts=DRAFTS)
          for name, policy in policies.items()}
PROMPT, MAX_NEW = spec.shape.prompt_len, exp.max_new_tokens
# rows a static decode slot holds after the prompt: the output and the last step's drafts, as run reserves
SLOT_NEW = slot_new_tokens(MAX_NEW, DRAFTS)
COLORS = {"full": "#c0504d", "snapstream": "#1f4e8c", "snapstream 4:1": "#7a9cc6"}
GIB = 2**30
print(f"{model.name} on {node.name} ({node.sockets} sockets), prompt {PROMPT:,} tokens, "
      f"prefill TP{prefill_plan.tp}, decode TP{decode_plan.tp} with attention DP{decode_plan.attention_dp}")
for name, policy in policies.items():
    print(f"  {name:10s} static decode cache: {policy.static_cache_len(PROMPT, SLOT_NEW):,} tokens per sequence")
if QUICK:
    print("quick run (SN40L_SIM_NOTEBOOK_QUICK=1): fewer points per sweep")'''
