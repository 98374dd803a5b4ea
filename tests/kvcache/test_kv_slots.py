"""The decode-slot rule (kvcache/base.py, ``slot_new_tokens``): a static slot holds the prompt, the
output but its last token (never fed back) and the last verify step's drafts (docs/architecture.md,
speculative decoding)."""
import pytest

from sn40l_sim.kvcache import make_policy
from sn40l_sim.kvcache.base import slot_new_tokens


@pytest.mark.parametrize(("max_new_tokens", "drafts", "expected"), [(1, 0, 0), (1024, 0, 1023), (1024, 2, 1025),
                                                                   (7, 5, 11)])
def test_slot_holds_the_output_and_the_last_steps_drafts(max_new_tokens, drafts, expected):
    assert slot_new_tokens(max_new_tokens, drafts) == expected


@pytest.mark.parametrize("drafts", [0, 1, 2, 4])
def test_every_row_a_verify_step_writes_fits_a_growing_slot_and_no_more_is_reserved(drafts):
    # a full cache grows by the accepted tokens: prefill gives the first token, and a decode step
    # fed the g-th generated token (at position prompt + g - 1) writes rows prompt + g - 1 ..
    # prompt + g - 1 + drafts (its own token and the drafts); the last step is fed token
    # max_new_tokens - 1 at the latest (the last token is returned, not fed back); the slot is
    # exactly the highest row written plus one
    prompt, max_new = 100, 9
    full = make_policy("full", {})
    slot = full.static_cache_len(prompt, slot_new_tokens(max_new, drafts))
    highest = max(prompt + g - 1 + drafts for g in range(1, max_new))
    assert highest == slot - 1
    # the rows held after the steps of the g - 1 tokens fed before it are cache_len(prompt, g - 1)
    assert all(full.cache_len(prompt, g - 1) == prompt + g - 1 for g in range(1, max_new))
    # the tokens fed back alone would leave the last step's drafts without rows
    assert full.static_cache_len(prompt, max_new - 1) - 1 < highest or drafts == 0
