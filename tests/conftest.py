"""Shared test configuration (helpers live in helpers.py)."""

from __future__ import annotations

import pytest
import trio.testing


@pytest.fixture
def socket_autojump_clock() -> trio.testing.MockClock:
    """Virtual time for tests that also move bytes over real loopback sockets.

    ``autojump_clock`` jumps as soon as every task is blocked, which on a loaded machine
    can be while a loopback packet is still in the kernel; waiting 50 ms of real idle
    time first means only a truly idle run is fast-forwarded.
    """
    return trio.testing.MockClock(autojump_threshold=0.05)


@pytest.fixture(autouse=True, scope="session")
def _http_pool_warm() -> None:
    """Load the HTTP clients' CA bundle before any test: the first client loads it in a
    worker thread, which under a virtual clock could let time jump in mid-test."""
    from toolnexus_trio import _http_client

    _http_client._load_ssl_context()
