"""One point end to end with fixed step costs and a stand-in memory placer:
maximum batch from memory, infeasible batches and contexts, and what the serving run gets."""
from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
from serving_doubles import DECODE, PREFILL, R1_KV_PER_TOKEN, R1_MTP_KV_PER_TOKEN, FakePlacer, fixed_costs, r1_model

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache import make_policy
from sn40l_sim.kvcache.sizing import prefill_kv_bytes_per_socket
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.serving.context_limit import check_context, check_output_context
from sn40l_sim.serving.kv_transfer import spare_ports, transfer_seconds
from sn40l_sim.serving.point import PointSetup, simulate_point
from sn40l_sim.serving.speculation import Speculation
from sn40l_sim.serving.workload import Request
from sn40l_sim.study.assemble import memory_placer
from sn40l_sim.study.experiment import POWERS_OF_TWO_BATCH, POWERS_OF_TWO_PREFILL

NODE = load_hardware("hw_configs/sn40l_node16.yaml")
MODEL = r1_model()
PROMPT, NEW = 131072, 64
#: a full slot: the prompt and the rows of the tokens fed back (all but the last, which is returned)
SLOT = PROMPT + NEW - 1
FULL_SLOT = SLOT * R1_KV_PER_TOKEN
# free HBM for 1.5 full 128K caches per socket: 1 full sequence, or 6 SnapStream 32K ones
FREE = int(1.5 * FULL_SLOT)


def setup(policy, **kw) -> PointSetup:
    args = dict(name=policy.name, node=NODE, model=MODEL, policy=policy, prompt_len=PROMPT, prefill_plan=PREFILL,
                decode_plan=DECODE, batch_sizes=POWERS_OF_TWO_BATCH, prefill_lens=POWERS_OF_TWO_PREFILL,
                max_new_tokens=NEW)
    args.update(kw)
    return PointSetup(**args)


def one_per_slot(output_len=8):
    return lambda slots: [Request(i, 0, PROMPT, output_len) for i in range(slots)]


def run(policy, timer=None, placer=None, requests=None, **kw):
    timer = timer or fixed_costs(policy)
    placer = placer or FakePlacer(weights=40 * 2**30, free=FREE)
    result = simulate_point(setup(policy, **kw), requests or one_per_slot(), timer, placer)
    return result, timer, placer


FULL = make_policy("full", {})
SNAP = make_policy("snapstream", {"budget": 32768})


