"""Fixtures of the API integration tests (see tests/api/helpers.py)."""

from tests.api.helpers import sdk

__all__ = ["sdk"]
