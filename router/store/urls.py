"""Store URLs in logs and errors: the password never shows."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

__all__ = ["redact_url", "url_secrets", "without_option"]


def redact_url(url: str) -> str:
    """The URL with any password (userinfo or `?password=`) replaced by ***; safe to log."""
    try:
        parts = urlsplit(url)
        netloc, query = parts.netloc, parts.query
        if parts.password is not None:
            port = f":{parts.port}" if parts.port else ""
            netloc = f"{parts.username or ''}:***@{parts.hostname or ''}{port}"
        if "password" in query.lower():
            query = urlencode([(k, "***" if k.lower() == "password" else v) for k, v in parse_qsl(query)])
        return parts._replace(netloc=netloc, query=query).geturl()
    except ValueError:
        return f"{url.split(':', 1)[0][:20]}://<unparseable URL hidden>"


def url_secrets(url: str) -> list[str]:
    """Password strings (as written and percent-decoded) to scrub from any text we log."""
    try:
        parts = urlsplit(url)
        found = [parts.password or ""]
        found += [v for k, v in parse_qsl(parts.query) if k.lower() == "password"]
    except ValueError:
        return []
    return sorted({x for s in found if s for x in (s, unquote(s))}, key=len, reverse=True)


def without_option(url: str, name: str) -> str:
    """The URL without the query option `name` (redis-py lets the URL's options win over its arguments)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != name]
    return parts._replace(query=urlencode(query)).geturl()
