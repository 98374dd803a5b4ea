"""Workloads: fixed lists, seeded Poisson arrivals with length distributions, trace files."""
from __future__ import annotations

import numpy as np
import pytest

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.serving.traces import read_trace
from sn40l_sim.serving.workload import build_requests, sample_lengths
from sn40l_sim.study.experiment import FixedWorkload, LognormalLength, PoissonWorkload, TraceWorkload, UniformLength

CLOCK = 1.6e9


def build(spec, **kw):
    args = dict(prompt_len=4096, max_new_tokens=128, slots=8, seed=0, clock_hz=CLOCK)
    args.update(kw)
    return build_requests(spec, **args)


def test_fixed_count_batch_fills_every_slot_per_round():
    spec = FixedWorkload(kind="fixed", count="batch", rounds=3, output_len=16, interval_s=0.5)
    reqs = build(spec, slots=16)
    assert len(reqs) == 48
    assert {r.prompt_len for r in reqs} == {4096} and {r.output_len for r in reqs} == {16}
    assert [r.arrival_cycle for r in reqs[:3]] == [0, 800_000_000, 1_600_000_000]
    assert [r.id for r in reqs] == list(range(48))


def test_fixed_request_list_is_sorted_by_arrival_with_default_prompt():
    spec = FixedWorkload(kind="fixed", requests=[{"arrival_s": 2, "output_len": 3},
                                                 {"arrival_s": 1, "prompt_len": 10, "output_len": 5}])
    reqs = build(spec)
    assert [(r.id, r.arrival_cycle, r.prompt_len, r.output_len) for r in reqs] == \
           [(0, 1_600_000_000, 10, 5), (1, 3_200_000_000, 4096, 3)]


def test_poisson_is_seeded_and_has_the_asked_rate():
    spec = PoissonWorkload(kind="poisson", rate_per_s=4.0, count=4000,
                           prompt_len={"dist": "uniform", "low": 100, "high": 200},
                           output_len={"dist": "lognormal", "median": 50, "sigma": 0.5})
    a, b, c = build(spec, seed=1), build(spec, seed=1), build(spec, seed=2)
    assert a == b and a != c
    gaps = np.diff([0] + [r.arrival_cycle for r in a]) / CLOCK
    assert gaps.mean() == pytest.approx(0.25, rel=0.05)
    prompts = [r.prompt_len for r in a]
    assert min(prompts) >= 100 and max(prompts) <= 200 and len(set(prompts)) > 90
    outputs = np.array([r.output_len for r in a])
    assert np.median(outputs) == pytest.approx(50, rel=0.05)
    assert outputs.max() <= 128  # clipped to max_new_tokens


def test_lengths_never_exceed_the_compiled_graphs():
    rng = np.random.Generator(np.random.PCG64(3))
    assert max(sample_lengths(LognormalLength(dist="lognormal", median=1000, sigma=3), 500, rng, 700)) == 700
    assert set(sample_lengths(UniformLength(dist="uniform", low=5, high=5), 10, rng, 9)) == {5}


def test_a_request_longer_than_the_graphs_is_infeasible():
    with pytest.raises(InfeasibleError, match="prompt_len 5000 exceeds the point's prompt length 4096"):
        build(FixedWorkload(kind="fixed", count=2, prompt_len=5000, output_len=1))
    with pytest.raises(InfeasibleError, match="output_len 200 exceeds max_new_tokens 128"):
        build(FixedWorkload(kind="fixed", count=2, output_len=200))


def test_each_request_must_fit_the_models_context_with_its_own_output(tmp_path):
    # a serving engine checks a request's prompt plus its max_tokens: a long prompt with a short output
    # and a short prompt with a long one both fit 4,200 positions, though the longest of each would not
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,4096,64\n0.5,1000,128\n")
    spec = TraceWorkload(kind="trace", path="t.csv")
    assert len(build(spec, trace_rows=read_trace(trace), max_context=4200)) == 2
    with pytest.raises(InputError, match="a request: a prompt of 4096 tokens and 64 generated after it make 4160, "
                       "beyond the model's maximum context of 4100 tokens: at most 4 after such a prompt") as info:
        build(spec, trace_rows=read_trace(trace), max_context=4100)
    assert (info.value.file, info.value.line) == (str(trace), 2)
    # capping lengths caps the output to what the context leaves after the prompt
    capped = TraceWorkload(kind="trace", path="t.csv", cap_lengths=True)
    first = min(build(capped, trace_rows=read_trace(trace), max_context=4100), key=lambda r: r.arrival_cycle)
    assert (first.prompt_len, first.output_len) == (4096, 4)
    with pytest.raises(InputError, match="request 0: a prompt of 4096 tokens and 100 generated after it make 4196"):
        build(FixedWorkload(kind="fixed", count=2, output_len=100), max_context=4100)


