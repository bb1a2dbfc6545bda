"""The Messages fields that need a beta, as Anthropic takes them, on the fake upstream (calls.py).

A request whose body holds a field only a beta admits, without that beta among its `anthropic-beta`
values, is refused with Anthropic's 400 for a field it does not know ("context_management: Extra
inputs are not permitted"): so a router that loses the client's betas on the way fails here as it
would against Anthropic. Fast mode's beta (`speed`) is speed.py's. A refusal draws nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from router.fake.speed import betas
from router.fake.wire import error_body

# a body field → the beta (a prefix of its dated name) that admits it
NEEDS = {"context_management": "context-management-"}


def beta_refusal(body: dict[str, Any], headers: Mapping[str, str]) -> bytes | None:
    """Anthropic's 400 body for a field whose beta the request did not send; None: every one was."""
    sent = betas(headers)
    for field, beta in NEEDS.items():
        if field in body and not any(b.startswith(beta) for b in sent):
            return error_body(400, f"{field}: Extra inputs are not permitted", True)
    return None
