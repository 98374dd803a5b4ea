"""make_policy (kvcache/factory.py): errors name the parameter, inside the policy entry."""
import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.kvcache import make_policy


@pytest.mark.parametrize("name, params, field, expected", [
    ("lru", {}, "policy", "expected one of arkvale, full, h2o, snapkv, snapstream, streamingllm"),
    ("h2o", {"budget": 100, "recent": 200}, "params.budget", "expected budget >= recent = 200"),
    ("h2o", {"heavy": -1}, "params.heavy", "expected an integer >= 0"),
    ("arkvale", {"budget": 1000}, "params.budget", "positive multiple of page_tokens (32)"),
    ("arkvale", {"budget": 4096, "recent": 4096}, "params.budget", "positive multiple"),
    ("arkvale", {"recall_fraction": 0}, "params.recall_fraction", "expected a fraction in (0, 1]"),
    ("arkvale", {"digest": "mean"}, "params.digest", "expected bounds or centroid"),
    ("snapstream", {"sinks": 4}, "params.sinks", "expected one of sink, recent, topk"),
    # budget is accepted too, and is the one a typo most likely meant: the list named it not
    ("snapstream", {"budgte": 4}, "params.budgte", "pool_kernel or budget"),
    ("streamingllm", {"x": 4}, "params.x", "expected one of sink, recent or budget"),
    ("full", {"x": 4}, "params.x", "expected pad_to"),
    ("snapstream", {"sink": -1}, "params.sink", "expected an integer >= 0, got -1"),
    ("snapstream", {"topk": 1.5}, "params.topk", "expected an integer >= 0, got 1.5"),
    ("snapstream", {"topk": "many"}, "params.topk", "expected an integer"),
    ("snapstream", {"recent": True}, "params.recent", "expected an integer >= 1"),
    ("snapstream", {"pool_kernel": 4}, "params.pool_kernel", "expected an odd integer"),
    ("snapstream", {"budget": 100, "recent": 200}, "params.budget", "expected budget >= sink + recent"),
    ("snapstream", {"budget": 100, "topk": 5}, "params.budget", "not both"),
    ("streamingllm", {"budget": 0}, "params.budget", "expected an integer >= 1"),
    ("snapkv", {"budget": 10}, "params.budget", "expected an integer >= 32"),
    ("full", {"pad_to": 0}, "params.pad_to", "expected an integer >= 1, got 0"),
])
def test_make_policy_errors_name_the_parameter(name, params, field, expected):
    with pytest.raises(InputError) as err:
        make_policy(name, params)
    assert err.value.field == field
    assert expected in err.value.message


def test_make_policy_errors_are_located_inside_the_policy_entry():
    # the experiment loader prefixes the entry's place in its file (tests/study)
    with pytest.raises(InputError) as err:
        make_policy("snapstream", {"sink": -2})
    assert err.value.file is None and str(err.value).startswith("params.sink: ")
    with pytest.raises(InputError, match="expected a mapping") as err:
        make_policy("full", [1, 2])
    assert err.value.field == "params"
