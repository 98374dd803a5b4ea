"""The mapper's memos and disk cache give the answers a cold computation gives."""
from __future__ import annotations

import random

import pytest
from conftest import deepseek_graph, distinct_kernels

import sn40l_sim.mapper.graph as graph_mod
from sn40l_sim.hardware.loader import with_overrides
from sn40l_sim.mapper import allocate, disk_cache, division, map_graph, map_kernel, planning, stage_limits
from sn40l_sim.mapper.graph import clear_memo, mapping_key
from sn40l_sim.mapper.keys import UNMAPPED_CALIBRATED, UNPLANNED_CALIBRATED, socket_key
from sn40l_sim.mapper.work import GemmWork


def _cold(node, graph):
    with disk_cache.cache_in(None):
        clear_memo()
        return map_graph(node, graph)


def test_memoised_and_disk_cached_mappings_equal_a_cold_one(node, tmp_path, monkeypatch):
    graph = deepseek_graph("decode", kv_len=32768, batch=8)
    cold = _cold(node, graph)
    with disk_cache.cache_in(None):
        assert map_graph(node, graph).kernels == cold.kernels          # the process memo, warm
    calls = []
    monkeypatch.setattr(graph_mod, "map_kernel", lambda *a, **k: calls.append(a) or map_kernel(*a, **k))
    with disk_cache.cache_in(tmp_path):
        clear_memo()
        stored = map_graph(node, graph)                                # mapped, and written to disk
        # each distinct kernel once, and again for the placements tried beside the others
        assert len(calls) >= len(distinct_kernels(graph))
        assert len(list(tmp_path.rglob("*.pkl"))) == len(calls)
        clear_memo()
        calls.clear()
        loaded = map_graph(node, graph)                                # read back from disk
    assert calls == []
    assert stored.kernels == loaded.kernels == cold.kernels


def test_a_damaged_or_foreign_disk_entry_is_a_miss(tmp_path):
    with disk_cache.cache_in(tmp_path):
        disk_cache.store("t", "key", 1)
        (entry,) = tmp_path.rglob("*.pkl")
        entry.write_bytes(b"not a pickle")
        assert disk_cache.load("t", "key") is None
        disk_cache.store("t", "key", 2)
        assert disk_cache.load("t", "key") == 2
    with disk_cache.cache_in(None):
        assert disk_cache.load("t", "key") is None


def test_the_disk_cache_is_off_in_a_test_process_unless_asked_for(monkeypatch, tmp_path):
    # tests patch unit models; a patched mapping must never reach the shared cache (the session's
    # own cache, tests/conftest.py, is set aside here to see the package's rule)
    monkeypatch.setattr(disk_cache, "_override", [])
    monkeypatch.setenv(disk_cache.CACHE_ENV, str(tmp_path))
    assert disk_cache.cache_root() is None
    with disk_cache.cache_in(tmp_path):
        assert disk_cache.cache_root() == tmp_path


def test_calibrated_values_the_mapper_never_reads_leave_the_mapping_alone(node):
    graph = deepseek_graph("decode", kv_len=32768, batch=8)
    moved = with_overrides(node, {"socket.calibrated.sync_latency_s": 9e-6, "socket.calibrated.p2p_efficiency": 0.4,
                                  "socket.calibrated.transfer_setup_s": 7e-6})
    assert {getattr(moved.socket.calibrated, n) for n in UNMAPPED_CALIBRATED} != \
        {getattr(node.socket.calibrated, n) for n in UNMAPPED_CALIBRATED}
    assert mapping_key(moved.socket) == mapping_key(node.socket)
    assert _cold(moved, graph).kernels == _cold(node, graph).kernels
    # a value the mapper reads is in the key
    slower = with_overrides(node, {"socket.calibrated.systolic_efficiency": 0.5})
    assert mapping_key(slower.socket) != mapping_key(node.socket)


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_parts_of_a_socket_the_mapper_never_reads_leave_the_mapping_alone(node, phase):
    # links, published totals and memory sizes are left out of the mapping key (keys.UNMAPPED_PARTS):
    # a cold mapping on a socket that differs in every one of them must be the same, kernel for kernel
    graph = deepseek_graph(phase, kv_len=32768, batch=8) if phase == "decode" else deepseek_graph("prefill")
    socket = node.socket
    moved = with_overrides(node, {
        "socket.p2p.ports": 2 * socket.p2p.ports, "socket.p2p.bytes_per_s_per_port": 3 * socket.p2p.bytes_per_s_per_port,
        "socket.p2p.latency_s": 7 * socket.p2p.latency_s, "socket.tln.latency_s": 5 * socket.tln.latency_s, "socket.die_to_die.latency_s": 9 * socket.die_to_die.latency_s,
        "socket.memory.hbm.capacity_bytes_per_unit": 2 * socket.memory["hbm"].capacity_bytes_per_unit,
        "socket.memory.hbm.reserved_bytes": socket.memory["hbm"].reserved_bytes / 2,
        "socket.memory.ddr.capacity_bytes_per_unit": socket.memory["ddr"].capacity_bytes_per_unit / 4,
        "socket.stated.pcus": socket.stated.pcus + 1})
    assert mapping_key(moved.socket) == mapping_key(node.socket)
    assert _cold(moved, graph).kernels == _cold(node, graph).kernels
    # and what it reads is in the key: the memory tiers' bandwidth and latency, the TLN's bandwidth,
    # the configuration
    for field, value in [("socket.memory.hbm.latency_s", 2 * socket.memory["hbm"].latency_s),
                         ("socket.tln.bytes_per_s", socket.tln.bytes_per_s / 2),
                         ("socket.memory.hbm.bytes_per_s_per_unit", socket.memory["hbm"].bytes_per_s_per_unit / 2),
                         ("socket.configuration.pcu_bytes", 2 * socket.configuration.pcu_bytes)]:
        assert mapping_key(with_overrides(node, {field: value}).socket) != mapping_key(node.socket), field


