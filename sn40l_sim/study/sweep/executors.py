"""Where a sweep's runs execute: in this process, in a local process pool, or on a Dask cluster.

Every choice is a standard :class:`concurrent.futures.Executor`, so :mod:`.run` drives them all with
one loop:

- ``jobs=1`` and no scheduler: :class:`InlineExecutor`, each run in this process as it is submitted;
- ``jobs=N``: a :class:`~concurrent.futures.ProcessPoolExecutor` of ``N`` processes (default: the
  number of CPUs), started anew when a worker dies (:class:`RenewedPool`);
- a scheduler (``--scheduler``, else the ``SN40L_SIM_SCHEDULER`` environment variable): Dask
  distributed's ``Client.get_executor()``. ``local`` starts a ``LocalCluster`` of ``N`` one-thread
  worker processes on this machine (the simulator is pure Python: threads would share one
  interpreter lock); an address such as ``tcp://host:8786`` connects to a running scheduler
  (``docs/distributed.md``).

Dask is an optional extra (``pip install -e ".[cluster]"``) imported only when a scheduler is asked
for; without it, asking for one is an :class:`~sn40l_sim.errors.InputError` saying what to install.

Examples
--------
>>> with open_executor(jobs=1, scheduler=None, runs=3) as (executor, window):
...     type(executor).__name__, window(), executor.submit(pow, 2, 10).result()
('InlineExecutor', 1, 1024)
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from numbers import Integral
from typing import Any

from sn40l_sim.errors import InputError

#: the environment variable read when no ``--scheduler`` is given
SCHEDULER_ENV = "SN40L_SIM_SCHEDULER"
#: what to install for ``--scheduler``
INSTALL_HINT = 'pip install -e ".[cluster]" (or pip install distributed)'
#: seconds to wait for a scheduler to answer before giving up
CONNECT_TIMEOUT_S = 20


class SchedulerLost(InputError):
    """The Dask scheduler a sweep runs on went away mid-sweep (stopped, crashed, its network lost):
    one line naming it (exit status 2, as a scheduler that does not answer at the start), to which
    the sweep adds the runs it kept for ``--resume``, not Dask's client traceback."""


class InlineExecutor(cf.Executor):
    """Runs each task in this process when it is submitted: ``--jobs 1`` goes through the same
    loop as the pools, with no process to start and no pickling."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        """Run ``fn(*args, **kwargs)`` now; the returned future holds its result or exception."""
        future: cf.Future = cf.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - handed to the caller through the future, as a pool does
            future.set_exception(exc)
        return future


class RenewedPool(cf.Executor):
    """A process pool that starts a new one when a worker has died: a worker killed outright (the
    out-of-memory killer, a kill -9) breaks a :class:`~concurrent.futures.ProcessPoolExecutor` for
    good, and the next run submitted stopped the sweep with a ``BrokenProcessPool`` traceback. The
    runs in flight then fail (:data:`~.run.WORKER_DIED`) and the others run on the new pool."""

    def __init__(self, start: Callable[[], cf.ProcessPoolExecutor]) -> None:
        self._start = start
        #: the pool the runs are submitted to now
        self.current = start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        """Submit to the current pool, or to a new one when a worker of the current one died."""
        # imported here, where a process pool is running: the module (and multiprocessing) took
        # 8-12 ms of CPU of every ``run`` and ``validate``, which import this module but start no pool
        from concurrent.futures.process import BrokenProcessPool

        try:
            return self.current.submit(fn, *args, **kwargs)
        except BrokenProcessPool:
            stop_workers(self.current)
            self.current = self._start()
            return self.current.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Shut the current pool down."""
        self.current.shutdown(wait=wait, cancel_futures=cancel_futures)


def resolve_scheduler(scheduler: str | None) -> tuple[str | None, str]:
    """``(scheduler, where it came from)``: the argument, else :data:`SCHEDULER_ENV`, else none.

    >>> resolve_scheduler("local")
    ('local', '--scheduler')
    """
    if scheduler:
        return scheduler, "--scheduler"
    from_env = os.environ.get(SCHEDULER_ENV, "").strip()
    return (from_env, SCHEDULER_ENV) if from_env else (None, "--scheduler")


