"""The socket checks of ``calibrate`` and ``validate``: the experiments they simulate must run on the
socket of their ``--hardware`` (but for the calibrated values, for ``calibrate``), else the values a
fit finds, or the figures a table shows, would be of another socket than the one named."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sn40l_sim.errors import InputError
from sn40l_sim.hardware.spec import SocketSpec, calibrated_parameters


def check_fitted_hardware(socket: SocketSpec, hardware: Path, simulated: dict[Path, list[SocketSpec]]) -> None:
    """Refuse a fit whose calibration experiments run on another socket than ``hardware``'s.

    The fit simulates each calibration experiment on the hardware that experiment names, with only
    the calibrated parameters overridden, so the values it finds (and ``--write`` writes into
    ``hardware``) would be those of that other socket.

    ``simulated``: each calibration experiment -> the sockets its runs simulate.

    Raises
    ------
    InputError
        At ``--hardware``, naming the experiment and the first field that differs.
    """
    fitted = calibrated_parameters(socket)
    _refuse_another_socket(socket, simulated, lambda data: _uncalibrated(data, fitted), lambda experiment, field: (
        f"the calibration experiment {experiment} runs on a socket that differs from {hardware}'s in {field}: "
        f"the fit would be of that socket, not of {hardware} (calibrate fits the hardware the reference "
        "experiments name)"))


def check_validated_hardware(socket: SocketSpec, hardware: Path, simulated: dict[Path, list[SocketSpec]]) -> None:
    """Refuse a ``validate --hardware`` whose socket is not the one the reference experiments run on
    (``simulated`` as for :func:`check_fitted_hardware`): ``validate`` simulates each experiment on the
    hardware it names, as it is, and ``--hardware`` only names the calibrated values the leave-one-out
    column is checked against. An edited copy (twice the HBM rate) printed the shipped machine's figures."""
    _refuse_another_socket(socket, simulated, lambda data: data, lambda experiment, field: (
        f"the reference experiment {experiment} runs on a socket that differs from {hardware}'s in {field}: "
        f"validate simulates the hardware each experiment names, so its figures would not be {hardware}'s "
        "(--hardware only names the calibrated values the leave-one-out column must match; run an experiment "
        "on the changed hardware, or `run --set hardware.<field>=...`, and `compare`)"))


def _refuse_another_socket(socket: SocketSpec, simulated: dict[Path, list[SocketSpec]],
                           compared: Callable[[dict], dict], why: Callable[[Path, str], str]) -> None:
    """Raise an InputError at ``--hardware`` saying ``why`` of the first experiment of ``simulated`` whose
    socket differs from ``socket`` in what ``compared`` keeps of a socket's data, and of that field."""
    unsimulated = {"name", "stated"}   # no figure reads them, and a hypothetical socket nulls its totals
    mine = compared(socket.model_dump(mode="json", exclude=unsimulated))
    for experiment, other in ((path, s) for path, sockets in simulated.items() for s in sockets):
        field = _first_difference(mine, compared(other.model_dump(mode="json", exclude=unsimulated)))
        if field is not None:
            raise InputError(why(experiment, field), field="--hardware")


def _uncalibrated(data: dict, fitted: dict) -> dict:
    """A socket's data without its calibrated parameters (dotted paths under the socket)."""
    data = dict(data)
    for name in fitted:
        *parents, last = name.split(".")
        holder = data
        for part in parents:   # copied on the way down: the caller's data is left as it was
            if not isinstance(holder.get(part), dict):   # a socket without that tier (SN30 has no HBM):
                break                                   # the difference is then the tier, named by the caller
            holder[part] = dict(holder[part])
            holder = holder[part]
        else:
            holder.pop(last, None)
    return data


def _first_difference(a: object, b: object, path: str = "") -> str | None:
    """The dotted path of the first value in which ``a`` and ``b`` differ (None: equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            found = _first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
        return None
    return None if a == b else (path or "the socket")