def _fewest_by_definition(work, pieces, target, most_pcus):
    """The fewest PCUs (then fewest cycles) over every split, each PCU count tried in turn."""
    best = None
    for split in work.candidates(pieces, most_pcus):
        for q in range(1, most_pcus + 1):
            d = division._division(split, pieces, q, work.efficiency)
            if d.cycles <= target:
                if best is None or (d.pcus, d.cycles) < (best.pcus, best.cycles):
                    best = d
                break
    return best


def test_the_pruned_fewest_pcus_search_finds_what_trying_every_count_finds(node, monkeypatch):
    asked = []
    real = allocate.fewest_pcus

    def spy(work, pieces, target, most_pcus):
        if isinstance(work, GemmWork):
            asked.append((work, pieces, target, most_pcus))
        return real(work, pieces, target, most_pcus)

    monkeypatch.setattr(allocate, "fewest_pcus", spy)
    with disk_cache.cache_in(None):
        clear_memo()
        for kernel in distinct_kernels(deepseek_graph("decode", kv_len=8192, batch=4))[:6]:
            map_kernel(node.socket, kernel)
    assert len(asked) > 100
    for work, pieces, target, most in random.Random(0).sample(asked, 150):
        division.clear_caches()
        assert division.fewest_pcus(work, pieces, target, most) == _fewest_by_definition(work, pieces, target, most)


def _best_by_definition(work, pieces, pcus, most_pcus):
    """The division of fewest cycles (then least latency, then the first split) on ``pcus`` PCUs
    over the splits tried on ``most_pcus``, each built by ``_division``."""
    best = None
    for split in work.candidates(pieces, most_pcus):
        d = division._division(split, pieces, pcus, work.efficiency)
        if best is None or (d.cycles, d.latency_cycles) < (best.cycles, best.latency_cycles):
            best = d
    return best


def test_the_best_division_among_the_splits_is_what_building_each_finds(node, monkeypatch):
    # stage_division of a GEMM on its most PCUs reads the splits' fields memoised with fewest_pcus'
    # searches and works their cycles out in its loop: the same division as building every one
    import sn40l_sim.mapper.spending as spending

    asked = []
    real = spending.stage_division

    def spy(work, pieces, pcus, most_pcus=None):
        if isinstance(work, GemmWork) and most_pcus:
            asked.append((work, pieces, pcus, most_pcus))
        return real(work, pieces, pcus, most_pcus)

    monkeypatch.setattr(spending, "stage_division", spy)
    with disk_cache.cache_in(None):
        clear_memo()
        for kernel in distinct_kernels(deepseek_graph("decode", kv_len=8192, batch=4))[:6]:
            map_kernel(node.socket, kernel)
        clear_memo()
    assert len(asked) > 100 and any(pcus < most for _, _, pcus, most in asked)
    for work, pieces, pcus, most in random.Random(0).sample(asked, 150):
        division.clear_caches()
        assert division.stage_division(work, pieces, pcus, most) == _best_by_definition(work, pieces, pcus, most)


