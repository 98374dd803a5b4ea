"""Fuzzing the promise "bad input of any kind stops with one line naming the file, the field and what
was expected, and exit status 2": mutants of every shipped YAML file through ``check`` (and, with
``--run``, the accepted experiment mutants through ``run``), with a summary of the outcomes.

A mutant is one shipped file (``hw_configs/``, ``graphs/``, ``experiments/``,
``experiments/reference/``) changed by one mutation (:data:`MUTATIONS`, in :mod:`fuzz_mutations`):
a key deleted or renamed, a value retyped, a number made NaN, infinite, huge, negative or
fractional, a quantity given a wrong or extreme unit, a date or a non-text key written in, the text
truncated, made invalid YAML or binary, an alias bomb, a self-referencing alias or deep nesting. Each mutant sits in a copy of the data
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
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sn40l_sim.commands import cli  # noqa: E402
from sn40l_sim.commands.argtypes import positive_float, positive_int  # noqa: E402
from sn40l_sim.errors import InputError  # noqa: E402
from sn40l_sim.report.outputs import check_file  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))   # fuzz_mutations, beside this file
from fuzz_mutations import ALWAYS_INVALID, MUTATIONS  # noqa: E402

FOLDERS = ("hw_configs", "graphs", "experiments", "experiments/reference")
#: the folder of request traces the shipped experiments name
TRACES = "experiments/traces"
SHIPPED = tuple(sorted(p.relative_to(REPO).as_posix() for folder in FOLDERS for p in (REPO / folder).glob("*.yaml")))

OUTCOMES = ("exit 2, one line", "exit 2, several lines", "Python traceback", "hang", "out of memory",
            "accepted (may be valid)", "accepted: should have been refused", "other exit status")

class Hang(Exception):
    """The time limit of one case ran out."""


# -- running a case -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One mutant: the shipped file, the mutation, and the seed that made it."""

    file: str
    mutation: str
    seed: int


@dataclass(frozen=True)
class Result:
    """What one case gave: its outcome (one of :data:`OUTCOMES`), the line that says why, and how
    long it took."""

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
    return MUTATIONS[case.mutation](text, random.Random(case.seed))


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


def _count(text: str) -> int:
    """An argparse type: a whole number of at least 0 (``--run``: ``accepted[:-1]`` would run all but one)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 0, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Run the cases, print the tables (and the worst cases), optionally write them to a file."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=positive_int, default=10000, help="mutants through check (default: %(default)s)")
    parser.add_argument("--run", type=_count, default=0, metavar="N",
                        help="also put N of the experiment mutants check accepted through run")
    parser.add_argument("--seed", type=int, default=17)
    # positive and finite: a timeout of 0 or less made every case's timer fail, counted as the
    # simulator's traceback; a negative limit is RLIM_INFINITY, no limit at all
    parser.add_argument("--timeout", type=positive_float, default=20.0,
                        help="seconds per case before it counts as a hang")
    parser.add_argument("--memory-gib", type=positive_float, default=3.0, help="address-space limit of this process")
    parser.add_argument("--markdown", type=Path, default=None, help="write the tables to this file")
    args = parser.parse_args(argv)
    if args.markdown is not None:
        try:   # before the cases, not after hours of them: a folder or an unwritable place
            check_file(args.markdown, "--markdown")
        except InputError as exc:
            parser.error(str(exc))
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
