"""Every private attribute of aiohttp and asyncio that the simulator uses, each behind one named
function whose docstring states the contract it relies on (checked against the installed
releases by `tests/unit/test_sim_adapter_contract.py`).

The simulator's truth log stamps when a request's headers reached it (`llmload.sim.connections`):
it must know which read completed a request's headers and reach the socket that read it, and
neither aiohttp nor asyncio says so publicly.
"""

from __future__ import annotations

from typing import Any

from aiohttp.web_protocol import RequestHandler


def requests_parsed(handler: RequestHandler) -> int:
    """How many requests the connection's handler has parsed so far (aiohttp's
    `RequestHandler._request_count`): `data_received` adds one for each request whose headers the
    bytes it was given completed."""
    count: int = handler._request_count
    return count


def transport_socket(handler: RequestHandler) -> Any:
    """The socket object under the connection's transport (asyncio's `TransportSocket._sock`, the
    object the server's listening socket's `accept()` returned), None without one."""
    transport = handler.transport
    wrapper = None if transport is None else transport.get_extra_info("socket")
    return getattr(wrapper, "_sock", None)
