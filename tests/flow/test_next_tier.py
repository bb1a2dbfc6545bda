"""router/flow/next_tier.py: which tier a call's next attempt goes to, as pure functions of the policy
and the call's history — no runtime, no sockets."""

from __future__ import annotations

import textwrap

from router.flow import next_tier
from router.mistakes import INVALID_JSON, SCHEMA_VIOLATION, UNKNOWN_TOOL, Mistake
from router.policy.loader import parse_policy
from router.policy.model import Policy
from tests.conftest import policy_text
from tests.scripted import UNUSED

THREE = """
  mid:
    model: openai/mid-model
    api_base: http://127.0.0.1:9
"""


def policy(escalation: str = "{to: full}", greedy_full: bool = False, mid: bool = False) -> Policy:
    text = textwrap.dedent(policy_text(UNUSED, extra=f"escalation: {escalation}\n"))
    if greedy_full:
        text = text.replace("model: openai/full-model", "model: openai/full-model\n    params: {temperature: 0}")
    if mid:
        text = text.replace("store:", THREE.lstrip("\n") + "store:")
    return parse_policy(text, "test.yaml", {})


def test_stronger_goes_up_the_chain_and_stays_on_its_last_tier() -> None:
    p = policy("{to: [fast, mid, full]}", mid=True)
    assert [next_tier.stronger(p, t) for t in ("fast", "mid", "full")] == ["mid", "full", "full"]


def test_a_sampled_call_stays_where_it_is() -> None:
    assert next_tier.stronger(policy(), "fast", sampled=True) == "fast"


def test_a_tier_off_the_chain_goes_to_the_chains_first() -> None:
    p = policy("{to: [mid, full]}", mid=True)
    assert next_tier.stronger(p, "fast") == "mid"


def test_only_the_chains_last_tier_greedy_answers_the_same_again() -> None:
    p = policy()
    assert next_tier.same_answer_again(p, "full", 0)
    assert not next_tier.same_answer_again(p, "full", 0.7)
    assert not next_tier.same_answer_again(p, "full", None)  # the server's own default: not known to be greedy
    assert not next_tier.same_answer_again(p, "fast", 0)  # a stronger tier answers next
    pinned = policy(greedy_full=True)
    assert next_tier.same_answer_again(pinned, "full", 0.9)  # its params pin temperature 0: the client's is not sent


def test_repair_pins_the_one_fumbled_tool_once_per_tier_on_the_last_tier() -> None:
    p = policy()
    fumbled = [Mistake(SCHEMA_VIOLATION, "get_weather")]
    offered = {"get_weather", "get_time"}
    assert next_tier.repairable(p, None, "full", set(), fumbled, offered) == "get_weather"
    assert next_tier.repairable(p, None, "full", {"full"}, fumbled, offered) is None  # had its repair
    assert next_tier.repairable(p, None, "fast", set(), fumbled, offered) is None  # a stronger tier is next
    two = [Mistake(INVALID_JSON, "get_weather"), Mistake(SCHEMA_VIOLATION, "get_time")]
    assert next_tier.repairable(p, None, "full", set(), two, offered) is None  # no one tool to pin
    unknown = [Mistake(UNKNOWN_TOOL, "get_forecast")]
    assert next_tier.repairable(p, None, "full", set(), unknown, offered) is None  # not a mistake a pin mends


def test_a_route_that_repairs_repairs_below_the_last_tier() -> None:
    p = policy_text(
        UNUSED, extra="escalation: {to: full}\n", routes="routes:\n  - {name: r, use: fast, repair: true}\n"
    )
    parsed = parse_policy(textwrap.dedent(p), "test.yaml", {})
    route = parsed.routes[0]
    fumbled = [Mistake(INVALID_JSON, "get_weather")]
    assert next_tier.repairable(parsed, route, "fast", set(), fumbled, {"get_weather"}) == "get_weather"


def test_a_prompt_goes_to_the_first_tier_past_whose_window_takes_it() -> None:
    p = policy("{to: [fast, mid, full]}", mid=True)
    windows = {"mid": 4096, "full": 32768}
    assert next_tier.fitting(p, "fast", 8000, windows, set()) == "full"
    assert next_tier.fitting(p, "fast", 2000, windows, set()) == "mid"
    assert next_tier.fitting(p, "fast", 2000, windows, {"mid"}) == "full"  # found too small already
    assert next_tier.fitting(p, "fast", 40000, windows, set()) is None
    assert next_tier.fitting(p, "fast", 40000, {"mid": 4096}, set()) == "full"  # unknown: taken to fit
