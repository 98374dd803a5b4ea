"""Fuzzing the promise "bad input of any kind stops with one line naming the file, the field and what
was expected, and exit status 2": mutants of every shipped YAML file through ``check`` (and, with
``--run``, the accepted experiment mutants through ``run``), with a summary of the outcomes.

A mutant is one shipped file (``hw_configs/``, ``graphs/``, ``experiments/``,
``experiments/reference/``) changed by one mutation (:data:`MUTATIONS`): a key deleted or renamed, a
value retyped, a number made NaN, infinite, huge, negative or fractional, a quantity given a wrong or
extreme unit, a date or a non-text key written in, the text truncated, made invalid YAML or binary,
an alias bomb, a self-referencing alias or deep nesting. Each mutant sits in a copy of the data
folders (so the paths it names resolve) and goes through the command in this process (the CLI's
``main``), under a time limit and, here, a memory limit; the outcome is one of :data:`OUTCOMES`.

Mutations in :data:`ALWAYS_INVALID` can never give a valid file; one that is accepted is counted
apart (``accepted: should have been refused``). Others (a deleted optional key, a truncation at a
line end) may leave a valid file.

Run from the repository root::

    nice python benchmarks/fuzz.py --cases 10000 --seed 17 [--run 150] [--markdown out/fuzz.md]

``tests/test_fuzz.py`` runs a few dozen of the same mutants with hypothesis in the test suite.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import math
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sn40l_sim.commands import cli  # noqa: E402
from sn40l_sim.commands.argtypes import positive_int  # noqa: E402
from sn40l_sim.models import template  # noqa: E402
from sn40l_sim.yamlio import parse_yaml  # noqa: E402

FOLDERS = ("hw_configs", "graphs", "experiments", "experiments/reference")
#: the folder of request traces the shipped experiments name
TRACES = "experiments/traces"
SHIPPED = tuple(sorted(p.relative_to(REPO).as_posix() for folder in FOLDERS for p in (REPO / folder).glob("*.yaml")))

OUTCOMES = ("exit 2, one line", "exit 2, several lines", "Python traceback", "hang", "out of memory",
            "accepted (may be valid)", "accepted: should have been refused", "other exit status")

#: mutations whose result can never be a valid file
ALWAYS_INVALID = frozenset({"nan", "inf", "huge", "negative", "invalid_yaml", "binary", "alias_bomb", "self_alias",
                            "deep_nesting", "non_text_key", "bad_unit", "duplicate_key", "unknown_key"})


class Hang(Exception):
    """The time limit of one case ran out."""


# -- the mutations ------------------------------------------------------------------------------

def _leaves(data: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _leaves(value, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _leaves(value, path + (i,))
    else:
        yield path, data


def _keys(data: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield path + (key,)
            yield from _keys(value, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _keys(value, path + (i,))


def _parent(data: Any, path: tuple) -> Any:
    for part in path[:-1]:
        data = data[part]
    return data


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _numbers(data: Any) -> list[tuple]:
    return [p for p, v in _leaves(data) if isinstance(v, (int, float)) and not isinstance(v, bool) and p]


def _quantities(data: Any) -> list[tuple]:
    return [p for p, v in _leaves(data) if isinstance(v, str) and any(u in v for u in ("B/s", "B", "Hz", "s"))
            and v[:1].isdigit()]


def _set_number(value: Callable[[Any], Any]) -> Callable[[str, random.Random], str | None]:
    def mutate(text: str, rng: random.Random) -> str | None:
        data = parse_yaml(text, "x")[0]
        paths = _numbers(data)
        if not paths:
            return None
        path = rng.choice(paths)
        parent = _parent(data, path)
        parent[path[-1]] = value(parent[path[-1]])
        return _dump(data)
    return mutate


def delete_key(text: str, rng: random.Random) -> str | None:
    data = parse_yaml(text, "x")[0]
    path = rng.choice(list(_keys(data)))
    del _parent(data, path)[path[-1]]
    return _dump(data)


def rename_key(text: str, rng: random.Random) -> str | None:
    data = parse_yaml(text, "x")[0]
    path = rng.choice(list(_keys(data)))
    parent = _parent(data, path)
    new = path[-1] + rng.choice(["s", "_x", "2"]) if rng.random() < 0.5 else path[-1][:-1] or "x"
    if new in parent:
        return None
    parent_items = [(new if k == path[-1] else k, v) for k, v in parent.items()]
    parent.clear()
    parent.update(parent_items)
    return _dump(data)


def unknown_key(text: str, rng: random.Random) -> str | None:
    data = parse_yaml(text, "x")[0]
    sections = [()] + [p for p in _keys(data) if isinstance(_value(data, p), dict)
                       and p[-1] not in FREE_FORM]
    where = _value(data, rng.choice(sections))
    where["frobnicate"] = 1
    return _dump(data)


#: mappings whose keys are the user's (a policy's parameters, a sweep's axes, tiers, totals): a new
#: key there may be valid, or refused later with its own message
FREE_FORM = frozenset({"params", "model_overrides", "graph_options", "axes", "memory", "memory_bytes", "sharding",
                       "kernels", "where", "objectives", "prompt_fraction", "macs_per_lane_stage_per_cycle",
                       "socket_overrides"})


def _value(data: Any, path: tuple) -> Any:
    for part in path:
        data = data[part]
    return data


def retype(text: str, rng: random.Random) -> str | None:
    data = parse_yaml(text, "x")[0]
    path = rng.choice(list(_keys(data)))
    parent = _parent(data, path)
    parent[path[-1]] = rng.choice(["abc", [1, 2], {"a": 1}, True, None, 7, 0.5, ""])
    return _dump(data)


def truncate(text: str, rng: random.Random) -> str | None:
    return text[: rng.randrange(0, max(1, len(text)))]


def invalid_yaml(text: str, rng: random.Random) -> str | None:
    lines = text.splitlines()
    i = rng.randrange(len(lines))
    junk = rng.choice(["key: [unclosed", "key: {a: 1", "\tindented: with a tab", "- a\nb: c", "'unterminated",
                       "a: b: c", "  - : ", "? ? ?", "*undefined_alias", "&a &b x"])
    return "\n".join(lines[:i] + [junk] + lines[i:]) + "\n"


def binary(text: str, rng: random.Random) -> str | bytes | None:
    kind = rng.choice(["random", "nul", "utf16", "latin1"])
    if kind == "random":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096)))
    if kind == "nul":
        i = rng.randrange(len(text))
        return (text[:i] + "\x00" + text[i:]).encode("utf-8")
    if kind == "utf16":
        return text.encode("utf-16")
    i = rng.randrange(len(text))
    return text[:i].encode("utf-8") + b"\xe9\xff" + text[i:].encode("utf-8")


def alias_bomb(text: str, rng: random.Random) -> str | None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    data = parse_yaml(text, "x")[0]
    key = rng.choice(list(data))
    head = "\n".join(f"{k}: {yaml.safe_dump(v, default_flow_style=True).strip()}" for k, v in data.items() if k != key)
    return head + "\n" + "\n".join(lines) + f"\n{key}: *i\n"


def self_alias(text: str, rng: random.Random) -> str | None:
    data = parse_yaml(text, "x")[0]
    key = rng.choice(list(data))
    head = "\n".join(f"{k}: {yaml.safe_dump(v, default_flow_style=True).strip()}" for k, v in data.items() if k != key)
    return head + "\n" + f"{key}: &loop " + rng.choice(["[*loop]", "{x: *loop}", "[1, [2, *loop]]"]) + "\n"


def deep_nesting(text: str, rng: random.Random) -> str | None:
    depth = rng.choice([40, 200, 1000, 20000])
    return text + "deep: " + ("[" * depth + "]" * depth if rng.random() < 0.5 else "{a: " * depth + "1" + "}" * depth) + "\n"


def date_value(text: str, rng: random.Random) -> str | None:
    lines = [i for i, line in enumerate(text.splitlines()) if ": " in line and not line.lstrip().startswith("#")]
    if not lines:
        return None
    all_lines = text.splitlines()
    i = rng.choice(lines)
    key = all_lines[i].split(": ", 1)[0]
    all_lines[i] = f"{key}: {rng.choice(['2024-13-45', '2024-01-31', '2024-01-31T10:00:00', '12:30:00', '1:30'])}"
    return "\n".join(all_lines) + "\n"


def non_text_key(text: str, rng: random.Random) -> str | None:
    return text + rng.choice(["1: one\n", "true: yes\n", "null: x\n", "2024-01-01: x\n", "? [a, b]\n: c\n",
                              "1.5: x\n"])


def duplicate_key(text: str, rng: random.Random) -> str | None:
    data = parse_yaml(text, "x")[0]
    key = rng.choice(list(data))
    return text + f"{key}: {yaml.safe_dump(data[key], default_flow_style=True).strip()}\n"


def bad_unit(text: str, rng: random.Random) -> str | None:
    data = parse_yaml(text, "x")[0]
    paths = _quantities(data)
    if not paths:
        return None
    path = rng.choice(paths)
    _parent(data, path)[path[-1]] = rng.choice(["2.5 B/s", "1e30 GB/s", "-1 GiB", "nan ns", "1.6 THz", "5 parsecs",
                                                "1e400 B", "0 Hz", "64 GB/s/s"])
    return _dump(data)


MUTATIONS: dict[str, Callable[[str, random.Random], str | bytes | None]] = {
    "delete_key": delete_key,
    "rename_key": rename_key,
    "unknown_key": unknown_key,
    "retype": retype,
    "nan": _set_number(lambda v: math.nan),
    "inf": _set_number(lambda v: random.choice([math.inf, -math.inf])),
    "huge": _set_number(lambda v: random.choice([1e30, 2**64, 1e300])),
    "negative": _set_number(lambda v: -abs(v) - 1),
    "fractional": _set_number(lambda v: v + 0.5 if isinstance(v, int) else v * 1.5),
    "zero": _set_number(lambda v: 0),
    "bad_unit": bad_unit,
    "date_value": date_value,
    "non_text_key": non_text_key,
    "duplicate_key": duplicate_key,
    "truncate": truncate,
    "invalid_yaml": invalid_yaml,
    "binary": binary,
    "alias_bomb": alias_bomb,
    "self_alias": self_alias,
    "deep_nesting": deep_nesting,
}


# -- running a case -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One mutant: the shipped file, the mutation, and the seed that made it."""

    file: str
    mutation: str
    seed: int