def test_csv_and_jsonl_traces(tmp_path):
    csv_file = tmp_path / "t.csv"
    csv_file.write_text("arrival_s,prompt_len,output_len\n0.25,100,4\n0,4096,8\n")
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"arrival_s": 0.25, "prompt_len": 100, "output_len": 4}\n\n'
                     '{"arrival_s": 0, "prompt_len": 4096, "output_len": 8}\n')
    a = build(TraceWorkload(kind="trace", path="t.csv"), trace_rows=read_trace(csv_file))
    b = build(TraceWorkload(kind="trace", path="t.jsonl"), trace_rows=read_trace(jsonl))
    assert a == b
    assert [(r.arrival_cycle, r.prompt_len) for r in a] == [(0, 4096), (400_000_000, 100)]


@pytest.mark.parametrize("name, text, line, match", [
    ("bad.csv", "arrival,prompt_len,output_len\n0,1,1\n", 1, "expected the CSV header"),
    ("bad.csv", "arrival_s,prompt_len,output_len\n0,1,1\n0,x,1\n", 3, "prompt_len: expected an integer"),
    ("bad.csv", "arrival_s,prompt_len,output_len\n-1,1,1\n", 2, "arrival_s: expected a time from 0 s"),
    ("bad.csv", "arrival_s,prompt_len,output_len\n0,1.5,1\n", 2, "prompt_len: expected an integer"),
    ("bad.csv", "arrival_s,prompt_len,output_len\n0,1,0\n", 2, "output_len: expected a positive integer from 1"),
    ("bad.csv", "arrival_s,prompt_len,output_len\n1e400,1,1\n", 2, "arrival_s: expected a finite time"),
    ("bad.jsonl", "{\"arrival_s\": NaN, \"prompt_len\": 1, \"output_len\": 1}\n", 1, "arrival_s: expected a finite time"),
    ("bad.csv", "arrival_s,prompt_len,output_len\n0,1e30,1\n", 2, "prompt_len: expected a positive integer from 1 to 2147483647"),
    ("bad.csv", "arrival_s,prompt_len,output_len\n0,1,\n", 2, "output_len: missing value"),
    ("bad.csv", "arrival_s,prompt_len,output_len\n", None, "no requests"),
    ("bad.jsonl", '{"arrival_s": 0, "prompt_len": 1, "output_len": 1}\n{"arrival_s": 0,\n', 2, "invalid JSON"),
    ("bad.jsonl", '[1, 2, 3]\n', 1, "expected a JSON object"),
    ("bad.jsonl", '{"arrival_s": 0, "prompt_len": 1, "output_len": 1, "user": 3}\n', 1, "unknown column 'user'"),
])
def test_bad_traces_name_the_file_and_line(tmp_path, name, text, line, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError, match=match) as info:
        read_trace(path)
    assert info.value.file == str(path) and info.value.line == line


def test_missing_trace_file(tmp_path):
    with pytest.raises(InputError, match="cannot read trace file"):
        read_trace(tmp_path / "nope.csv")


def test_a_workload_of_more_requests_than_a_run_can_hold_is_refused():
    # count: 2000000000 passed the schema and asked numpy for 15 GB of arrivals: a MemoryError
    # traceback (or the machine's memory filled); a run keeps every request, about 3.2 KB each
    with pytest.raises(ValueError, match="expected a request count from 1 to 10000000"):
        PoissonWorkload(kind="poisson", rate_per_s=1, count=2_000_000_000, output_len=8)
    with pytest.raises(ValueError, match="expected a request count from 1 to 10000000"):
        FixedWorkload(kind="fixed", count="batch", rounds=20_000_000, output_len=8)
    # count: batch with rounds is the slots times the rounds, known once the batch is
    spec = PoissonWorkload(kind="poisson", rate_per_s=1, count="batch", rounds=9_000_000, output_len=8)
    with pytest.raises(InputError, match=r"makes 512 x 9000000 = 4608000000 requests; expected at most 10000000") \
            as err:
        build_requests(spec, prompt_len=128, max_new_tokens=8, slots=512, seed=0, clock_hz=CLOCK)
    assert err.value.field == "requests"


def test_a_request_arriving_later_than_the_serving_clock_counts_is_refused():
    # 1,000 rounds of 16 requests 1e6 s apart arrive over 1.6e10 s, 2.6e19 cycles: past the 64-bit
    # cycles of the serving loop, an OverflowError traceback once the decode steps were booked
    spec = FixedWorkload(kind="fixed", count="batch", rounds=1000, output_len=8, interval_s=1e6)
    with pytest.raises(InputError, match=r"the last request arrives 1.6e\+10 s after the serve starts") as err:
        build(spec, slots=16)
    assert err.value.field == "requests"
    assert build(spec, slots=16, clock_hz=1e6)[-1].arrival_cycle == 15_999 * 10**12   # at 1 MHz it fits
