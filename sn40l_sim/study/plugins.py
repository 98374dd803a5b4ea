"""An experiment's ``plugins:``: Python modules imported before its policies are looked up, so a KV
policy written outside the package (a class under :func:`sn40l_sim.kvcache.register`) can be named
by ``policies[*].policy`` from the command line (docs/architecture.md, "Extending the simulator").

Each entry is a ``.py`` file, relative to the file that wrote it as every path of an experiment is,
or a dotted module name importable from ``sys.path`` (a package installed beside the simulator).
A file is imported once per process and content under a name derived from its resolved path:
loading the experiment again (each run of a sweep, ``check`` then ``run`` in one process) does not
run it again, and a file edited since (a notebook iterating on its policy) is imported again, its
classes replacing their earlier versions, rather than simulated as it was. While a file runs its
folder is on ``sys.path``, as a script's is, so it may import a helper module beside it. A sweep's worker
processes load the experiment, and with it the plug-ins, themselves.

A plug-in is code: loading the experiment runs it (``check`` and ``describe`` too). Anything its
import raises is bad input of the experiment: one line at ``plugins[i]`` naming the plug-in's file
and line where it failed, exit status 2, rather than a traceback from inside the loader.

>>> from pathlib import Path
>>> from sn40l_sim.yamlio import Document
>>> load_plugins(Document({"plugins": ["nowhere.py"]}, Path("exp.yaml"), {}), ("nowhere.py",))
Traceback (most recent call last):
...
sn40l_sim.errors.InputError: exp.yaml: plugins[0]: plug-in file 'nowhere.py' not found (looked for nowhere.py)
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
import traceback
from pathlib import Path
from types import ModuleType

from sn40l_sim.kvcache.base import PLUGIN_MODULES
from sn40l_sim.yamlio import Document, not_a_file

#: plug-in files imported in this process, by resolved path: the digest of the text imported, the module
_LOADED: dict[Path, tuple[str, ModuleType]] = {}
#: the files of the dotted plug-in modules imported in this process
_MODULE_FILES: set[str] = set()
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def load_plugins(doc: Document, entries: tuple[str, ...]) -> list[ModuleType]:
    """Import each plug-in the experiment ``doc`` lists (``entries``, the validated
    ``plugins:``), in order.

    Raises
    ------
    InputError
        At ``plugins[i]``: a file that does not exist, a name that is neither a ``.py`` file nor a
        dotted module name, or a module whose import raised (its file, line and message).
    """
    modules = []
    for i, entry in enumerate(entries):
        field = ("plugins", i)
        if is_file_entry(entry):
            path = doc.resolve(entry, field)
            if not path.is_file():
                raise doc.error(field, f"plug-in file {entry!r} {not_a_file(path)} (looked for {path})")
            modules.append(_import_file(doc, field, entry, path.resolve()))
        elif _DOTTED.fullmatch(entry):
            modules.append(_import_module(doc, field, entry))
        else:
            raise doc.error(field, f"expected a .py file (relative to this file) or a dotted module name, got {entry!r}")
    return modules


def plugin_digests(doc: Document, entries: tuple[str, ...]) -> list[str]:
    """A SHA-256 per entry of the code it runs: a file's bytes with those of every ``.py`` file
    beside it (it may import them, :func:`_import_file`), or an imported dotted module's file.

    A sweep's run key holds them (:func:`~sn40l_sim.study.sweep.plan.run_parameters`): it held the
    entries' paths only, so ``--resume`` after an edit to a plug-in served the records of the code
    as it was (a window halved in its ``cache_len`` still gave the old ``kv_len``). A file that
    cannot be read gives the digest of what could be read (loading the experiment reports it)."""
    digests = []
    for i, entry in enumerate(entries):
        if is_file_entry(entry):
            path = doc.resolve(entry, ("plugins", i)).resolve()
            # the modules beside it too: which of them it imports is known only by running it
            files = [path, *sorted(p for p in path.parent.glob("*.py") if p != path)]
        else:
            module_file = getattr(sys.modules.get(entry), "__file__", None)
            files = [Path(module_file)] if module_file else []
        digest = hashlib.sha256(entry.encode() + b"\0")
        for file in files:
            digest.update(file.name.encode() + b"\0")
            try:
                digest.update(file.read_bytes())
            except OSError:
                digest.update(b"unreadable")
            digest.update(b"\0")
        digests.append(digest.hexdigest())
    return digests


def is_file_entry(entry: str) -> bool:
    """Whether a ``plugins:`` entry names a file (a ``.py`` suffix or a folder in it) rather than a
    dotted module name."""
    return entry.endswith(".py") or "/" in entry or "\\" in entry


def _import_file(doc: Document, field: tuple, entry: str, path: Path) -> ModuleType:
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise doc.error(field, f"plug-in file {entry!r} cannot be read: {exc.strerror}") from None
    digest = hashlib.sha256(source).hexdigest()
    if path in _LOADED and _LOADED[path][0] == digest:
        return _LOADED[path][1]
    name = f"{PLUGIN_MODULES}{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}_{_digest(path)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise doc.error(field, f"plug-in file {entry!r} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    # in sys.modules while it runs, as an import does: dataclasses and pickling look the module up
    sys.modules[name] = module
    # its folder on the path while it runs, as for a script: a plug-in may import a module beside it
    sys.path.insert(0, str(path.parent))
    try:
        # the bytes just hashed, compiled here: the loader would read a __pycache__ file that Python
        # trusts by the source's size and whole-second mtime, stale after an edit within a second
        exec(compile(source, str(path), "exec"), module.__dict__)
    except (Exception, SystemExit) as exc:   # the plug-in's own failure, of any kind, is the experiment's bad
        # input; a sys.exit(0) in it ended check or run at once, with exit status 0 and no word
        del sys.modules[name]
        raise doc.error(field, f"importing plug-in {entry!r} failed: {_failure(exc, path)}") from None
    finally:
        sys.path.remove(str(path.parent))
    _LOADED[path] = (digest, module)
    return module


def plugin_failure(exc: BaseException) -> str | None:
    """One line for ``exc`` raised while the simulation ran a plug-in's code (a policy's
    ``__post_init__``, ``cache_len``, ``prefill_kernels``, ...): the plug-in's innermost file and
    line, its function and the message; None when no frame of its traceback is a plug-in's. The
    commands print it with exit status 2, as a failure while importing the plug-in is, rather than
    a traceback through the simulator's code."""
    files = {str(path) for path in _LOADED} | _MODULE_FILES
    own = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in files]
    if not own:
        return None
    return (f"{own[-1].filename}:{own[-1].lineno}: plug-in code raised {type(exc).__name__}: {exc} (in {own[-1].name}; "
            "docs/architecture.md, \"Extending the simulator\")")


