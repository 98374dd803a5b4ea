"""The calibration fit on the linearised simulator (study/linear_fit.py): it reaches the parameters
the previous solver (scipy's trust-region reflective least squares on the residuals, finite
differences at every iterate) reached, in fewer passes; it stays put where the simulator refuses
every step; the leave-one-out refits reuse its Jacobian; and a steps-only evaluation simulates a
point's prefill only when a measurement reads it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.hardware.spec import calibrated_parameters
from sn40l_sim.report.records import PREFILL_STEP_FIELDS
from sn40l_sim.report.results import stable
from sn40l_sim.study.calibration import (
    PRIOR_WEIGHT,
    FitResult,
    ParameterSpace,
    fit,
    leave_one_out,
    measured_residual,
)
from sn40l_sim.study.evaluation import LoadedExperiments
from sn40l_sim.study.linear_fit import forward_steps, trust_region_fit
from sn40l_sim.study.validation import Comparison, Measurement, Reference

REPO = Path(__file__).resolve().parents[2]
SOCKET = load_hardware(REPO / "hw_configs" / "sn40l.yaml").socket
HBM, SYSTOLIC, SYNC = "memory.hbm.efficiency", "calibrated.systolic_efficiency", "calibrated.sync_latency_s"


def reference(id: str, value: float, tolerance: dict) -> Reference:
    return Reference(Measurement(id=id, quantity=id, value=value, tolerance=tolerance, source="s",
                                 experiment="e.yaml", point="p", calibration=True), Path("e.yaml"))


def smooth(calibrated: dict[str, float]) -> dict[str, float]:
    """A smooth, nonlinear stand-in for the simulator: three quantities of three parameters."""
    hbm, systolic, sync = calibrated[HBM], calibrated[SYSTOLIC], calibrated[SYNC]
    return {"rate": 1000 * hbm ** 1.5 / (1 + 0.2 * systolic), "share": systolic / (systolic + hbm),
            "step": 1 / hbm + 4e4 * sync}


TRUTH = smooth({HBM: 0.7, SYSTOLIC: 0.8, SYNC: 10e-6})
REFS = [reference("rate", TRUTH["rate"], {"rel": 0.02}), reference("share", TRUTH["share"], {"abs": 0.01}),
        reference("step", TRUTH["step"], {"rel": 0.01})]
#: the step as a range instead: inside it only the prior pulls
RANGED = [*REFS[:2], reference("step", TRUTH["step"], {"range": [TRUTH["step"] - 0.02, TRUTH["step"] + 0.02]})]


def evaluate_with(simulator):
    def evaluate(references, calibrated):
        values = simulator(calibrated)
        return [Comparison(r, values[r.measurement.quantity]) for r in references]
    return evaluate


def previous_fit(references: list[Reference], evaluate) -> tuple[np.ndarray, float]:
    """The fitted values and cost as the previous solver found them: scipy's trust-region
    reflective least squares on the same residuals and prior, a 2% finite-difference step at
    every iterate."""
    from scipy.optimize import least_squares

    space = ParameterSpace(SOCKET)
    u0 = space.to_unit(space.start)

    def residuals(u):
        comps = evaluate(references, space.values(u))
        measured = [measured_residual(c.reference.measurement, c.simulated) for c in comps]
        return np.concatenate([np.array(measured, dtype=float), PRIOR_WEIGHT * (u - u0)])

    solution = least_squares(residuals, u0, bounds=(0.0, 1.0), diff_step=0.02, x_scale=1.0, method="trf")
    return space.from_unit(solution.x), float(solution.cost)


def test_the_fit_reaches_the_previous_solvers_parameters_in_fewer_passes():
    evaluate = evaluate_with(smooth)
    passes: list[int] = []
    result = fit(REFS, SOCKET, evaluate, max_evaluations=60, progress=lambda n, cost: passes.append(n))
    previous_passes: list[int] = []
    before, cost = previous_fit(REFS, lambda refs, calibrated: previous_passes.append(1) or evaluate(refs, calibrated))
    assert np.allclose(result.fitted, before, rtol=1e-3, atol=0)
    assert result.cost == pytest.approx(cost, rel=1e-3)
    fitted = dict(zip(result.names, result.fitted, strict=True))
    assert fitted[HBM] == pytest.approx(0.70, abs=0.01) and fitted[SYNC] == pytest.approx(10e-6, rel=0.05)
    assert result.passes == len(passes) <= len(previous_passes) / 2   # 26 against 56
    assert all(c.ok for c in result.comparisons)


def test_inside_a_range_the_fit_goes_as_far_as_the_prior_lets_it():
    # only the prior acts inside the range, so the best sync latency is on the range's edge
    # nearest its YAML value (9.5 us); the previous solver stopped short of it, inside
    evaluate = evaluate_with(smooth)
    result = fit(RANGED, SOCKET, evaluate, max_evaluations=60)
    _, cost = previous_fit(RANGED, evaluate)
    assert result.cost <= cost
    assert dict(zip(result.names, result.fitted, strict=True))[SYNC] == pytest.approx(9.5e-6, rel=1e-3)


def jump(calibrated: dict[str, float]) -> dict[str, float]:
    """Sits on a jump, as the shipped calibration does (a mapper plan switching with the HBM
    efficiency): any move of the HBM efficiency off its YAML value costs a 10% step in the rate,
    while the smooth part pulls the other way."""
    start = SOCKET.memory["hbm"].efficiency
    hbm = calibrated[HBM]
    return {"rate": 1000 * hbm * (1.1 if hbm != start else 1.0), "share": 0.5, "step": 1.0}


def test_a_fit_on_a_jump_stays_at_its_start_in_a_few_passes():
    refs = [reference("rate", 1000 * SOCKET.memory["hbm"].efficiency * 1.03, {"rel": 0.02})]
    result = fit(refs, SOCKET, evaluate_with(jump), max_evaluations=60)
    start = dict(zip(result.names, result.start, strict=True))
    assert dict(zip(result.names, result.fitted, strict=True)) == start   # written back, the YAML is unchanged
    # the start, one pass per parameter, and the refused steps down to the Jacobian's resolution
    assert result.passes <= 1 + len(result.names) + 3


def test_the_fits_start_simulates_the_yamls_values_to_the_last_digit():
    # 0.9365 - 0.3 over the HBM efficiency's span 0.7, and back, is 0.9365000000000001: the start pass
    # simulated that, the other side of a jump from the YAML's 0.9365 (as the jump above shows)
    low, high = calibrated_parameters(SOCKET)[HBM].low, calibrated_parameters(SOCKET)[HBM].high
    assert low + (0.9365 - low) / (high - low) * (high - low) != 0.9365
    hbm = SOCKET.memory["hbm"].model_copy(update={"efficiency": 0.9365})
    socket = SOCKET.model_copy(update={"memory": {**SOCKET.memory, "hbm": hbm}})
    space = ParameterSpace(socket)
    values = space.values(space.to_unit(space.start))
    assert values == dict(zip(space.names, map(float, space.start), strict=True)) and values[HBM] == 0.9365
    moved = space.to_unit(space.start)
    moved[space.names.index(HBM)] += 0.01
    assert space.values(moved)[HBM] == pytest.approx(0.9365 + 0.007, rel=1e-12)


def linear(calibrated: dict[str, float]) -> dict[str, float]:
    return {"rate": 1000 * calibrated[HBM] + 200 * calibrated[SYSTOLIC], "share": 0.6 * calibrated[SYSTOLIC],
            "step": 1e5 * calibrated[SYNC] + calibrated[HBM]}


def test_leave_one_out_reuses_the_fits_jacobian():
    evaluate = evaluate_with(linear)
    result = fit(REFS, SOCKET, evaluate, max_evaluations=60)
    reused = leave_one_out(result, SOCKET)
    remeasured = leave_one_out(FitResult(result.names, result.start, result.fitted, result.comparisons,
                                         result.cost), SOCKET, evaluate)
    assert reused.keys() == {"rate", "share", "step"}
    # a linear simulator has one Jacobian wherever it is measured
    assert reused == pytest.approx(remeasured, rel=1e-6)
    with pytest.raises(ValueError, match="needs evaluate"):
        leave_one_out(FitResult(result.names, result.start, result.fitted, result.comparisons, result.cost), SOCKET)


def test_trust_region_fit_keeps_to_its_budget_and_the_unit_box():
    target = np.array([1.4, -0.2])   # outside the box: the fit ends on its faces
    calls = []

    def simulate(u):
        calls.append(u.copy())
        return u.copy()

    found = trust_region_fit(simulate, lambda v, u: (v - target) / 0.01, np.array([0.5, 0.5]), max_passes=9)
    assert found.passes == len(calls) <= 9
    assert all(((0 <= u) & (u <= 1)).all() for u in calls)
    assert forward_steps(np.array([0.0, 1.0])).tolist() == [0.01, -0.01]
    with pytest.raises(ValueError, match="at least 3 passes"):
        trust_region_fit(simulate, lambda v, u: v, np.array([0.5, 0.5]), max_passes=2)


def test_a_fit_says_why_it_stopped():
    # calibrate printed a fit its budget stopped before any step as 'fitted', like a converged one
    target = np.array([0.3, 0.9])
    residuals = lambda v, u: (v - target) / 0.01   # noqa: E731
    spent = trust_region_fit(lambda u: u.copy(), residuals, np.array([0.5, 0.5]), max_passes=3)
    assert spent.stopped == "budget" and spent.u.tolist() == [0.5, 0.5] and spent.passes == 3
    done = trust_region_fit(lambda u: u.copy(), residuals, np.array([0.5, 0.5]), max_passes=40)
    assert done.stopped == "converged" and np.allclose(done.u, target)
    on_jump = fit([reference("rate", 1000 * SOCKET.memory["hbm"].efficiency * 1.03, {"rel": 0.02})], SOCKET,
                  evaluate_with(jump), max_evaluations=60)
    assert on_jump.stopped == "resolution" and on_jump.fitted == on_jump.start


def test_a_steps_only_evaluation_simulates_only_the_prefills_it_is_asked_for():
    loaded = LoadedExperiments()
    path = REPO / "experiments" / "llama8b_node8.yaml"
    every = {r["name"]: stable(r) for r in loaded.records(path, serve=False)}
    some = {r["name"]: stable(r) for r in loaded.records(path, serve=False, reads_prefill=["snapstream"])}
    assert some["snapstream"] == every["snapstream"]
    skipped, full = some["full"], every["full"]
    assert all(skipped[f] is None for f in PREFILL_STEP_FIELDS) and skipped["utilisation"]["prefill_step"] is None
    differing = {k for k in full if skipped[k] != full[k]}
    assert differing == {*PREFILL_STEP_FIELDS, "utilisation"}
    assert skipped["utilisation"]["decode_step"] == full["utilisation"]["decode_step"]
    with pytest.raises(ValueError, match="serve=False"):
        loaded.records(path, reads_prefill=[])


def test_an_evaluation_simulates_only_the_points_it_reads():
    loaded = LoadedExperiments()
    path = REPO / "experiments" / "llama8b_node8.yaml"
    every = {r["name"]: stable(r) for r in loaded.records(path, serve=False)}
    some = [stable(r) for r in loaded.records(path, serve=False, reads=["snapstream"])]
    assert len(every) > 1 and [r["name"] for r in some] == ["snapstream"]
    assert some[0] == every["snapstream"]
    sweep = REPO / "experiments" / "kernel_looping.yaml"
    name = "full[model=llama3_1_8b,sockets=8,tp_prefill=8,tp=8,looping=true]"
    assert [r["name"] for r in loaded.records(sweep, serve=False, reads=[name], reads_prefill=())] == [name]


def test_an_evaluation_overrides_the_prefill_nodes_of_prefill_hardware_too():
    # calibrate's overrides reached the decode node only: a prefill on prefill_hardware's nodes (the
    # same SN40L socket) kept the YAML's values, so a measured prefill moved nothing (a fit of it
    # 'converged' at its start, every finite difference the same cost), where `run --set` and
    # assemble change both nodes
    from sn40l_sim.study.assemble import assemble
    from sn40l_sim.study.runner import simulate_assembly

    path = REPO / "experiments" / "hetero_nodes.yaml"
    name = "full[prefill_nodes=one_prefill_node]"
    slower = {"socket.calibrated.systolic_efficiency": 0.5}
    loaded = LoadedExperiments()
    as_is, overridden = (loaded.records(path, serve=False, hardware_overrides=o, reads=[name], reads_prefill=[name])[0]
                         for o in (None, slower))
    assert overridden["prefill_s"] > 1.5 * as_is["prefill_s"]
    run = next(r for r in loaded.load(path) if r.name == name)
    assembled = assemble(run.assembly.experiment, hardware_overrides=slower)
    expected = simulate_assembly(assembled, only=[run.point], serve=False)[0]
    assert overridden["prefill_s"] == expected["prefill_s"]
    assert overridden["prefill_hardware_digest"] == expected["prefill_hardware_digest"]
    assert {p: [s.name for s in sockets] for p, sockets in loaded.sockets([path]).items()} == {path: ["SN40L"] * 8}   # each run's two nodes


def two_wells(calibrated: dict[str, float]) -> dict[str, float]:
    """A rate whose misfit has two minima in the HBM efficiency: an exact one at 0.4 and a local one
    near 0.93, on the YAML's side (0.9439) of the ridge at about 0.70 between them."""
    hbm = calibrated[HBM]
    return {"rate": 100 * (hbm - 0.4) ** 2 * ((hbm - 0.95) ** 2 + 0.01), "share": 0.5, "step": 1.0}


