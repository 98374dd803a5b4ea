"""Wall time of a 1M-token prompt, end to end: ``python -m sn40l_sim run experiments/long_context_1m.yaml``.

DeepSeek-R1's long-context variant (maximum context raised to 1,048,576 tokens through
``model_overrides``) serving 1M-token prompts with SnapStream on 16-socket nodes. The simulated time
grows with the prompt (causal attention is quadratic); the wall time should not: the graphs have the
same kernels at every length, only their sizes change. So the same experiment is also run at a 128K
prompt, and the goal is a 1M run within 1.5x of it. The prefill node's resident activations and KV
cache per socket (GiB) are printed too, read from ``results.json``, for information.

Run from the repository root::

    python benchmarks/bench_long_context.py [--repeat 1] [--cores 2]

:func:`goal_figures` gives the rows ``(what, figure, goal)`` for ``run_all.py``'s table. Numbers are
printed, not asserted: the test suite has no timed assertions.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import child_env, positive_int, print_figures, warm_bytecode  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = REPO / "experiments" / "long_context_1m.yaml"
LONG, SHORT = 1048320, 131072   # the experiment's prompt: 2**20 less its 256 generated tokens
#: wall time of the 1M-token run over that of the 128K one: "flat" means at most this
FLAT = 1.5
GIB = 2**30


def _at_length(prompt_len: int, directory: Path) -> Path:
    """The experiment with ``prompt_len`` tokens, written to ``directory`` (paths made absolute)."""
    text = EXPERIMENT.read_text().replace("../", f"{REPO}/")
    text = text.replace(f"prompt_len: {LONG}", f"prompt_len: {prompt_len}")
    path = directory / f"long_context_{prompt_len}.yaml"
    path.write_text(text)
    return path


def time_run(experiment: Path, out: Path, cores: int) -> float:
    """Seconds of one ``run`` of ``experiment`` in a subprocess limited to ``cores`` CPUs, with an empty
    disk cache (``OUT.cache``)."""
    # each run with an empty disk cache of its own: both pay their mapping, as a first run does
    env = child_env(str(out) + ".cache")
    warm_bytecode()
    allowed = sorted(os.sched_getaffinity(0))[:cores] if hasattr(os, "sched_getaffinity") else None

    def pin() -> None:
        if allowed:
            os.sched_setaffinity(0, allowed)

    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sn40l_sim", "run", str(experiment), "--out", str(out), "--quiet"],
                   check=True, stdout=subprocess.DEVNULL, env=env, preexec_fn=pin, cwd=REPO)
    return time.perf_counter() - start


def measure(repeat: int = 1, cores: int = 2) -> dict:
    """Best wall seconds of the 1M and 128K runs, and the 1M run's prefill-node memory per socket."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp_dir = Path(tmp)
        short = _at_length(SHORT, tmp_dir)
        walls = {LONG: min(time_run(EXPERIMENT, tmp_dir / "long", cores) for _ in range(repeat)),
                 SHORT: min(time_run(short, tmp_dir / "short", cores) for _ in range(repeat))}
        point = json.loads((tmp_dir / "long" / "results.json").read_text())[0]
    prefill_node = point["memory_prefill_node"]
    return {"wall_s": walls, "prefill_s": point["prefill_s"],
            "activations": sum(tier.get("activations", 0) for tier in prefill_node.values()),
            "kv": sum(tier.get("kv", 0) for tier in prefill_node.values())}


def goal_figures(repeat: int = 1, cores: int = 2) -> list[tuple[str, object, str]]:
    """Rows ``(what, figure, goal)`` of this benchmark (for ``run_all.py``)."""
    m = measure(repeat, cores)
    long, short = m["wall_s"][LONG], m["wall_s"][SHORT]
    return [
        ("1M-token prompt, run, wall s", long, "-"),
        ("1M-token prompt, wall over the same run at 128K", long / short, f"<= {FLAT}"),
        ("1M-token prompt, simulated prefill s", m["prefill_s"], "-"),
        ("1M-token prompt, prefill activations per socket (resident), GiB", m["activations"] / GIB,
         "-"),
        ("1M-token prompt, prefill KV per socket, GiB", m["kv"] / GIB, "-"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=positive_int, default=1)
    parser.add_argument("--cores", type=positive_int, default=2)
    args = parser.parse_args()
    print_figures(goal_figures(args.repeat, args.cores))


if __name__ == "__main__":
    main()