def test_section_plans_reused_under_another_configuration_load_rate_map_as_a_cold_mapping(node, monkeypatch):

    graph = deepseek_graph("decode", kv_len=32768, batch=8)
    slower = with_overrides(node, {"socket.calibrated.config_load_bytes_per_s": 2e10})
    planned = []
    real = planning.plan_section_cold
    monkeypatch.setattr(planning, "plan_section_cold", lambda *a: planned.append(tuple(a[1:])) or real(*a))
    cold = _cold(slower, graph)
    cold_plans = set(planned)
    with disk_cache.cache_in(None):
        planned.clear()
        own = _cold(node, graph)                 # plans every section at the node's own rate
        own_plans = set(planned)
        graph_mod._memo.clear()                  # the kernels, not the section plans
        planned.clear()
        repriced = map_graph(slower, graph)
    # only the tilings the new prices lead the search to are planned anew, each once
    assert len(planned) == len(set(planned))
    assert set(planned) == cold_plans - own_plans
    # some are reused (the tilings' floors price configuration too, so the two rates plan few of
    # the same tilings)
    assert cold_plans & own_plans
    assert repriced.kernels == cold.kernels
    assert [pk.cycles for pk in cold.kernels] != [pk.cycles for pk in own.kernels]


def _exhaustive_best_plan(socket, kernel, tiers, loop):
    """best_plan as it was before tile choices and tilings were pruned by their floors and dataflow
    retries by the plans they repeat: every choice and tiling searched, in the budget's order, the
    first of equal objectives kept, every uniform-dataflow plan built."""
    import sn40l_sim.mapper.kernel as kernel_mod
    from sn40l_sim.hardware import figures
    from sn40l_sim.mapper.budget import NO_LIMITS
    from sn40l_sim.mapper.sections import output_bytes, split_sections

    choices = NO_LIMITS.tiles_for(figures.tiles(socket))
    ranges = split_sections(socket, kernel.operators, max(choices), kernel.name, NO_LIMITS)
    spills = [output_bytes(socket, kernel.operators[stop - 1]) for _, stop in ranges[:-1]]
    planned = socket_key(socket, UNPLANNED_CALIBRATED)
    best = None
    for chip_tiles in choices:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(kernel_mod, "_all_in", lambda plan, dataflow: False)
            patch.setattr(kernel_mod, "PRUNE_TILINGS", False)
            local = kernel_mod._best_tiling(socket, kernel, ranges, spills, tiers, chip_tiles, NO_LIMITS, loop, planned)
        if local is not None and (best is None or local.objective < best.objective):
            best = local
    return best, ranges, spills


def test_tile_choices_and_retries_skipped_change_no_plan(node, monkeypatch):
    # the floor of plan_floor is below every plan the search builds (chosen or not), and the pruned
    # search picks what searching every tile choice and building every retry picks, on every
    # distinct kernel of decode (with and without MTP drafts) and prefill steps, alone and looped
    import sn40l_sim.mapper.kernel as kernel_mod
    from sn40l_sim.mapper.bounds import plan_floor
    from sn40l_sim.mapper.tier_split import TierSplit

    built = []
    real = kernel_mod.plan_kernel
    monkeypatch.setattr(kernel_mod, "plan_kernel", lambda *a, **k: built.append((a, real(*a, **k))) or built[-1][1])
    socket, tiers = node.socket, TierSplit.all_in("hbm")
    kernels = (distinct_kernels(deepseek_graph("decode", kv_len=32768, batch=8))
               + distinct_kernels(deepseek_graph("decode", kv_len=4096, batch=2, drafts=2))
               + distinct_kernels(deepseek_graph("decode", kv_len=131072, batch=16))
               + distinct_kernels(deepseek_graph("prefill")))
    loops = (kernel_mod.LONE_CALL, kernel_mod.LoopContext(iterations=61, gate_cycles=20000, pipelined=True),
             kernel_mod.LoopContext(iterations=4))
    skipped = checked = 0
    with disk_cache.cache_in(None):
        clear_memo()
        for i, kernel in enumerate(kernels):
            loop = loops[i % len(loops)]
            built.clear()
            pruned = kernel_mod.best_plan(socket, kernel, tiers, loop=loop)
            searched = {a[6] for a, _ in built}
            best, ranges, spills = _exhaustive_best_plan(socket, kernel, tiers, loop)
            assert pruned == best, kernel.name
            skipped += len(searched) < 2
            for a, plan in built:
                if plan is not None:
                    checked += 1
                    assert plan_floor(socket, kernel.operators, ranges, spills, tiers, a[6],
                                      iterations=loop.iterations) <= plan.objective[0]
    assert len(kernels) > 30 and checked > 500
    assert skipped > len(kernels) / 2                # the floors do skip searches


