"""The console: what routing is worth and why, live, served by the router itself at `/console`.

    views.py    the sessions and their calls, read from the store's call log (router/store/calls.py):
                every replica's, the same whichever replica answers (`GET /v1/router/sessions`, too)
    api.py      its JSON API, a FastAPI app mounted at `/console/api` (typed, OpenAPI at
                `/console/api/docs`): sessions, one session's calls, the overview, and the live tail
                of calls pushed over SSE from the bounded feed (router/core/live/feed.py)
    page/       the page: HTML, CSS and ES modules shipped in the package; no build step, no CDN

A room of its own beside the transports: it reads the store and the feed; nothing in a call's flow
imports it. Where the policy or the settings have client keys, it asks for the admin key
(`AGENT_ROUTER_ADMIN_KEY`, sent as a header, never in a URL); bound beyond loopback with no key
at all, it is off and the log says so.
"""
