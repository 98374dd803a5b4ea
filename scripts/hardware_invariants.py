"""Random "what if the hardware changed" probes, each checked against a physical invariant
(docs/validation.md, "Invariants over random configurations").

    python scripts/hardware_invariants.py                    # 40 probes, seed 0, a few minutes on 2 cores
    python scripts/hardware_invariants.py --probes 200 --seed 3

A probe draws, from a fixed seed, a deployment (Llama-3.1-8B or 70B on the 8-socket node as
``experiments/llama8b_node8.yaml`` deploys it, DeepSeek-R1 as ``experiments/deepseek_tp16.yaml``
does: MTP drafts, all experts streamed), a KV policy of the experiment, a phase and a shape (decode
batch and cache length, or prompt length) and one socket field with a faster value. It times the
step in-process (``StepTimer``, the steps ``run`` reports) and checks:

``faster_machine``
    More bandwidth, more units per tile, a faster clock, a shorter latency or set-up: the step is
    not longer than the base step by more than ``--tolerance`` (relative).
``longer_context``, ``larger_batch``, ``longer_prompt``
    Twice the cache, twice the batch or twice the prompt: the step is not shorter by more than
    ``--tolerance``.
``hbm_doubled``
    Twice the HBM rate never takes more than half the step away (nothing else got faster). A
    memory-bound step falls to within 15% of what halving its HBM time gives (``1.15 * (1 - share /
    2)`` of the step): its HBM bytes at HBM's achievable rate take at least ``MEMORY_BOUND`` of it,
    and its P2P links and compute are each busy for at most ``OTHERS_FREE`` of it, so that HBM still
    bounds the step at twice the rate (a looped decoder whose all-reduces keep the links busy for
    57% of the step is collective-bound at twice the rate, and falls only to 0.66 of it).
``peaks_and_bytes``
    Every step: the run's own checks (``units_within_peak``, ``bytes_conserved``) and each kernel's
    FLOPs within the peak of the PCUs the socket has over the kernel's span.
``memory_conserved``, ``snapstream_kv``
    A decode node's memory placement holds exactly the weights, KV and activations it was given;
    SnapStream, its budget a quarter of the context, never keeps more KV per sequence than the full
    cache at the same prompt (a budget above the context does, and ``run`` warns of it).

It prints every violation with what reproduces it and exits 1 if any (2 on bad arguments): the
figures are the simulator's, nothing is compared with a file of expected values.
"""
from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from sn40l_sim.commands.argtypes import positive_int  # noqa: E402
from sn40l_sim.engine.phase import PhaseTiming  # noqa: E402
from sn40l_sim.errors import InvariantError  # noqa: E402
from sn40l_sim.hardware import figures  # noqa: E402
from sn40l_sim.kvcache import make_policy  # noqa: E402
from sn40l_sim.models.params import weight_bytes_per_socket  # noqa: E402
from sn40l_sim.study.assemble import assemble, memory_placer  # noqa: E402
from sn40l_sim.study.invariants import check_bytes, check_peaks  # noqa: E402
from sn40l_sim.study.sweep.base import experiment_with_sets  # noqa: E402

#: HBM busy for at least this share of a step makes it memory-bound for ``hbm_doubled``
MEMORY_BOUND = 0.8
#: ... and its links and compute busy for at most this share of it (half of what HBM takes, less)
OTHERS_FREE = 0.4
#: deployment -> (experiment file, its --set values, the longest cache and prompt a probe draws)
DEPLOYMENTS: dict[str, tuple[str, dict[str, Any], int, int]] = {
    "llama8b": ("experiments/llama8b_node8.yaml", {}, 65536, 8192),
    "llama70b": ("experiments/llama8b_node8.yaml", {"model": str(REPO / "graphs" / "llama3_1_70b.yaml")}, 32768, 4096),
    "deepseek": ("experiments/deepseek_tp16.yaml", {}, 131072, 4096),
}
#: socket field -> (base value, faster values) as ``--set hardware.socket.<field>`` takes them
FASTER: dict[str, tuple[str, tuple[str, ...]]] = {
    "memory.hbm.bytes_per_s_per_unit": ("409.6 GB/s", ("450 GB/s", "512 GB/s", "614.4 GB/s", "819.2 GB/s")),
    "memory.hbm.latency_s": ("120 ns", ("80 ns", "40 ns")),
    "p2p.bytes_per_s_per_port": ("50 GB/s", ("75 GB/s", "100 GB/s", "200 GB/s")),
    "p2p.latency_s": ("93.75 ns", ("50 ns", "10 ns")),
    "tln.bytes_per_s": ("102.4 GB/s", ("150 GB/s", "204.8 GB/s")),
    "clock_hz": ("1.6 GHz", ("1.8 GHz", "2.0 GHz", "2.4 GHz")),
    "calibrated.config_load_bytes_per_s": ("", ("1.2x", "1.5x", "2x", "4x")),
    "calibrated.sync_latency_s": ("", ("0.5x", "0x")),
    "calibrated.transfer_setup_s": ("", ("0.5x", "0x")),
    "tile.pcus": ("260", ("280", "300")),   # with as many PMUs, the grid widened to hold them
}


