"""Anthropic's Messages API on top of the chat-completions pipeline.

    translate.py   Messages request ↔ chat body; chat answers → Messages `message`; native answers →
                   the chat message the checks read
    events.py      pipeline chunks → Messages stream events (chat tiers framed, native events renumbered)

Transport: router/api/messages.py (POST /v1/messages, POST /v1/messages/count_tokens). `anthropic/*`
tiers take the request unchanged: router/upstream/anthropic.py.
"""
