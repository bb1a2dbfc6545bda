"""What a policy names must exist: every tier a route, an alias or the escalation names, and route
names once each. Shared by `Policy`'s validator (router/policy/model.py) and the loader, which runs
it on the raw file when other errors stop pydantic before the model validator, so that all problems
are reported at once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Where a route names a tier, as key paths inside the route.
ROUTE_TIER_REFS: tuple[tuple[str, ...], ...] = (
    ("use",),
    ("hedge", "tier"),
    ("adaptive", "to"),
    ("verify", "tier"),
    ("shadow", "tier"),
    ("shadow", "judge"),
)


def reference_problems(
    tiers: Iterable[str],
    aliases: Mapping[str, Any],
    routes: Sequence[Any],
    escalation_to: Any,
    repeat_tier: Any = None,
) -> list[tuple[tuple[str | int, ...], str]]:
    """Every reference to a tier that does not exist, and every repeated route name, as (loc, message).

    `routes` are plain mappings (a route's `model_dump()`, or the raw file). Shared by `Policy`'s
    validator and the loader, which runs it on the raw file when other errors stop pydantic before
    the model validator, so that all problems are reported at once. Values of the wrong type are
    skipped (field validation reports those).
    """
    names = set(tiers)
    listed = ", ".join(sorted(names))
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for alias, target in aliases.items():
        if isinstance(target, str) and target != "auto" and target not in names:
            problems.append((("aliases", alias), f"unknown tier {target!r} (tiers: {listed})"))
    seen: dict[str, int] = {}
    for i, route in enumerate(routes):
        if not isinstance(route, Mapping):
            continue
        name = route.get("name")
        for path in ROUTE_TIER_REFS:
            value: Any = route
            for key in path:
                value = value.get(key) if isinstance(value, Mapping) else None
            if isinstance(value, str) and value not in names:
                problems.append((("routes", i, *path), f"unknown tier {value!r} (route {name!r})"))
        if isinstance(name, str):
            if name in seen:
                msg = f"duplicate route name {name!r} (first used by routes.{seen[name]})"
                problems.append((("routes", i, "name"), msg))
            else:
                seen[name] = i
    if isinstance(escalation_to, str) and escalation_to not in names:
        problems.append((("escalation", "to"), f"unknown tier {escalation_to!r}"))
    elif isinstance(escalation_to, list):
        for j, tier in enumerate(escalation_to):
            if isinstance(tier, str) and tier not in names:
                problems.append((("escalation", "to", j), f"unknown tier {tier!r}"))
    if isinstance(repeat_tier, str) and repeat_tier not in names:
        problems.append((("escalation", "repeat", "tier"), f"unknown tier {repeat_tier!r}"))
    return problems
