"""The serving properties of ``test_serving_properties.py`` on a serve through the real step timer
(mapped kernels of Llama-3.1-8B, full cache and SnapStream, disaggregated and co-located with
chunked prefill), the results record against its log, and the model's maximum context at its edge:
a prompt and output filling it exactly are served, one token more is refused before serving,
naming the request and why.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from test_serving_properties import Case, check_first_come_first_served, check_serve

from sn40l_sim.errors import InputError
from sn40l_sim.study.runner import simulate_experiment

# -- one serve through the real step timer (mapped kernels), and the model's context at its edge --

ROOT = Path(__file__).resolve().parents[2]
#: Llama-3.1-8B with its context cut to 2,100 tokens: prompts of 2,048 and 52 tokens after them
#: fill it exactly; a tie of three at 0, a tie of two at 10 ms, 1-token outputs, a 1-token prompt
EXPERIMENT = f"""
kind: experiment
name: props
hardware: {ROOT}/hw_configs/sn40l_node8.yaml
model: {ROOT}/graphs/llama3_1_8b.yaml
model_overrides: {{max_context: 2100}}
parallel:
  prefill: {{tp: 8}}
  decode: {{tp: 8, attention_dp: 8}}
policies:
  - {{name: full, policy: full}}
  - {{name: snapstream, policy: snapstream, prompt_fraction: {{budget: 0.25}}}}
shape: {{prompt_len: PROMPT}}
workload:
  kind: fixed
  requests:
    - {{arrival_s: 0.0, prompt_len: 2048, output_len: OUTPUT}}
    - {{arrival_s: 0.0, prompt_len: 2048, output_len: 1}}
    - {{arrival_s: 0.0, prompt_len: 1, output_len: 52}}
    - {{arrival_s: 0.01, prompt_len: 1000, output_len: 30}}
    - {{arrival_s: 0.01, prompt_len: 1000, output_len: 30}}
    - {{arrival_s: 0.5, prompt_len: 2000, output_len: 2}}
serving:
  MODE
  decode_nodes: 1
  batch: 2
  max_new_tokens: 60
  seed: 7
"""


def experiment(tmp_path: Path, prompt: int = 2048, output: int = 52, mode: str = "disaggregated") -> Path:
    path = tmp_path / f"props_{prompt}_{output}_{mode}.yaml"
    # co-located, with chunked prefill; disaggregated, one prefill node
    serving = {"colocated": "mode: colocated\n  prefill_chunk: 512",
               "disaggregated": "mode: disaggregated\n  prefill_nodes: 1"}[mode]
    path.write_text(EXPERIMENT.replace("PROMPT", str(prompt)).replace("OUTPUT", str(output)).replace("MODE", serving))
    return path


@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
def test_a_serve_with_the_real_step_timer_keeps_every_property(tmp_path, mode):
    results: list = []
    _, records = simulate_experiment(experiment(tmp_path, mode=mode), on_result=results.append)
    assert [r.setup.policy.name for r in results] == ["full", "snapstream"]
    for result, record in zip(results, records, strict=True):
        log = result.log
        assert log.setup.slots == 2 and len(log.requests) == 6
        # a prompt and its output filling the context exactly is served, all its tokens
        assert [r.generated for r in log.requests] == [52, 1, 52, 30, 30, 2]
        case = Case([r.request for r in log.requests], log.setup)
        check_serve(case, log, result.clock_hz)
        check_first_come_first_served(case, log)
        # the record reports what the log holds
        span_s = (log.end_cycle - log.span_start) / result.clock_hz
        served = record["throughput"]
        assert served["output_tokens"] == 167 and served["requests"] == 6
        assert served["output_tokens_per_s"] == pytest.approx(167 / span_s, rel=1e-6)
        assert served["makespan_s"] == pytest.approx(span_s, rel=1e-6)


def test_prompts_at_and_beyond_the_context_are_refused_before_serving_naming_why(tmp_path):
    # one output token past the context: refused, the request named, nothing served
    with pytest.raises(InputError, match=r"requests\[0\]: a prompt of 2048 tokens and 53 generated after it make 2101"):
        simulate_experiment(experiment(tmp_path, output=53))
    # a point prompt filling the context leaves no position for a token; one over exceeds it
    with pytest.raises(InputError, match="a prompt of 2100 tokens fills the maximum context"):
        simulate_experiment(experiment(tmp_path, prompt=2100))
    with pytest.raises(InputError, match="a prompt of 2101 tokens exceeds the maximum context"):
        simulate_experiment(experiment(tmp_path, prompt=2101))
