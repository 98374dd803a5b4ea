"""The small sweep experiment the sweep tests share: Llama-3.1 8B on an 8-socket node, two KV
policies, one request per decode slot with two output tokens (a run takes a fraction of a second)."""
from __future__ import annotations

import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def write_experiment(tmp_path: Path, sweep: str | None, *, extra: str = "", name: str = "e.yaml",
                     batch: int = 4) -> Path:
    """A small experiment with the given ``sweep:`` body (indented by the caller as YAML; None: no
    sweep section) at decode batch ``batch``."""
    text = textwrap.dedent(f"""\
        kind: experiment
        name: small_sweep
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel:
          prefill: {{tp: 8}}
          decode: {{tp: 8, attention_dp: 8}}
        policies:
          - {{name: full, policy: full}}
          - {{name: snap, policy: snapstream, prompt_fraction: {{budget: 0.25}}}}
        shape: {{prompt_len: 4096}}
        workload: {{kind: fixed, count: batch, output_len: 2}}
        serving: {{batch: {batch}, batch_sizes: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048], max_new_tokens: 2}}
        """) + extra + ("" if sweep is None else "sweep:\n" + textwrap.indent(textwrap.dedent(sweep), "  "))
    path = tmp_path / name
    path.write_text(text)
    return path