def import_distributed(field: str = "--scheduler") -> Any:
    """The ``distributed`` module, or an :class:`InputError` at ``field`` naming what to install."""
    try:
        import distributed
    except ImportError:
        raise InputError(f"running on a Dask scheduler needs the cluster extra, which is not installed: "
                         f"{INSTALL_HINT}", field=field) from None
    return distributed


def check_scheduler(scheduler: str | None, field: str = "--scheduler") -> None:
    """Refuse, before anything starts, a scheduler that is neither ``local`` nor an address Dask
    can parse (a known scheme, a host and a port): Dask would say so only when the sweep connects,
    after its output folder and progress bar. Whether the scheduler answers is left to the connection.

    Raises
    ------
    InputError
        At ``field``, for a malformed address, or when Dask distributed is not installed.
    """
    if scheduler is None:
        return
    distributed = import_distributed(field)
    if scheduler == "local":
        return
    try:
        _, port = distributed.comm.get_address_host_port(scheduler)
    except NotImplementedError:   # a scheme without host and port (inproc, ucx): the connection checks it
        return
    except (ValueError, TypeError) as exc:
        raise InputError(f"expected local or a Dask scheduler address such as tcp://host:8786, got "
                         f"{scheduler!r}: {exc}", field=field) from None
    if not 0 < port < 65536:   # else 20 s of connection attempts to an address no socket can have
        raise InputError(f"expected local or a Dask scheduler address such as tcp://host:8786, got {scheduler!r}: "
                         f"port {port} is not from 1 to 65535", field=field)


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity, which a container or ``taskset`` narrows;
    ``os.cpu_count`` counts the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_jobs(jobs: int | None) -> None:
    """Refuse a ``--jobs`` (``run_sweep``'s ``jobs``) that is not a whole number of processes >= 1:
    from Python, 0 and -1 ran the sweep in this process unsaid, and "2" or 1.5 raised a TypeError
    from inside."""
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, Integral) or jobs < 1):
        raise InputError(f"expected a positive number of processes, got {jobs!r}", field="--jobs")


def usable_jobs(jobs: int | None, scheduler: str | None) -> int | None:
    """``jobs``, or the CPUs available when it asks for more processes on this machine (a warning
    says so): the runs are CPU-bound, so more processes only add memory, each importing the
    simulator, and ``--jobs 100000`` on a large sweep would try to start one per run. The sweep
    calls it before its progress bar starts, so the warning is a line of its own. A ``jobs`` that is
    not a count of processes is refused (:func:`check_jobs`: design_space.ipynb calls run_points,
    which calls this, directly)."""
    check_jobs(jobs)
    cpus = available_cpus()
    if jobs and jobs > cpus and resolve_scheduler(scheduler)[0] in (None, "local"):
        warnings.warn(f"--jobs {jobs}: this machine has {cpus} CPUs for this process; running {cpus} processes",
                      stacklevel=2)
        return cpus
    return jobs