def test_units_inferred_between_two_equal_answers_allocate_as_asking_every_target(node, monkeypatch):
    # the bisection reuses a stage's answer between two targets that got the same one; asking the
    # stage at every target instead gives the same allocation on every section of real kernels
    calls = []
    real = allocate.allocate

    def spy(*args):
        calls.append(args)
        return real(*args)

    import sn40l_sim.mapper.kernel as kernel_mod

    monkeypatch.setattr(planning, "allocate", spy)
    monkeypatch.setattr(kernel_mod, "PRUNE_TILINGS", False)      # every tiling allocated
    with disk_cache.cache_in(None):
        clear_memo()
        for graph in (deepseek_graph("decode", kv_len=32768, batch=8), deepseek_graph("decode", kv_len=131072),
                      deepseek_graph("prefill")):
            map_graph(node, graph)
    assert len(calls) > 300
    asked = []
    real_units = allocate._stage_units
    monkeypatch.setattr(allocate, "_stage_units", lambda *a: asked.append(a[-1]) or real_units(*a))
    # (each pass over the calls recomputes every allocation, ~0.5 CPU-s: the stages asked are
    # counted in the same pass that gives the inferred allocations)
    stage_limits.clear_limits_memo()       # each pass from no answers kept across allocations
    inferred = [real(*args) for args in calls]
    asked_inferred = len(asked)
    asked.clear()
    stage_limits.clear_limits_memo()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(allocate, "_known_units", lambda seen, target: None)
        every = [real(*args) for args in calls]
        asked_every = len(asked)
    stage_limits.clear_limits_memo()
    assert inferred == every
    assert asked_inferred < 0.9 * asked_every          # and asks the stages less


def test_every_memoised_tiling_is_the_tiling_tile_operator_gives(node):
    # a GEMM tiled under both dataflows leaves each dataflow's tiling in the memo for the
    # one-dataflow retries: each equals tile_operator under a budget of that dataflow alone
    from sn40l_sim.mapper import stages
    from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
    from sn40l_sim.mapper.tiling import tile_operator

    with disk_cache.cache_in(None):
        clear_memo()
        map_graph(node, deepseek_graph("decode", kv_len=32768, batch=8))
        memo = dict(stages._tiling_memo)
    one_dataflow = [key for key in memo if key[4] is not None and len(key[4][0]) == 1]
    assert len(memo) > 500 and len(one_dataflow) > 100
    for (_, op, n_tiles, efficiency, reads), tiling in memo.items():
        budget = NO_LIMITS if reads is None else UnitBudget(dataflows=reads[0], gemm_cuts=reads[1], gemm_piece=reads[2])
        assert tiling == tile_operator(node.socket, op, n_tiles, efficiency, budget)


def test_memoised_gemm_halvings_give_the_piece_halving_from_the_whole_gives():
    # one list of halvings per GEMM serves every target, asked in any order
    from sn40l_sim.mapper import halving

    rng = random.Random(7)
    for _ in range(300):
        dims = {"count": rng.choice([1, 3, 61]), "m": rng.randint(1, 4096), "k": rng.randint(1, 8192),
                "n": rng.randint(1, 16384)}
        minimum = {"count": 1, "m": min(dims["m"], 32), "k": min(dims["k"], rng.choice([32, 64])),
                   "n": min(dims["n"], 32)}
        b_bytes, cuts = rng.choice([1.0, 2.0, 0.5]), rng.choice([("count", "n", "m", "k"), ("count", "m")])
        targets = [1 << rng.randint(0, 22) for _ in range(6)]
        warm = [halving.halved(dims, minimum, b_bytes, t, cuts) for t in targets]
        cold = []
        for t in targets:
            halving.clear_halvings()
            cold.append(halving.halved(dims, minimum, b_bytes, t, cuts))
        assert warm == cold


def test_a_sections_memoised_traffic_gives_the_stages_and_streams_a_cold_one_gives(node):
    # a section's bytes per tier are worked out once for all its tilings and tile choices
    from sn40l_sim.mapper import stages
    from sn40l_sim.mapper.stages import section_stages
    from sn40l_sim.mapper.tier_split import TierSplit

    tiers = TierSplit((("hbm", 0.75), ("ddr", 0.25)), (("hbm", 1.0),), "hbm")
    kernels = distinct_kernels(deepseek_graph("decode", kv_len=32768, batch=8))
    plans = ((1, 1), (64, 4), (1024, 4))
    for kernel in kernels:
        for spills in ((0, 0), (4096, 12345)):
            warm = [section_stages(node.socket, kernel.operators, n, tiers, c, *spills) for n, c in plans]
            cold = []
            for n, c in plans:
                stages.clear_tiling_memo()
                cold.append(section_stages(node.socket, kernel.operators, n, tiers, c, *spills))
            assert warm == cold
    assert len(kernels) > 5