def _import_module(doc: Document, field: tuple, entry: str) -> ModuleType:
    try:
        module = importlib.import_module(entry)
        if getattr(module, "__file__", None):
            _MODULE_FILES.add(module.__file__)
        return module
    except ModuleNotFoundError as exc:
        if exc.name is not None and (entry == exc.name or entry.startswith(exc.name + ".")):
            raise doc.error(field, f"no module named {entry!r} on the Python path (a plug-in file is written "
                                   "with its .py suffix, relative to this file)") from None
        raise doc.error(field, f"importing plug-in {entry!r} failed: {_failure(exc, None)}") from None
    except (Exception, SystemExit) as exc:
        raise doc.error(field, f"importing plug-in {entry!r} failed: {_failure(exc, None)}") from None


def _failure(exc: BaseException, path: Path | None) -> str:
    """``FILE:LINE: Type: message`` of where ``exc`` was raised: the plug-in's own line when the
    traceback passes through ``path`` (else its deepest frame), the offending line of a syntax error."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}: SyntaxError: {exc.msg}"
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if path is not None and Path(f.filename) == path]
    where = (own or frames)[-1] if frames else None
    text = f"{type(exc).__name__}: {exc}"
    return f"{where.filename}:{where.lineno}: {text}" if where is not None else text


def _digest(path: Path) -> str:
    return hashlib.sha256(str(path).encode()).hexdigest()[:12]
