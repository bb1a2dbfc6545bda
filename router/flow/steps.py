"""What a call's flow does after an attempt: a `Step`, returned (never raised) by the checks, the
verifier and a tier's failure (router/flow/attempts.py), and run by the one attempt loop
(router/flow/pipeline.py):

    Deliver()           the answer goes to the client
    Deliver(held)       the answer held while a sample tried to better it goes instead (the sample failed)
    Retry(mistakes)     another attempt: the tier and body `Attempts.next_attempt` picks; after a
                        backoff when `backoff` (an upstream error sends the call back to the same tier)
    Fail(error)         the call ends with `error`, the one error the client is told

and the typed state of a call that goes on *sampled* (the greedy last tier would answer the same
again): `Sample` (off, next, on), why (`Why`: its sign or its mistake) and what is `Held` meanwhile.

A greedy last tier would answer the same: its mistake goes on *sampled* to the repeat tier
(`escalation.repeat`), where the call's later attempts stay — the run the agent's retry would get,
without the round trip. A *sign* (`repeated_call`: the agent's last calls again; `tool_spray`) only
moves a call on: to a stronger tier, or from the greedy last tier to one sampled attempt on the
repeat tier while the greedy answer is `Held`. The sample's answer is delivered, a sign and all;
should it fail (a mistake, an upstream error), the held answer is, with its sign (`Deliver(held)`).
Where neither can run, the answer is delivered with its sign.

A request whose every attempt failed the checks is remembered (router/core/live/repeats.py): a *repeat*
of it — the agent's retry — is resampled (every attempt on the repeat tier, at the repeat
temperature) while `repeat.resample` allows, else refused at once with `ChecksFailedRepeatedly`
(non-retryable), also the error of the last resampled run that fails (of the first run, if the
repeat tier is greedy: `Resampling`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from router.errors import RouterError


@dataclass(frozen=True, slots=True)
class Held:
    """The greedy last tier's answer with a sign, kept while its sample runs: what is delivered
    should the sample fail (`answer`: a whole `Reply`, or the `Gate` holding a stream's calls)."""

    tier: str
    signs: tuple[str, ...]
    message: Mapping[str, Any]
    answer: Any


@dataclass(frozen=True, slots=True)
class Deliver:
    held: Held | None = None  # deliver this held answer instead of the attempt's own

    @property
    def how(self) -> str:
        return "fell_back" if self.held is not None else "answered"


@dataclass(frozen=True, slots=True)
class Retry:
    mistakes: tuple[str, ...]
    backoff: bool = False  # the same tier again after an upstream error of its own: wait first

    @property
    def how(self) -> str:
        return "retried" if self.backoff else "escalated"


@dataclass(frozen=True, slots=True)
class Fail:
    error: RouterError

    @property
    def how(self) -> str:
        return "failed"


Step = Deliver | Retry | Fail
STEPS = (Deliver, Retry, Fail)
DELIVER = Deliver()  # the attempt's own answer goes to the client


class Sample(enum.Enum):
    """Where a call stands with sampling (router/core/live/repeats.py's repeat tier, its temperature)."""

    OFF = "off"  # not sampled
    NEXT = "next"  # the next attempt samples the greedy last tier's answer on the repeat tier
    ON = "on"  # the call runs sampled on the repeat tier: its later attempts stay there


class Why(enum.StrEnum):
    """Why a call went on sampled (`x-router-sampled`)."""

    SIGN = "sign"  # the greedy last tier's answer had a sign (its answer is held meanwhile)
    MISTAKE = "mistake"  # it made a mistake it would make again


class Repeat(enum.StrEnum):
    """How a repeat of a request whose every attempt failed the checks runs (`x-router-repeat`)."""

    RESAMPLED = "resampled"
    REFUSED = "refused"