def test_a_fit_from_several_starts_finds_the_minimum_a_fit_from_the_yaml_misses():
    refs = [reference("rate", 0.0, {"abs": 0.01})]
    evaluate = evaluate_with(two_wells)
    single = fit(refs, SOCKET, evaluate, max_evaluations=60)
    several = fit(refs, SOCKET, evaluate, max_evaluations=60, starts=4)
    # the Latin hypercube puts one of three starts below a third of the range (HBM efficiency < 0.53)
    assert dict(zip(single.names, single.fitted, strict=True))[HBM] == pytest.approx(0.93, abs=0.01)
    assert single.cost > 100 and not single.comparisons[0].ok
    assert dict(zip(several.names, several.fitted, strict=True))[HBM] == pytest.approx(0.4, abs=0.01)
    assert several.cost < 0.1 and several.comparisons[0].ok
    assert several.passes > single.passes
    # each start's final cost is kept, the YAML's first, and the one kept is the lowest (not the YAML's)
    assert len(several.start_costs) == 4 and several.start_costs[0] == pytest.approx(single.cost)
    assert several.kept_start != 0 and several.start_costs[several.kept_start] == several.cost == min(several.start_costs)
    assert single.start_costs == (single.cost,) and single.kept_start == 0
    again = fit(refs, SOCKET, evaluate, max_evaluations=60, starts=1)   # one start: the YAML's alone
    assert (again.fitted, again.cost, again.passes) == (single.fitted, single.cost, single.passes)
    with pytest.raises(ValueError, match="at least one start"):
        fit(refs, SOCKET, evaluate, starts=0)