@dataclass(frozen=True)
class Result:
    case: Case
    outcome: str
    detail: str
    seconds: float


def sandbox() -> Path:
    """A copy of the data folders, where a mutant replaces one file and the paths it names resolve."""
    root = Path(tempfile.mkdtemp(prefix="sn40l_fuzz_"))
    for folder in FOLDERS:
        (root / folder).mkdir(parents=True, exist_ok=True)
        for path in (REPO / folder).glob("*.yaml"):
            shutil.copy(path, root / folder / path.name)
    # the request traces experiments name (not mutated: check reads them as the run does)
    shutil.copytree(REPO / TRACES, root / TRACES, dirs_exist_ok=True)
    return root


def make_mutant(case: Case) -> str | bytes | None:
    """The mutated content of ``case.file`` (None when the mutation does not apply to it)."""
    text = (REPO / case.file).read_text(encoding="utf-8")
    rng = random.Random(case.seed)
    random.seed(case.seed)   # the number mutations draw their value from the module's generator
    return MUTATIONS[case.mutation](text, rng)


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in this thread after ``seconds`` (SIGALRM; POSIX, main thread)."""
    def expire(signum, frame):
        raise Hang()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_command(argv: list[str], timeout_s: float) -> tuple[int | str, str]:
    """``(exit status or what went wrong, stderr)`` of the CLI in this process."""
    err, out = io.StringIO(), io.StringIO()
    template._load.cache_clear()   # a mutated template at the same path must be read again
    try:
        with time_limit(timeout_s), contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            status: int | str = cli.main(argv)
    except Hang:
        status = "hang"
    except MemoryError:
        status = "memory"
    except SystemExit as exc:    # argparse
        status = int(exc.code or 0)
    except Exception:  # noqa: BLE001 - what this harness counts
        status = "traceback"
        err.write(traceback.format_exc())
    return status, err.getvalue()


def classify(case: Case, status: int | str, err: str) -> tuple[str, str]:
    """The outcome (one of :data:`OUTCOMES`) and a one-line detail."""
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning:")]
    if status == "traceback":
        return "Python traceback", (lines[-1] if lines else "")[:300]
    if status == "hang":
        return "hang", ""
    if status == "memory":
        return "out of memory", ""
    if status == 2:
        return ("exit 2, one line" if len(lines) == 1 and lines[0].startswith("error: ") else
                "exit 2, several lines"), (lines[0] if lines else "")[:300]
    if status == 0:
        return ("accepted: should have been refused" if case.mutation in ALWAYS_INVALID else
                "accepted (may be valid)"), ""
    return "other exit status", f"{status}: {(lines[0] if lines else '')[:300]}"


def run_case(root: Path, case: Case, command: str = "check", timeout_s: float = 20.0) -> Result | None:
    """Write the mutant into the sandbox, run ``command`` on it, put the original back."""
    mutant = make_mutant(case)
    if mutant is None:
        return None
    target = root / case.file
    original = target.read_bytes()
    try:
        if isinstance(mutant, bytes):
            target.write_bytes(mutant)
        else:
            target.write_text(mutant, encoding="utf-8")
        argv = [command, str(target)]
        if command == "run":
            argv += ["--out", str(root / "out"), "--quiet"]
        start = time.perf_counter()
        status, err = run_command(argv, timeout_s)
        outcome, detail = classify(case, status, err)
        return Result(case, outcome, detail, time.perf_counter() - start)
    finally:
        target.write_bytes(original)


def case_stream(seed: int) -> Iterator[Case]:
    """Cases spread evenly over the shipped files and the mutations, round after round, endlessly."""
    rng = random.Random(seed)
    pairs = [(f, m) for f in SHIPPED for m in MUTATIONS]
    while True:
        rng.shuffle(pairs)
        for f, m in pairs:
            yield Case(f, m, rng.randrange(2**31))


def cases(n: int, seed: int) -> list[Case]:
    """The first ``n`` cases of :func:`case_stream`."""
    stream = case_stream(seed)
    return [next(stream) for _ in range(n)]


# -- the summary --------------------------------------------------------------------------------

def summary(results: list[Result], title: str) -> str:
    """Markdown tables: outcomes, then outcomes by mutation."""
    counts = Counter(r.outcome for r in results)
    total = len(results)
    lines = [f"**{title}**: {total} mutants", "", "| outcome | count | share |", "|---|---:|---:|"]
    for outcome in OUTCOMES:
        lines.append(f"| {outcome} | {counts.get(outcome, 0):,} | {counts.get(outcome, 0) / max(1, total):.1%} |")
    by: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        by[r.case.mutation][r.outcome] += 1
    short = {"exit 2, one line": "2, one line", "exit 2, several lines": "2, lines", "Python traceback": "traceback",
             "hang": "hang", "out of memory": "memory", "accepted (may be valid)": "accepted",
             "accepted: should have been refused": "accepted, invalid", "other exit status": "other"}
    lines += ["", "| mutation | " + " | ".join(short[o] for o in OUTCOMES) + " |",
              "|---|" + "---:|" * len(OUTCOMES)]
    for mutation in MUTATIONS:
        if by[mutation]:
            lines.append(f"| {mutation} | " + " | ".join(str(by[mutation].get(o, 0)) for o in OUTCOMES) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the cases, print the tables (and the worst cases), optionally write them to a file."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=positive_int, default=10000, help="mutants through check (default: %(default)s)")
    parser.add_argument("--run", type=int, default=0, metavar="N",
                        help="also put N of the experiment mutants check accepted through run")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per case before it counts as a hang")
    parser.add_argument("--memory-gib", type=float, default=3.0, help="address-space limit of this process")
    parser.add_argument("--markdown", type=Path, default=None, help="write the tables to this file")
    args = parser.parse_args(argv)
    limit = int(args.memory_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    root = sandbox()
    results: list[Result] = []
    started = time.perf_counter()
    for case in case_stream(args.seed):   # until n mutants ran (a mutation that does not apply is skipped)
        result = run_case(root, case, "check", args.timeout)
        if result is None:
            continue
        results.append(result)
        if len(results) % 250 == 0:
            print(f"{len(results)} mutants, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        if len(results) == args.cases:
            break
    report = [summary(results, "check")]
    worst = [r for r in results if r.outcome not in ("exit 2, one line", "accepted (may be valid)")]
    if worst:
        report += ["", "Cases other than one line or a possibly valid file:", ""]
        report += [f"- `{r.case.file}` {r.case.mutation} (seed {r.case.seed}): {r.outcome}. {r.detail}"
                   for r in worst[:40]]
    if args.run:
        # the experiments run takes (a sweep's runs are the same points; map's experiment has no workload)
        runnable = ("experiments/deepseek_tp16.yaml", "experiments/llama8b_node8.yaml",
                    "experiments/snapstream_table5.yaml")
        accepted = [r.case for r in results if r.outcome.startswith("accepted") and r.case.file in runnable]
        accepted = accepted[: args.run]
        ran = [x for x in (run_case(root, case, "run", args.timeout * 6) for case in accepted) if x is not None]
        report += ["", summary(ran, "run, on the experiment mutants check accepted")]
        refused = [r for r in ran if r.outcome.startswith("exit 2")]
        report += ["", f"{len(refused)} of {len(ran)} mutants check accepted were refused by run"
                   + (":" if refused else ".")]
        report += [f"- `{r.case.file}` {r.case.mutation} (seed {r.case.seed}): {r.detail}" for r in refused[:20]]
    report.append(f"\n{len(results)} cases in {time.perf_counter() - started:.0f} s (seed {args.seed}).")
    text = "\n".join(report)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