@contextmanager
def open_executor(jobs: int | None, scheduler: str | None, runs: int,
                  say: Callable[[str], None] | None = None) -> Iterator[tuple[cf.Executor, Callable[[], int]]]:
    """The executor for ``runs`` runs, and a function giving how many runs to keep submitted at
    once: enough to keep every worker busy, few enough that a stopped sweep loses little and that
    runs are pickled as they are needed (a cluster's count follows the workers that join or leave).

    Parameters
    ----------
    jobs : int, optional
        Processes of the local pool, or workers of ``--scheduler local`` (default: the number of
        CPUs); ignored with a scheduler address (the cluster has its own workers).
    scheduler : str, optional
        ``local`` or a scheduler address; None reads :data:`SCHEDULER_ENV`.
    runs : int
        Runs to execute (no more processes than runs are started).
    say : callable, optional
        Where to say that a scheduler has no worker yet (the sweep waits for one; default: stderr),
        so that a bar that does not move is explained.

    The window function of a cluster asks its scheduler, and raises :class:`SchedulerLost` when
    the scheduler no longer answers.

    Raises
    ------
    InputError
        When a scheduler is asked for and Dask distributed is not installed, or the scheduler
        cannot be reached.
    """
    jobs = usable_jobs(jobs, scheduler)
    scheduler, field = resolve_scheduler(scheduler)
    workers = max(1, min(jobs or available_cpus(), runs or 1))
    if scheduler is None:
        if workers == 1:
            yield InlineExecutor(), lambda: 1
            return
        pool = RenewedPool(lambda: cf.ProcessPoolExecutor(max_workers=workers, initializer=_worker_start,
                                                          initargs=(os.getpid(),)))
        try:
            yield pool, lambda: 2 * workers
        except BaseException:
            stop_workers(pool.current)   # Ctrl-C, SIGTERM or an error: not a minute of queued runs
            raise
        pool.shutdown(wait=True)
        return
    distributed = import_distributed(field)
    with _client(distributed, scheduler, workers, field) as client:
        if scheduler != "local" and not client.nthreads():
            (say or _stderr)(f"warning: {field}: the Dask scheduler at {scheduler!r} has no worker yet: the sweep "
                             f"waits for one to join (dask worker {scheduler} --nthreads 1; docs/distributed.md)")

        def window() -> int:
            # a round trip to the scheduler, asked as each run comes back: where a lost scheduler shows
            try:
                return 2 * max(1, sum(client.nthreads().values()))
            except (OSError, cf.CancelledError) as exc:   # CommClosedError, a reconnection timed out
                raise SchedulerLost(f"lost the Dask scheduler at {scheduler!r} mid-sweep ({type(exc).__name__}: "
                                    f"{exc}); expected it to answer until the sweep ends", field=field) from None

        # pure=False: every run is its own task (Dask would otherwise hash the arguments to share
        # results between equal calls, which costs time and which the runs never have)
        yield client.get_executor(pure=False), window


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


#: seconds between a worker's checks that the process that started it is alive
PARENT_POLL_S = 0.5


def _worker_start(parent: int) -> None:
    """What a pool's worker process does first: Ctrl-C is the main process's to handle (the whole
    process group receives it; a worker would otherwise print a traceback of its own), SIGTERM
    kills at once (:func:`stop_workers` sends it), and a watchdog thread ends the worker when its
    parent is gone (killed with SIGKILL, say), so that no worker outlives the sweep."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="sn40l-sim-parent-watchdog", daemon=True).start()


def stop_workers(pool: cf.ProcessPoolExecutor, timeout_s: float = 5.0) -> None:
    """Cancel what is queued and end the pool's worker processes now (SIGTERM, then SIGKILL for any
    still alive after ``timeout_s``), instead of letting the runs in flight finish."""
    # the pool keeps its processes in a private mapping (pid -> Process) since Python 3.2; without it
    # the shutdown below still cancels the queue
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)   # (shutdown forgets it)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + timeout_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join(1.0)
    # the pool's management thread closes its wake-up pipe as it ends; at interpreter exit
    # concurrent.futures wakes every such thread (``_python_exit``), and on Python 3.11 a wake-up
    # racing that close writes to a closed descriptor and prints a traceback ("Bad file descriptor")
    # under the one-line message: let the thread end first (with its workers gone it ends at once)
    if manager is not None:
        manager.join(timeout_s)


@contextmanager
def _client(distributed: Any, scheduler: str, workers: int, field: str) -> Iterator[Any]:
    if scheduler == "local":
        # no dashboard: several sweeps on one machine would fight over its port
        cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                           dashboard_address=None)
        try:
            with distributed.Client(cluster) as client:
                yield client
        finally:
            cluster.close()
        return
    try:
        client = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(f"cannot reach the Dask scheduler at {scheduler!r} (expected local or an address such "
                         f"as tcp://host:8786): {exc}", field=field) from None
    with client:
        yield client


__all__ = ["InlineExecutor", "RenewedPool", "SchedulerLost", "open_executor", "stop_workers", "resolve_scheduler", "import_distributed",
           "check_scheduler", "SCHEDULER_ENV", "INSTALL_HINT"]