@dataclass(frozen=True)
class Probe:
    """One drawn configuration: a deployment, a policy point, a phase and shape, a faster field."""

    deployment: str
    policy: str
    phase: str
    batch: int
    length: int            # decode: cache length; prefill: prompt length
    field: str
    faster: str

    def command(self, sets: dict[str, str]) -> str:
        """The ``run`` command whose ``--set`` values reproduce the hardware side of the probe."""
        path, base_sets, _, _ = DEPLOYMENTS[self.deployment]
        parts = [f"python -m sn40l_sim run {path} --no-plot"]
        parts += [f'--set {k}="{v}"' for k, v in base_sets.items()]
        parts += [f'--set hardware.socket.{k}="{v}"' for k, v in sets.items()]
        return " ".join(parts)


@dataclass
class Hunt:
    """The step timers of each (deployment, policy, hardware overrides), built once."""

    timers: dict[tuple, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    def point(self, deployment: str, policy: str, hardware: dict[str, str]) -> tuple[Any, Any, Any]:
        key = (deployment, policy, tuple(sorted(hardware.items())))
        if key not in self.timers:
            path, sets, _, _ = DEPLOYMENTS[deployment]
            exp, overrides = experiment_with_sets(REPO / path, {**sets, **{f"hardware.socket.{k}": v
                                                                          for k, v in hardware.items()}})
            asm = assemble(exp, hardware_overrides=overrides)
            point = next(p for p in asm.points if p.name == policy)
            setup = asm.setup(point)
            self.timers[key] = (asm, setup, asm.step_timer(setup))
        return self.timers[key]

    def step(self, probe: Probe, hardware: dict[str, str], batch: int, length: int) -> PhaseTiming:
        asm, setup, timer = self.point(probe.deployment, probe.policy, hardware)
        if probe.phase == "decode":
            timing = timer.decode_step(batch, length, setup.speculation.drafts)
        else:
            timing = timer.prefill(length)
        self._peaks(probe, timing, asm.node)
        return timing

    def _peaks(self, probe: Probe, timing: PhaseTiming, node: Any) -> None:
        self.checked["peaks_and_bytes"] = self.checked.get("peaks_and_bytes", 0) + 1
        try:
            check_bytes(timing.tier_bytes, (k.tier_bytes for k in timing.kernels), timing.link_bytes, timing.phase)
            check_peaks(timing, node)
        except InvariantError as exc:
            self.violations.append(f"peaks_and_bytes: {probe}: {exc}")
        socket = node.socket
        peak = max(figures.peak_flops(socket, d) for d in socket.pcu.macs_per_lane_stage_per_cycle) / socket.clock_hz
        # each kind of kernel over the cycles its calls ran (a loop's iterations read ahead into
        # the previous iteration's span, which is the same kind's)
        spans: dict[str, list[float]] = {}
        for k in timing.kernels:
            got = spans.setdefault(k.kind, [0.0, 0.0, 0.0])
            got[0] += max(k.end_cycle - k.start_cycle, 1)
            got[1] += k.flops
            got[2] += k.tier_bytes.get("hbm", 0)
        hbm = figures.memory_bytes_per_s(socket, "hbm") * socket.memory["hbm"].efficiency / socket.clock_hz
        for kind, (span, flops, hbm_bytes) in spans.items():
            if flops > peak * span * (1 + 1e-9):
                self.violations.append(f"peaks_and_bytes: {probe}: the {kind} kernels compute {flops:.4g} FLOPs in "
                                       f"{span:.0f} cycles, above the socket's {peak:.4g} FLOP/cycle")
            if hbm_bytes > hbm * span * (1 + 1e-9) + 1:
                self.violations.append(f"peaks_and_bytes: {probe}: the {kind} kernels move {hbm_bytes:.4g} B of HBM in "
                                       f"{span:.0f} cycles, above its achievable {hbm:.4g} B/cycle")

    def expect(self, name: str, ok: bool, message: str) -> None:
        self.checked[name] = self.checked.get(name, 0) + 1
        if not ok:
            self.violations.append(f"{name}: {message}")


def _scaled(base: float, text: str) -> float:
    return base * float(text.rstrip("x"))


def _hardware(hunt: Hunt, probe: Probe, value: str) -> dict[str, Any]:
    """The ``hardware.socket`` overrides for ``value`` of the probe's field (``""`` = the file's)."""
    if value == "":
        return {}
    if probe.field.startswith("calibrated."):
        asm, _, _ = hunt.point(probe.deployment, probe.policy, {})
        base = getattr(asm.node.socket.calibrated, probe.field.split(".", 1)[1])
        unit = "B/s" if probe.field.endswith("bytes_per_s") else "s"
        return {probe.field: f"{_scaled(base, value):.9g} {unit}"}
    if probe.field == "tile.pcus":
        units = int(value)
        return {"tile.pcus": units, "tile.pmus": units, "tile.grid_cols": -(-2 * units // 20)}
    return {probe.field: value}


def draw(rng: random.Random) -> Probe:
    """One probe, from ``rng`` only."""
    deployment = rng.choice(sorted(DEPLOYMENTS))
    _, _, longest_cache, longest_prompt = DEPLOYMENTS[deployment]
    policy = rng.choice(("full", "snapstream"))
    phase = rng.choice(("decode", "decode", "prefill"))
    batch = rng.choice((1, 2, 4, 8, 16, 32)) if phase == "decode" else 1
    top = longest_cache if phase == "decode" else longest_prompt
    length = rng.randint(256, top // 2)   # its double is drawn too
    fld = rng.choice(sorted(FASTER))
    return Probe(deployment, policy, phase, batch, length, fld, rng.choice(FASTER[fld][1]))


def run_probe(hunt: Hunt, probe: Probe, tolerance: float) -> None:
    """Every check of one probe; violations go to ``hunt.violations``."""
    base = hunt.step(probe, {}, probe.batch, probe.length)
    faster_hw = _hardware(hunt, probe, probe.faster)
    fast = hunt.step(probe, faster_hw, probe.batch, probe.length)
    where = f"{probe} ({probe.command(faster_hw)})"
    hunt.expect("faster_machine", fast.seconds <= base.seconds * (1 + tolerance),
                f"{where}: {base.seconds * 1e3:.4f} ms at the file's {probe.field}, {fast.seconds * 1e3:.4f} ms at "
                f"{probe.faster} (+{(fast.seconds / base.seconds - 1) * 100:.2f}%)")
    doubled = hunt.step(probe, {"memory.hbm.bytes_per_s_per_unit": "819.2 GB/s"}, probe.batch, probe.length)
    # twice the HBM rate is a faster machine too: than the file's, and than the probe's own HBM rate
    hbm_field = probe.field == "memory.hbm.bytes_per_s_per_unit"
    slower, label = (fast, probe.faster) if hbm_field else (base, "the file's")
    hunt.expect("faster_machine", doubled.seconds <= slower.seconds * (1 + tolerance),
                f"{probe}: {slower.seconds * 1e3:.4f} ms at {label} HBM rate, {doubled.seconds * 1e3:.4f} ms at "
                f"819.2 GB/s per module "
                f"(+{(doubled.seconds / slower.seconds - 1) * 100:.2f}%)")
    busy = _hbm_roofline(hunt, probe, base)
    ratio = doubled.seconds / base.seconds
    hunt.expect("hbm_doubled", ratio >= 0.5 * (1 - tolerance),
                f"{probe}: twice the HBM rate takes the step from {base.seconds * 1e3:.4f} to "
                f"{doubled.seconds * 1e3:.4f} ms ({ratio:.3f}), more than half of it")
    others = max(base.resource_busy_cycles.get(r, 0) for r in ("p2p", "compute")) / base.cycles
    most = halved_at_most(busy, others)
    if most is not None:
        hunt.expect("hbm_halved_memory_bound", ratio <= most,
                    f"{probe}: HBM at its achievable rate would take {busy:.2f} of the step, twice its rate gives "
                    f"{ratio:.3f} of it, above {most:.3f} (15% over {1 - busy / 2:.3f})")
    if probe.phase == "decode":
        longer = hunt.step(probe, {}, probe.batch, 2 * probe.length)
        hunt.expect("longer_context", longer.seconds >= base.seconds * (1 - tolerance),
                    f"{probe}: cache {probe.length} -> {2 * probe.length}: {base.seconds * 1e3:.4f} -> "
                    f"{longer.seconds * 1e3:.4f} ms")
        larger = hunt.step(probe, {}, 2 * probe.batch, probe.length)
        hunt.expect("larger_batch", larger.seconds >= base.seconds * (1 - tolerance),
                    f"{probe}: batch {probe.batch} -> {2 * probe.batch}: {base.seconds * 1e3:.4f} -> "
                    f"{larger.seconds * 1e3:.4f} ms")
        _memory(hunt, probe)
    else:
        longer = hunt.step(probe, {}, 1, 2 * probe.length)
        hunt.expect("longer_prompt", longer.seconds >= base.seconds * (1 - tolerance),
                    f"{probe}: prompt {probe.length} -> {2 * probe.length}: {base.seconds * 1e3:.4f} -> "
                    f"{longer.seconds * 1e3:.4f} ms")


def halved_at_most(hbm_share: float, others_share: float) -> float | None:
    """The most of a step twice the HBM rate may leave when the step is memory-bound (its HBM time
    ``hbm_share`` of it, its links and compute each busy ``others_share`` at most), else None.

    >>> round(halved_at_most(1.0, 0.1), 3), halved_at_most(0.97, 0.57), halved_at_most(0.5, 0.0)
    (0.575, None, None)
    """
    if hbm_share < MEMORY_BOUND or others_share > OTHERS_FREE:
        return None
    return 1.15 * (1 - hbm_share / 2)


def _hbm_roofline(hunt: Hunt, probe: Probe, timing: PhaseTiming) -> float:
    """The share of ``timing``'s step its HBM bytes take at HBM's achievable rate (a step near 1 is
    memory-bound; the engine's busy cycles count a stream on the tier at any rate)."""
    socket = hunt.point(probe.deployment, probe.policy, {})[0].node.socket
    rate = figures.memory_bytes_per_s(socket, "hbm") * socket.memory["hbm"].efficiency
    return timing.tier_bytes.get("hbm", 0) / rate / timing.seconds


def _memory(hunt: Hunt, probe: Probe) -> None:
    """``memory_conserved`` and ``snapstream_kv`` at the probe's decode shape."""
    asm, setup, timer = hunt.point(probe.deployment, probe.policy, {})
    model, plan = setup.model, setup.decode_plan
    kv = setup.policy.bytes_per_sequence(model, probe.length, setup.max_new_tokens) * probe.batch // plan.sockets
    activations = timer.decode_activation_bytes(probe.batch, probe.length, setup.speculation.drafts)
    placement = memory_placer(asm.node, model)(plan, kv, activations)
    totals = {use: placement.total(use) for use in ("weights", "kv", "activations")}
    given = {"weights": weight_bytes_per_socket(model, plan), "kv": kv, "activations": activations}
    hunt.expect("memory_conserved", totals == given, f"{probe}: placed {totals}, given {given}")
    full = make_policy("full", {}).bytes_per_sequence(model, probe.length, setup.max_new_tokens)
    # a budget within the sequence's context: a longer ring reserves slots no sequence fills, which
    # `run` warns of (the static graph's slot is the budget; sn40l_sim/study/points.py)
    context = probe.length + setup.max_new_tokens
    snap = make_policy("snapstream", {"budget": max(context // 4, 16)})
    ours = snap.bytes_per_sequence(model, probe.length, setup.max_new_tokens)
    hunt.expect("snapstream_kv", ours <= full, f"{probe}: SnapStream keeps {ours} B a sequence, the full cache {full}")


def hunt(seed: int, probes: int, tolerance: float, progress: Callable[[str], None] | None = None) -> Hunt:
    """Draw ``probes`` probes from ``seed`` and check each."""
    rng, found = random.Random(seed), Hunt()
    for i in range(probes):
        probe = draw(rng)
        if progress:
            progress(f"[{i + 1}/{probes}] {probe}")
        run_probe(found, probe, tolerance)
    return found


def _tolerance(text: str) -> float:
    """An argparse type: a relative slack in [0, 1). A negative one flags every unchanged step and
    NaN compares false everywhere: either makes exit status 1 report violations that are not there."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a relative slack of at least 0 and below 1, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--probes", type=positive_int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=_tolerance, default=0.01,
                        help="relative slack of the monotonic checks (default 0.01: 1%%)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    found = hunt(args.seed, args.probes, args.tolerance, None if args.quiet else print)
    print("checked:", ", ".join(f"{k} {v}" for k, v in sorted(found.checked.items())))
    for line in found.violations:
        print("VIOLATION", line)
    print(f"{len(found.violations)} violations in {args.probes} probes (seed {args.seed})")
    return 1 if found.violations else 0


if __name__ == "__main__":
    sys.exit(main())