def test_max_batch_is_the_largest_compiled_size_whose_kv_fits():
    full, timer_f, placer_f = run(FULL)
    snap, timer_s, _ = run(SNAP)
    # 1.5 full caches per socket: batch 16 (1 per socket) fits, 32 (2 per socket) does not;
    # 32K caches: 6 fit per socket, so 64 (4 per socket) fits and 128 (8) does not
    assert (full.max_batch, snap.max_batch) == (16, 64)
    assert (full.batch, snap.batch) == (16, 64)
    assert full.memory.by_tier["hbm"]["kv"] == FULL_SLOT and snap.memory.by_tier["hbm"]["kv"] == 4 * 32768 * R1_KV_PER_TOKEN
    assert "exceed the free" in full.next_failure
    # the decode step is timed at the compiled batch and the static cache length
    assert ("decode", 16, SLOT) in timer_f.calls and ("decode", 64, 32768) in timer_s.calls
    # a prefill socket holds its share of one uncompressed prompt: the 16 sockets write MLA's latent
    # rows split by tokens (its attention reads the keys it expanded, not the cache)
    assert placer_f.calls[-1] == (PREFILL, PROMPT * R1_KV_PER_TOKEN // 16, 0)


def test_serving_run_fills_every_slot_and_conserves_tokens():
    # 64 prefills of 131M cycles take as long as ~140 decode steps of 61M: long outputs fill the batch
    result, _, _ = run(SNAP, requests=one_per_slot(output_len=200), max_new_tokens=200)
    log = result.log
    assert len(log.requests) == 64 and all(r.generated == 200 for r in log.requests)
    assert {r.slot for r in log.requests} == set(range(64))
    assert max(s.active for s in log.steps) == 64
    assert log.steps and max(s.kv_bytes for s in log.steps) <= log.setup.kv_capacity_bytes
    assert result.transfer_bytes == SNAP.cache_len(PROMPT, 0) * R1_KV_PER_TOKEN
    first = log.requests[0]
    assert first.first_token == (700 + 300 + 2 * 10) * PROMPT  # mha, moe_ffn, the two SnapStream kernels
    assert result.policy_kernel_kinds == ("ring_buffer", "snapkv")


def test_explicit_batch_within_the_maximum_runs_and_beyond_it_is_infeasible():
    result, timer, _ = run(SNAP, batch=48)
    assert result.batch == 48 and result.max_batch == 64
    assert ("decode", 48, 32768) in timer.calls
    with pytest.raises(InfeasibleError) as info:
        run(SNAP, batch=128)
    message = str(info.value)
    assert info.value.field == "batch"
    assert "a batch of 128 does not fit (largest compiled batch that fits: 64)" in message
    assert f"exceed the free {FREE} B" in message


def test_an_explicit_batch_that_fits_runs_when_none_of_the_compiled_sizes_does():
    # batch_sizes bound only ``max``: a batch of 16 (one full cache a socket) fits though 64 (four)
    # does not, so it runs at its own step, the largest compiled size that fits being none (0)
    result, timer, _ = run(FULL, batch=16, batch_sizes=(64,))
    assert result.batch == 16 and result.max_batch == 0
    assert "no compiled batch size fits, not even 64" in result.next_failure
    assert ("decode", 16, SLOT) in timer.calls and len(result.log.requests) == 16
    with pytest.raises(InfeasibleError) as info:   # one that does not fit either is still refused
        run(FULL, batch=32, batch_sizes=(64,))
    # ... as the batch's fault, not the prompt's (which was blamed, though batch 16 fits it)
    assert info.value.field == "batch", info.value.field
    assert "a batch of 32 does not fit (decode batches of 1 to 16 do; none of serving.batch_sizes does)" \
        in str(info.value)


def test_compiled_sizes_all_too_large_for_a_prompt_a_smaller_batch_fits_name_the_sizes():
    # the maximum over sizes of which none fits, where batch 16 would: the sizes are to blame, and
    # the message says which batches fit (it blamed the prompt and said a 1-token prompt did not fit)
    with pytest.raises(InfeasibleError) as info:
        run(FULL, batch_sizes=(64, 128))
    assert info.value.field == "batch_sizes", info.value.field
    message = str(info.value)
    assert "not even 64" in message and "decode batches of 1 to 16 fit: serving.batch_sizes needs a size among them" \
        in message
    assert "1-token prompt" not in message


def test_a_context_that_does_not_fit_even_at_batch_1_is_infeasible():
    with pytest.raises(InfeasibleError) as info:
        run(FULL, placer=FakePlacer(weights=40 * 2**30, free=FULL_SLOT // 2))
    assert info.value.field == "prompt_len"
    assert "no compiled batch size fits, not even 1" in str(info.value)


def test_requests_longer_than_the_graphs_are_rejected():
    with pytest.raises(InfeasibleError) as info:
        run(FULL, requests=lambda slots: [Request(0, 0, PROMPT + 1, 4)])
    assert info.value.field == "requests" and "longer than the static graphs" in str(info.value)
    with pytest.raises(InfeasibleError, match="exceeds the largest compiled size"):
        run(FULL, prefill_lens=(1024, 65536))


def test_kv_transfer_time_follows_the_link_spec():
    n = 2_000_000_000
    host = transfer_seconds(NODE, "host_link", n)
    link = NODE.host_link
    assert host == pytest.approx(NODE.socket.calibrated.transfer_setup_s + link.latency_s + n / link.bytes_per_s)
    p2p = NODE.socket.p2p
    # the one port of 16 that the node's full mesh of 16 sockets (15 ports) leaves spare
    assert transfer_seconds(NODE, "p2p", n) == pytest.approx(
        NODE.socket.calibrated.transfer_setup_s + p2p.latency_s
        + n / (1 * p2p.bytes_per_s_per_port * NODE.socket.calibrated.p2p_efficiency))
    result, _, _ = run(FULL)
    assert result.transfer_cycles == math.ceil(
        transfer_seconds(NODE, "host_link", result.transfer_bytes) * NODE.socket.clock_hz)


def test_p2p_moves_the_part_of_the_cache_each_socket_holds():
    # data-parallel decode attention puts a sequence's cache whole on one socket, which receives it
    # all over its ports; tensor-parallel attention splits it, each socket receiving its part beside
    # the others (the whole cache went through one socket's ports in both)
    dp, _, _ = run(FULL, kv_transfer="p2p")
    tp, _, _ = run(FULL, kv_transfer="p2p", decode_plan=ParallelPlan(16))
    p2p, calibrated = NODE.socket.p2p, NODE.socket.calibrated
    port_bytes_per_s = spare_ports(NODE) * p2p.bytes_per_s_per_port * calibrated.p2p_efficiency
    whole = calibrated.transfer_setup_s + p2p.latency_s + dp.transfer_bytes / port_bytes_per_s
    assert dp.transfer_cycles == math.ceil(whole * NODE.socket.clock_hz)
    # MLA's one latent head is held whole by every socket of a tensor-parallel decode (each runs
    # the attention of its query heads over every row), and the prefill sockets send a sixteenth
    assert tp.transfer_bytes == dp.transfer_bytes and tp.transfer_cycles == dp.transfer_cycles
    assert transfer_seconds(NODE, "p2p", dp.transfer_bytes, shares=(1 / 16, 1 / 8)) == pytest.approx(
        calibrated.transfer_setup_s + p2p.latency_s + dp.transfer_bytes / 8 / port_bytes_per_s)


def test_a_prefill_socket_splitting_rows_sends_the_whole_rows_it_wrote():
    # R1's 16 prefill sockets write a 130,072-token prompt's latent rows split by tokens, the
    # busiest ceil(130072 / 16) = 8,130 whole rows (kvcache/sizing.py); the transfer counted a
    # token's average share, 8,129.5 rows. A prefill node with half the P2P bandwidth sends to a
    # decode ring of 16 (14 spare ports) and so sets the time.
    prompt = PROMPT - 1000
    ring = NODE.model_copy(update={"topology": NODE.topology.model_copy(update={"kind": "ring"})})
    slow = with_overrides(NODE, {"socket.p2p.bytes_per_s_per_port": NODE.socket.p2p.bytes_per_s_per_port / 2})
    costs = fixed_costs(FULL)
    result = simulate_point(setup(FULL, prompt_len=prompt, node=ring, prefill_node=slow, kv_transfer="p2p"),
                            lambda slots: [Request(i, 0, prompt, 8) for i in range(slots)], costs,
                            FakePlacer(weights=40 * 2**30, free=FREE), prefill_costs=costs,
                            prefill_place=FakePlacer(weights=40 * 2**30, free=FREE))
    assert result.transfer_bytes == prompt * R1_KV_PER_TOKEN
    p2p, calibrated = slow.socket.p2p, slow.socket.calibrated
    sent = -(-prompt // 16) * R1_KV_PER_TOKEN
    seconds = calibrated.transfer_setup_s + p2p.latency_s + sent / (p2p.bytes_per_s_per_port * calibrated.p2p_efficiency)
    assert abs(result.transfer_cycles - seconds * NODE.socket.clock_hz) <= 1


def test_a_prefill_nodes_free_tokens_are_those_whose_whole_rows_fit():
    # R1's 16 prefill sockets write a prompt's latent rows split by tokens, whole rows each
    # (kvcache/sizing.py); the free tokens were counted at a sixteenth of a row each: 10 rows less one
    # byte held 159 tokens, whose busiest socket writes 10 rows, not 9
    from sn40l_sim.kvcache.sizing import kv_bytes_per_socket
    from sn40l_sim.mapper.placement import MemoryPlacement
    from sn40l_sim.serving.point import free_cache_tokens
    free = 10 * R1_KV_PER_TOKEN - 1
    memory = MemoryPlacement({"hbm": {"weights": 40 * 2**30, "kv": 0}}, {"hbm": 40 * 2**30 + free}, ("hbm",))
    tokens = free_cache_tokens(setup(FULL), memory, include_mtp=False)
    assert tokens == 9 * 16
    assert kv_bytes_per_socket(MODEL, PREFILL, 1, tokens, phase="prefill") <= free
    assert kv_bytes_per_socket(MODEL, PREFILL, 1, tokens + 1, phase="prefill") > free
    # a plan holding every row (a GQA model's, or MLA's on one socket) is unchanged: a token's bytes each
    assert free_cache_tokens(setup(FULL, prefill_plan=ParallelPlan(tp=1)), memory, include_mtp=False) == 9


def test_p2p_between_nodes_takes_only_the_ports_the_nodes_topology_leaves_spare():
    # every port of a socket was counted for the trip to the other node, the 15 its node's full
    # mesh is wired with too: 16 times the bandwidth of the one port there is to spare
    assert spare_ports(NODE) == NODE.socket.p2p.ports - 15 == 1
    n, p2p, calibrated = 2_000_000_000, NODE.socket.p2p, NODE.socket.calibrated
    fixed = calibrated.transfer_setup_s + p2p.latency_s
    one_port = transfer_seconds(NODE, "p2p", n) - fixed
    assert one_port == pytest.approx(n / (p2p.bytes_per_s_per_port * calibrated.p2p_efficiency))
    # a ring of 16 takes 2 ports, leaving 14: the same bytes in a fourteenth of the time
    ring = NODE.model_copy(update={"topology": NODE.topology.model_copy(update={"kind": "ring"})})
    assert spare_ports(ring) == 14
    assert transfer_seconds(ring, "p2p", n) - fixed == pytest.approx(one_port / 14)
    # each end its own: a prefill node on a ring sends faster, the decode node's one port sets the time
    assert transfer_seconds(NODE, "p2p", n, sender=ring) == pytest.approx(transfer_seconds(NODE, "p2p", n))


def test_a_node_with_no_p2p_port_to_spare_cannot_join_another_over_p2p():
    full = NODE.model_copy(update={"socket": NODE.socket.model_copy(
        update={"p2p": NODE.socket.p2p.model_copy(update={"ports": 15})})})
    with pytest.raises(InputError) as info:
        run(FULL, node=full, kv_transfer="p2p")
    assert info.value.field == "kv_transfer"
    assert info.value.message == (
        "the hardware SN40L-16 has no P2P port to spare to join another node: its full_mesh of 16 sockets "
        "takes 15 of each socket's socket.p2p.ports (15); expected at least one more port, or the KV carried "
        "over the host link (kv_transfer host_link)")
    run(FULL, node=full)   # over the host link it serves


def test_no_host_link_is_a_located_input_error():
    bare = NODE.model_copy(update={"host_link": None})
    with pytest.raises(InputError, match="no host_link") as info:
        run(FULL, node=bare)
    assert info.value.field == "kv_transfer"


def test_colocated_reserves_the_prefill_working_set_and_sends_nothing():
    result, _, placer = run(SNAP, mode="colocated", prefill_nodes=0)
    assert result.transfer_cycles == 0 and result.prefill_memory is None
    # each decode-node socket also holds its share of one prompt's uncompressed cache while it
    # prefills, beside the slots (MLA's prefill splits the rows each slot replicates): 4 slots fit
    scratch = PROMPT * R1_KV_PER_TOKEN // 16
    assert result.memory.by_tier["hbm"]["kv"] == 4 * 32768 * R1_KV_PER_TOKEN + scratch
    assert result.max_batch == 64
    assert all(r.transfer_start == -1 for r in result.log.requests)


@pytest.mark.parametrize("attention_dp", [16, 1])
def test_a_colocated_gqa_prompt_is_in_its_own_slot_only_on_the_sockets_that_hold_the_slot(attention_dp):
    # Llama-3.1-70B (GQA, 8 KV heads): the tp16 prefill writes one KV head of the prompt's rows on
    # every socket. With attention_dp 16 the free slot the prompt decodes in is whole on one
    # socket, so every other socket holds those rows beside slots all in use; with attention_dp 1
    # every socket holds the prompt's slot's share of the rows, and writes them there in place.
    from sn40l_sim.models.loader import load_model

    llama = load_model("graphs/llama3_1_70b.yaml")
    prompt, new = 65536, 64
    token = 2 * 8 * 128 * 80 * 2                        # K and V, 8 heads of 128, 80 layers, BF16
    slot, share = (prompt + new - 1) * token, prompt * token // 8
    plan = ParallelPlan(tp=16, attention_dp=attention_dp)
    # room for two slots and half a prompt's rows per socket under attention_dp 16
    placer = FakePlacer(weights=10 * 2**30, free=2 * slot + share // 2)
    result = simulate_point(setup(FULL, model=llama, prompt_len=prompt, max_new_tokens=new, decode_plan=plan,
                                  mode="colocated", prefill_nodes=0),
                            lambda slots: [Request(i, 0, prompt, 8) for i in range(slots)], fixed_costs(FULL), placer)
    if attention_dp == 16:
        assert result.max_batch == 16                   # 2 slots + the prompt's rows do not fit
        assert result.memory.by_tier["hbm"]["kv"] == slot + share
    else:
        # a socket holds one of 8 KV heads of every slot, the prompt's rows among them: 16 slots
        assert result.max_batch == 16
        assert result.memory.by_tier["hbm"]["kv"] == 16 * slot // 8


# --- memory tiers and the experiment's memory options, with the real place_memory

def run_real(policy, node=NODE, order=None, **kw):
    """The real memory placer (R1 weights per socket, the node's tiers in ``order``), fixed costs."""
    costs = fixed_costs(policy)
    result = simulate_point(setup(policy, node=node, **kw), one_per_slot(), costs,
                            memory_placer(node, MODEL, order))
    return result, costs


def test_weights_and_kv_stay_in_hbm_by_default_and_the_limit_says_why():
    result, costs = run_real(FULL)
    assert result.max_batch == 16 and result.memory.outside("hbm") == {}
    # the next compiled batch's KV would spill to DDR, which the default refuses, in these words
    assert re.fullmatch(r"decode batch 32 does not fit in HBM per socket: weights \d+\.\d\d GiB \+ kv \d+\.\d\d GiB "
                        r"\+ activations 0\.00 GiB > \d+\.\d\d GiB usable HBM \(kv \d+\.\d\d GiB would spill to DDR; "
                        r"the serving model keeps weights and KV in HBM\)", result.next_failure), result.next_failure
    assert costs.memory == {"prefill": result.prefill_memory, "decode": result.memory}


def test_kv_may_spill_to_ddr_when_the_experiment_allows_it():
    result, costs = run_real(FULL, may_spill=("activations", "kv"))
    assert result.max_batch > 16
    spilled = result.memory.outside("hbm")
    assert set(spilled) == {"kv"} and result.memory.by_tier["ddr"]["kv"] == spilled["kv"] > 0
    # the decode step is timed with the KV where the placement put it
    assert [tier for tier, _ in costs.memory["decode"].tiers().kv] == ["hbm", "ddr"]


def test_placement_order_is_an_option():
    result, _ = run_real(SNAP, order=("ddr", "hbm"))
    assert result.memory.first_tier == "ddr" and not any(result.memory.by_tier["hbm"].values())
    assert result.memory.by_tier["ddr"]["weights"] > 0


def test_a_yaml_only_tier_can_take_the_kv():
    from sn40l_sim.hardware.loader import with_overrides

    node = with_overrides(NODE, {"socket.memory.cxl": {
        "units_per_die": 1, "capacity_bytes_per_unit": "512 GiB", "bytes_per_s_per_unit": "30 GB/s",
        "latency_s": "500 ns", "efficiency": 0.75}})
    result, _ = run_real(FULL, node=node, order=("hbm", "cxl"), may_spill=("activations", "kv"))
    assert result.max_batch > 16 and result.memory.by_tier["cxl"]["kv"] > 0
    assert not any(result.memory.by_tier["ddr"].values())         # left out of the order
    with pytest.raises(InfeasibleError, match="does not fit in HBM per socket.*would spill to CXL"):
        run_real(FULL, node=node, order=("hbm", "cxl"), batch=64)


def test_speculative_drafts_reach_the_step_the_slots_and_the_serving_loop():
    spec = Speculation(drafts=2, acceptance=0.8)
    placer = FakePlacer(weights=40 * 2**30, free=int(1.5 * (SLOT + 2) * R1_MTP_KV_PER_TOKEN))
    result, timer, placer = run(FULL, placer=placer, model=r1_model(mtp=True), speculation=spec, seed=4,
                                requests=one_per_slot(output_len=NEW))
    # a full slot holds the tokens fed back and the two drafts written after the last one
    assert result.static_cache_len == SLOT + 2
    assert ("decode", 16, SLOT + 2, 2) in timer.calls
    # the draft runs the MTP module, whose layer has a cache of its own: reserved and sent
    assert result.kv_bytes_per_token == R1_MTP_KV_PER_TOKEN
    assert result.memory.by_tier["hbm"]["kv"] == (SLOT + 2) * R1_MTP_KV_PER_TOKEN
    assert result.transfer_bytes == PROMPT * R1_MTP_KV_PER_TOKEN
    log = result.log
    assert log.setup.speculation == spec and log.setup.seed == 4
    assert all(r.generated == NEW for r in log.requests)
    assert sum(s.tokens for s in log.steps) > sum(s.active for s in log.steps)  # drafts were accepted
    # without drafts the same model runs plain decode: no MTP layer cache
    plain, timer, _ = run(FULL, model=r1_model(mtp=True))
    assert plain.static_cache_len == SLOT and plain.kv_bytes_per_token == R1_KV_PER_TOKEN
    assert ("decode", 16, SLOT) in timer.calls


def test_only_the_mtp_modules_the_drafts_run_keep_a_cache():
    # a model of three MTP modules drafting one token a step runs module 0 only (draft d runs module
    # d mod 3): the other two keep no cache, so neither the slots nor the transfer count them
    model = ModelSpec.model_validate({**r1_model().model_dump(), "mtp": dict(modules=3)})
    mtp_layer = R1_MTP_KV_PER_TOKEN - R1_KV_PER_TOKEN
    for drafts, modules_run in ((1, 1), (2, 2), (5, 3)):
        placer = FakePlacer(weights=40 * 2**30, free=int(1.5 * (SLOT + 5) * (R1_KV_PER_TOKEN + 3 * mtp_layer)))
        result, _, _ = run(FULL, placer=placer, model=model, speculation=Speculation(drafts, 0.8))
        per_token = R1_KV_PER_TOKEN + modules_run * mtp_layer
        assert result.kv_bytes_per_token == per_token, drafts
        assert result.memory.by_tier["hbm"]["kv"] == (SLOT + drafts) * per_token
        assert result.transfer_bytes == PROMPT * per_token


def test_drafts_without_an_mtp_module_are_refused():
    with pytest.raises(InputError, match="no mtp section") as info:
        run(FULL, speculation=Speculation(2, 0.8))
    assert info.value.field == "speculation"


def test_a_prefill_node_holds_the_compressed_cache_beside_the_prompts():
    # SnapStream's prefill kernels gather the kept rows into the fixed [sink | ring | top-K] cache,
    # which waits on the prefill node for its transfer while the prompt's cache is still there:
    # 2,048 of the 32,767 kept rows a socket (0.13 GiB of R1's), which the prefill node did not count
    prompt_rows = PROMPT // 16
    kept_rows = -(-SNAP.cache_len(PROMPT, 0) // 16)
    result, _, _ = run(SNAP)
    assert result.prefill_memory.by_tier["hbm"]["kv"] == (prompt_rows + kept_rows) * R1_KV_PER_TOKEN
    # a policy keeping the whole prompt writes it in place: nothing beside it
    assert run(FULL)[0].prefill_memory.by_tier["hbm"]["kv"] == prompt_rows * R1_KV_PER_TOKEN


def test_a_prefill_node_holds_the_policy_state_it_sends():
    # the transfer sends H2O's accumulated scores beside the cache; the prefill node builds them
    # (every socket sharing MLA's one KV head holds them whole, as decode's do) and holds them until
    # it sends them, but its placement counted the caches alone
    policy = make_policy("h2o", {"budget": 32768})
    result, _, _ = run(policy)
    cache = prefill_kv_bytes_per_socket(MODEL, PREFILL, 1, PROMPT, policy.cache_len(PROMPT, 0))
    state = policy.prefill_state_bytes(MODEL, PROMPT, NEW - 1)   # the prompt's, which it sends
    assert state > 0
    held = result.prefill_memory.by_tier["hbm"]["kv"]
    assert held == cache + MODEL.layers * state
    sent = policy.cache_len(PROMPT, 0) * R1_KV_PER_TOKEN + MODEL.layers * state
    assert result.transfer_bytes == sent


def test_the_caches_waiting_on_a_prefill_node_with_their_state_fit_the_room_it_leaves():
    # a prefill node starts a prompt only while the caches waiting for their transfer fit the room
    # its placement leaves; each waits with H2O's scores (sent with it, held whole on every socket
    # sharing MLA's KV head: 1,821 tokens' worth of bytes beside its 32,768 rows), which went uncounted
    from sn40l_sim.kvcache.sizing import kv_bytes_per_socket_token, state_bytes_per_socket
    policy = make_policy("h2o", {"budget": 32768})
    output = 1000
    result, _, _ = run(policy, requests=lambda slots: [Request(i, 0, PROMPT, output) for i in range(3 * slots)],
                       max_new_tokens=output)
    log = result.log
    state = state_bytes_per_socket(MODEL, PREFILL, 1, policy.prefill_state_bytes(MODEL, PROMPT, output - 1))
    waiting = policy.cache_len(PROMPT, 0) + -(-state // kv_bytes_per_socket_token(MODEL, PREFILL, phase="prefill"))
    room = log.setup.prefill_hold_tokens
    most = max(sum(1 for o in log.requests if o is not r and o.first_token <= r.prefill_start
                   and (o.transfer_end is None or o.transfer_end > r.prefill_start)) for r in log.requests)
    # 86 waiting caches with their scores fill the room (90 without them would have been let in)
    assert most * waiting <= room < (most + 1) * waiting


def test_activations_of_a_long_prompt_spill_instead_of_pushing_weights_and_kv_out():
    """Activations are placed first, but they may spill and weights and KV may not: when the
    activations would push the prompt's KV out of HBM, the kept uses are placed first."""
    activations = 20 * 2**30                       # more than HBM has left beside weights and KV
    costs = replace(fixed_costs(SNAP), activation_bytes=activations)
    result = simulate_point(setup(SNAP), one_per_slot(), costs, memory_placer(NODE, MODEL))
    prefill = result.prefill_memory
    assert prefill.outside("hbm") == {"activations": prefill.by_tier["ddr"]["activations"]}
    assert prefill.by_tier["hbm"]["kv"] == (PROMPT // 16 + 2048) * R1_KV_PER_TOKEN   # the prompt's and the kept rows
    assert prefill.total("activations") == activations and prefill.by_tier["hbm"]["activations"] > 0
    # with activations in the kept uses, the same memory is refused, naming what would spill
    # (the decode node, whose slots hold more KV than a prefill socket's share of a prompt, first)
    with pytest.raises(InfeasibleError, match=r"does not fit in HBM per socket: .* activations 20\.00 GiB"):
        simulate_point(setup(SNAP, may_spill=()), one_per_slot(), costs, memory_placer(NODE, MODEL))


def test_a_prompt_longer_than_the_models_maximum_context_is_refused():
    short = MODEL.model_copy(update={"max_context": 65536})
    with pytest.raises(InputError, match="a prompt of 131072 tokens exceeds the maximum context of r1-test, 65536") as err:
        run(SNAP, model=short)
    assert err.value.field == "prompt_len"
    # the tokens generated after the prompt take positions too. A run checks each request's prompt
    # and output as it builds them (tests/serving/test_workload.py); a point built without requests
    # (map) is checked with max_new_tokens, and refused at the output's length, saying what would fit
    over = setup(SNAP, model=MODEL.model_copy(update={"max_context": PROMPT + NEW - 1}))
    check_context(over)
    with pytest.raises(InputError, match=f"a prompt of {PROMPT} tokens and {NEW} new ones make {PROMPT + NEW}, "
                       f"beyond the maximum context of r1-test, {PROMPT + NEW - 1} tokens: generate at most "
                       f"{NEW - 1} after such a prompt") as err:
        check_output_context(over)
    assert err.value.field == "max_new_tokens"
    assert err.value.message.endswith("(a long-context variant raises the maximum: model_overrides: {max_context: N})")
    # an experiment that sets the maximum already is told what it sets and what would do instead
    with pytest.raises(InputError) as err:
        check_output_context(replace(over, max_context_set="model_overrides.max_context"))
    assert err.value.message.endswith(f"(model_overrides.max_context sets the maximum to {PROMPT + NEW - 1}; this "
                                      f"needs at least {PROMPT + NEW})")
    # a prompt that fills the context leaves no position for any output: not "generate at most 0"
    with pytest.raises(InputError, match=f"a prompt of {PROMPT} tokens fills the maximum context of r1-test, "
                       f"{PROMPT} tokens, leaving no position for a generated token") as err:
        run(SNAP, model=MODEL.model_copy(update={"max_context": PROMPT}))
    assert err.value.field == "prompt_len"
    # a long-context variant raises it
    assert run(SNAP, model=MODEL.model_copy(update={"max_context": PROMPT + NEW}))[0].max_batch == 64


class _PerTokenActivations(type(fixed_costs(FULL))):
    """Fixed costs whose prefill graph holds ``bytes_per_token`` of activations per prompt token,
    as a built graph's do (linear in the length it is built for)."""

    bytes_per_token = 1000

    def prefill_activation_bytes(self, prompt_len: int) -> int:
        return self.bytes_per_token * prompt_len


def test_a_prefill_socket_holds_the_compiled_prefill_graph_not_the_prompt():
    """A prompt between two compiled lengths runs the longer graph: the prefill node must hold that
    graph's activations and the cache rows it writes, and is refused when they do not fit although
    the prompt's own would."""
    prompt = PROMPT - 1000                  # runs the 131072-token graph
    costs = _PerTokenActivations(**vars(fixed_costs(FULL)))
    result, _, placer = run(FULL, timer=costs, prompt_len=prompt,
                            requests=lambda slots: [Request(i, 0, prompt, 8) for i in range(slots)])
    assert result.prefill_len_compiled == PROMPT and ("prefill", PROMPT) in costs.calls
    assert placer.calls[-1] == (PREFILL, PROMPT * R1_KV_PER_TOKEN // 16, 1000 * PROMPT)
    # room for the prompt's own working set but not the compiled graph's
    need_prompt = prompt * R1_KV_PER_TOKEN // 16 + 1000 * prompt
    need_graph = PROMPT * R1_KV_PER_TOKEN // 16 + 1000 * PROMPT
    tight = FakePlacer(weights=40 * 2**30, free=(need_prompt + need_graph) // 2)
    with pytest.raises(InfeasibleError, match="exceed the free") as err:
        # the decode node is another (roomier) one: only the prefill node is short
        simulate_point(setup(FULL, prompt_len=prompt, prefill_node=NODE), lambda slots: [], costs,
                       FakePlacer(weights=40 * 2**30, free=FREE), prefill_costs=costs, prefill_place=tight)
    assert err.value.field == "prompt_len"


@pytest.mark.parametrize("policy, hits", [(FULL, 3), (SNAP, 0)])
def test_a_colocated_node_whose_slots_fill_its_memory_reuses_a_whole_cache_prefix(policy, hits):
    # Four prompts of 64K + 512 tokens sharing a 512-token prefix, on a co-located node whose
    # placement leaves no byte free. With the whole cache the prefix the later three reuse is the
    # first one's cache, in its decode slot: no room is needed beyond the slots, so all three hit.
    # SnapStream's slots hold compressed caches, so the node would have to keep the uncompressed
    # prefix beside them, and with no room left it keeps none.
    def requests(slots):
        return [Request(i, 0, 65536 + 512, 8, prefix_id=0, prefix_len=512) for i in range(4)]

    kw = dict(mode="colocated", prefill_nodes=0, prefix_cache=True, batch=16, requests=requests)
    roomy, _, _ = run(policy, placer=FakePlacer(weights=40 * 2**30, free=10**13), **kw)
    assert roomy.log.prefixes.hits == 3
    hbm = roomy.memory.by_tier["hbm"]
    full, _, _ = run(policy, placer=FakePlacer(weights=40 * 2**30, free=hbm["kv"] + hbm["activations"]), **kw)
    assert full.memory.capacity["hbm"] == sum(full.memory.by_tier["hbm"].values())
    assert full.log.prefixes.requests_with_prefix == 4 and full.log.prefixes.hits == hits


class ReloadingCosts(type(fixed_costs(FULL))):
    """Fixed costs whose prefill graphs reload, after a decode step, 1,000 configuration cycles plus
    one per 1,024th of the square of their earlier tokens (a graph of its own per count of them)."""

    def prefill(self, prompt_len, memory=None, earlier=0):
        timing = super().prefill(prompt_len, memory, earlier)
        return replace(timing, switch_load_cycles=1000 + earlier * earlier // 1024)


def test_a_colocated_prefix_hit_after_a_decode_step_loads_its_suffix_graphs_configurations():
    # a hit's suffix runs the graph of its rows over the reused prefix's keys (as a later chunk
    # does), so what it loads again after a decode step is that graph's, read at the same timed
    # prefixes as its cycles (the compiled lengths, linear between: no other graph timed); charged
    # at no earlier tokens it paid another graph's (1,000 here each time)
    timer = ReloadingCosts(prefill_cycles_per_token={"mha": 700, "moe_ffn": 300})
    requests = [Request(0, 0, 3072, 8, prefix_id=0, prefix_len=2048),       # a miss, then decodes
                Request(1, 5_000_000, 3072, 2, prefix_id=0, prefix_len=2048),  # 1,024 rows after 2,048
                Request(2, 100_000_000, 3000, 2, prefix_id=0, prefix_len=2048)]  # 1,024 rows after 1,976
    result, _, _ = run(FULL, timer=timer, requests=lambda slots: requests, mode="colocated", prefill_nodes=0,
                       prefix_cache=True, batch=16)
    assert result.log.prefixes.hits == 2
    loads = [end - start for _, start, end, graph in result.log.switches if graph == "prefill"]
    between = 2024 + math.ceil((5096 - 2024) * (1976 - 1024) / 1024)
    assert loads == [1000 + 2048 * 2048 // 1024, between] == [5096, 4880]
    assert ("prefill", 1024, 1976) not in timer.calls