def test_a_refit_leave_one_out_predicts_each_point_by_a_fit_of_the_others():
    from sn40l_sim.hardware.loader import load_hardware, with_overrides
    from sn40l_sim.study.leave_one_out import refit_leave_one_out

    asked: list[dict[str, float]] = []

    def evaluate(references, calibrated):
        asked.append(dict(calibrated))
        return evaluate_with(smooth)(references, calibrated)

    full = fit(REFS, SOCKET, evaluate, max_evaluations=60)
    node = load_hardware(REPO / "hw_configs" / "sn40l.yaml")
    fitted = with_overrides(node, {f"socket.{k}": v for k, v in zip(full.names, full.fitted, strict=True)}).socket
    asked.clear()
    predicted = refit_leave_one_out(REFS, fitted, evaluate, max_evaluations=60)
    assert predicted.keys() == {"rate", "share", "step"}
    for left in REFS:
        # the same prediction as a fit of the other two, from the same values, and the left-out point simulated there
        others = fit([r for r in REFS if r is not left], fitted, evaluate_with(smooth), max_evaluations=60)
        values = smooth(dict(zip(others.names, others.fitted, strict=True)))
        assert predicted[left.measurement.id] == pytest.approx(values[left.measurement.quantity], rel=1e-6)
    # every parameter set is simulated once, for all three points: the refits' shared start and Jacobian once
    keys = [tuple(sorted(a.items())) for a in asked]
    assert len(keys) == len(set(keys))
    # three quantities of three parameters: without one, the other two and the prior leave the third
    # free to move, so the prediction of the one left out is not its measurement
    assert any(abs(predicted[r.measurement.id] - r.measurement.value) > 1e-6 * abs(r.measurement.value) for r in REFS)


