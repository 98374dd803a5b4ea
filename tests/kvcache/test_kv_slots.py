"""The decode-slot rule (kvcache/base.py, ``slot_new_tokens``): a static slot holds the prompt, the
output and the last verify step's drafts (docs/architecture.md, speculative decoding)."""
import pytest

from sn40l_sim.kvcache import make_policy
from sn40l_sim.kvcache.base import slot_new_tokens


@pytest.mark.parametrize(("max_new_tokens", "drafts", "expected"), [(1, 0, 1), (1024, 0, 1024), (1024, 2, 1026),
                                                                   (7, 5, 12)])
def test_slot_holds_the_output_and_the_last_steps_drafts(max_new_tokens, drafts, expected):
    assert slot_new_tokens(max_new_tokens, drafts) == expected


@pytest.mark.parametrize("drafts", [0, 1, 2, 4])
def test_every_row_a_verify_step_writes_fits_a_growing_slot_and_no_more_is_reserved(drafts):
    # a full cache grows by the accepted tokens: a step that starts after g generated tokens writes
    # rows prompt + g .. prompt + g + drafts (its own token and the drafts), and the last step starts
    # at g = max_new_tokens - 1 at the latest; the slot is exactly the highest row written plus one
    prompt, max_new = 100, 9
    full = make_policy("full", {})
    slot = full.static_cache_len(prompt, slot_new_tokens(max_new, drafts))
    highest = max(full.cache_len(prompt, g) + drafts for g in range(max_new))
    assert highest == slot - 1
    # the output alone would leave the last step's drafts without rows
    assert full.static_cache_len(prompt, max_new) - 1 < highest or drafts == 0
