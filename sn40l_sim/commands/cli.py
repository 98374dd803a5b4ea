"""Command-line interface: ``python -m sn40l_sim COMMAND ...``.

Each command lives in its own module under :mod:`sn40l_sim.commands` with ``add_arguments(parser)``
and ``run(args) -> int``; this file only dispatches. An :class:`~sn40l_sim.errors.InputError`
becomes one line on stderr and exit status 2, as does an exception raised in a KV-policy plug-in's
code (:func:`~sn40l_sim.study.plugins.plugin_failure`); an :class:`~sn40l_sim.errors.InvariantError` one line
naming the invariant and exit status 3; Ctrl-C and SIGTERM one line and exit status 130 and 143; a
warning (e.g. an old-style hardware file) one line ``warning: ...``.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import importlib
import os
import signal
import sys
import threading
import warnings

from sn40l_sim.errors import InputError, InvariantError, Terminated, shown

#: command name -> (module under sn40l_sim.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "describe": ("describe", "print the derived figures of a hardware, model, kernel-template, experiment, reference or request-trace file"),
    "check": ("check", "validate hardware, model, kernel-template, experiment, reference and trace files"),
    "run": ("run", "simulate an experiment's points and write results.json/csv and a plot"),
    "map": ("map", "place one phase's kernels on a socket: PCUs/PMUs, utilisation, bound, cycles"),
    "sweep": ("sweep", "run an experiment's sweep: section in parallel processes into one results.csv"),
    "plot": ("plot", "plot two columns of a results.csv, one line per --hue value"),
    "compare": ("compare", "two runs' results point by point, with the ratio of every figure"),
    "validate": ("validate", "print every reference measurement beside the simulated value and the error"),
    "calibrate": ("calibrate", "fit the hardware YAML's calibrated: parameters to the calibration measurements"),
    "golden": ("golden", "compare the key results of the experiments without a sweep with tests/golden/ (--update "
                         "rewrites them)"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; only ``command``'s module is imported (others stay unloaded so that a
    quick ``check`` does not pay for matplotlib or SimPy)."""
    parser = argparse.ArgumentParser(
        prog="python -m sn40l_sim",
        description="SN40L dataflow-accelerator simulator for LLM serving, with SnapStream KV compression.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        if name != command:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(f"sn40l_sim.commands.{module_name}")
        command_parser = sub.add_parser(name, help=help_text, description=module.__doc__,
                                        formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_module=module, _parser=command_parser)
    return parser


#: the collector's thresholds while a command runs (young objects, then the two older
#: generations). The young threshold is above the objects that importing a run's libraries leaves
#: (about 75,000 for the package with numpy and pydantic, as many again for matplotlib), which all
#: live to the end: at 50,000 a collection walked each import's and freed almost nothing (20-40
#: ms of a cold run)
GC_THRESHOLDS = (200_000, 20, 20)
#: errors of a device that takes no more bytes (standard output redirected to a full disk)
FULL_DEVICE = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
#: the commands that map kernels: in their process, what a kernel's search keeps goes to the
#: collector's oldest generation unexamined (``sn40l_sim.mapper.graph.PROMOTE_KEPT_OBJECTS``), a
#: process-wide move the library does not make for a host that embeds it
MAPPING_COMMANDS = frozenset({"run", "sweep", "map", "validate", "calibrate", "golden"})
#: exit statuses besides 0 (success) and 1 (failed checks or runs)
EXIT_INPUT, EXIT_INVARIANT, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 3, 130, 143


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 failed checks, 2 bad input, 3 a violated
    invariant, 130 Ctrl-C, 143 SIGTERM)."""
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    args, unknown = build_parser(command if command in COMMANDS else None).parse_known_args(argv)
    if unknown:   # named with the command's own usage, not the top level's
        args._parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    previous = warnings.formatwarning
    warnings.formatwarning = _warning_line
    thresholds = gc.get_threshold()
    # the mapper's memos hold hundreds of thousands of small objects that live for the whole
    # command; at Python's default the collector walks them again thousands of times (about 5% of
    # a cold run's CPU), and collecting less often costs a few MB
    gc.set_threshold(*GC_THRESHOLDS)
    mapper_graph, promoted = None, False
    try:
        with _sigterm_raises(), _files_only_backend():
            # imported in here: loading the mapper and its libraries is most of a second, and a
            # Ctrl-C then printed a 30-line KeyboardInterrupt traceback (SIGTERM: no line at all)
            if command in MAPPING_COMMANDS:
                mapper_graph = importlib.import_module("sn40l_sim.mapper.graph")
                promoted, mapper_graph.PROMOTE_KEPT_OBJECTS = mapper_graph.PROMOTE_KEPT_OBJECTS, True
            return int(args._module.run(args) or 0)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except InvariantError as exc:
        print(f"error: {exc} (a bug in the simulator: the run was stopped rather than report a wrong number)",
              file=sys.stderr)
        return EXIT_INVARIANT
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        detail = getattr(exc, "detail", "")
        print(f"{'terminated (SIGTERM)' if terminated else 'interrupted (Ctrl-C)'}: stopped"
              + (f"; {detail}" if detail else ""), file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    except BrokenPipeError:
        # output piped into `head` and closed early: not an error of ours
        sys.stderr.close()
        return 0
    except RuntimeError as exc:
        # Python 3.11's Path.resolve() raises RuntimeError, not OSError, at a loop of symbolic links
        # (`ln -s loop loop`, given as --out, --trace or an experiment): a traceback; a plug-in's own
        # RuntimeError stays the plug-in's
        looped = str(exc).removeprefix("Symlink loop from ") if str(exc).startswith("Symlink loop from ") else None
        if looped is None:
            return _plugin_failed(exc)
        print(f"error: {looped}: a loop of symbolic links; expected a path that leads to a file or folder",
              file=sys.stderr)
        return EXIT_INPUT
    except OSError as exc:
        if exc.errno == errno.ELOOP:   # the same loop met by open() or mkdir()
            print(f"error: {shown(exc.filename)}: a loop of symbolic links; expected a path that leads to a file or "
                  "folder", file=sys.stderr)
            return EXIT_INPUT
        if exc.errno == errno.ENAMETOOLONG:
            # a path longer than the file system takes, given on the command line or in a file: the
            # check of whether it is a file (pathlib's is_file) raised it in a traceback
            print(f"error: {shown(exc.filename)}: {exc.strerror}; expected a path the file system can hold "
                  f"(a name of at most {_name_max()} characters)", file=sys.stderr)
            return EXIT_INPUT
        if exc.errno not in FULL_DEVICE:
            return _plugin_failed(exc)
        # the printed output (files are written through report/outputs.py, which names them)
        # could not be written: a full disk or pipe target, said in one line
        print(f"error: cannot write the output: {exc.strerror}", file=sys.stderr)
        return EXIT_INPUT
    except (Exception, SystemExit) as exc:   # a plug-in's sys.exit(0) ended run with status 0 and no word
        return _plugin_failed(exc)
    finally:
        warnings.formatwarning = previous
        if mapper_graph is not None:
            # what the command kept goes to the oldest generation before the caller's thresholds
            # come back: at Python's default the next allocation walked it all (13 ms of a cold run)
            mapper_graph.promote_young()
            mapper_graph.PROMOTE_KEPT_OBJECTS = promoted
        gc.set_threshold(*thresholds)


def _plugin_failed(exc: BaseException) -> int:
    """Exit status 2 with one line for an exception a KV-policy plug-in's code raised while the
    command ran it (it is the experiment's code, as a failed import of it is); anything else is
    raised on, a traceback of a bug in the simulator."""
    from sn40l_sim.study.plugins import plugin_failure  # loaded only when something failed
    message = plugin_failure(exc)
    if message is None:
        raise exc
    print(f"error: {message}", file=sys.stderr)
    return EXIT_INPUT


def _name_max() -> int:
    """The longest file name the current folder's file system takes (255 on most)."""
    try:
        return os.pathconf(".", "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):   # pragma: no cover - not POSIX
        return 255


@contextlib.contextmanager
def _sigterm_raises():
    """While a command runs, SIGTERM raises :class:`Terminated` in the main thread (as Ctrl-C raises
    ``KeyboardInterrupt``), so the command stops its workers and marks its outputs; the previous
    handler comes back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _files_only_backend():
    """While a command runs, ``MPLBACKEND`` says ``agg`` to a matplotlib not yet imported. The
    commands draw files on the Agg canvas and open no window (:mod:`sn40l_sim.report.figure`), so
    the variable means nothing to them; but ``import matplotlib`` refuses one that names no backend
    (``MPLBACKEND=bogus``, a typo left in a CI job), which stopped ``run`` with a traceback after the
    whole simulation. Put back afterwards: a notebook or a test calling :func:`main` keeps its own."""
    previous = os.environ.get("MPLBACKEND")
    if previous is None or "matplotlib" in sys.modules:
        yield
        return
    os.environ["MPLBACKEND"] = "agg"
    try:
        yield
    finally:
        os.environ["MPLBACKEND"] = previous


def _warning_line(message, category, filename, lineno, line=None) -> str:
    """A warning as one line on stderr (the message names the file it is about)."""
    return f"warning: {message}\n"


if __name__ == "__main__":
    sys.exit(main())