def test_a_refit_its_budget_stops_before_any_step_says_so_and_predicts_at_its_start():
    # `calibrate --leave-one-out refit --max-evaluations 7` printed every point 'predicted' within
    # tolerance by refits that had spent their 7 passes on the start and the Jacobian
    from sn40l_sim.study.leave_one_out import refit_leave_one_out

    evaluate = evaluate_with(smooth)
    budget = 1 + len(ParameterSpace(SOCKET).names)
    refits: dict[str, FitResult] = {}
    predicted = refit_leave_one_out(REFS, SOCKET, evaluate, max_evaluations=budget,
                                    progress=lambda point, simulated, refit: refits.__setitem__(point, refit))
    assert refits.keys() == predicted.keys() == {"rate", "share", "step"}
    assert all(r.stopped == "budget" and r.fitted == r.start for r in refits.values())
    at_start = smooth(dict(zip(refits["rate"].names, refits["rate"].start, strict=True)))
    assert predicted == {r.measurement.id: pytest.approx(at_start[r.measurement.quantity]) for r in REFS}


def test_the_side_the_cost_falls_is_read_from_the_fits_jacobian():
    # a parameter the measurements do not move sits where the prior holds it: no side falls; one a
    # measurement pulls past the box's edge falls that way
    import numpy as np

    from sn40l_sim.study.calibration import falling_sides
    from sn40l_sim.study.linear_fit import trust_region_fit

    target = np.array([1.4, 0.0])
    found = trust_region_fit(lambda u: np.array([u[0], 0.0]), lambda v, u: np.concatenate([(v - target) / 0.1,
                                                                                            0.3 * (u - 0.5)]),
                             np.array([0.5, 0.5]), max_passes=40)
    assert found.u[0] == pytest.approx(1.0) and found.u[1] == 0.5
    assert falling_sides(lambda v, u: np.concatenate([(v - target) / 0.1, 0.3 * (u - 0.5)]), found) == ("upper", "")


def test_a_residual_is_the_miss_in_units_of_the_measurements_band():
    # relative: 10% of 50 is a band of 5, so a simulated 60 misses by two bands and 47.5 by half
    # of one; absolute: a band of 0.02. Within the band |residual| <= 1
    rel = reference("r", 50.0, {"rel": 0.1}).measurement
    assert measured_residual(rel, 60.0) == pytest.approx(2.0) and measured_residual(rel, 47.5) == pytest.approx(-0.5)
    assert measured_residual(reference("a", 0.5, {"abs": 0.02}).measurement, 0.45) == pytest.approx(-2.5)
    # a range counts only its outside, in its half-widths: the band of a measurement at its middle
    ranged = reference("g", 2.0, {"range": (1.0, 3.0)}).measurement
    assert [measured_residual(ranged, v) for v in (2.9, 1.1)] == [0.0, 0.0]
    assert measured_residual(ranged, 4.0) == pytest.approx(1.0) and measured_residual(ranged, 0.5) == pytest.approx(-0.5)
