"""Plain HTTP reads for the operator: a JSON document from a URL inside the cluster.

Contract: ``await get_json(url, seconds)`` returns the parsed JSON body of a 200 answer,
and raises ``HttpReadError`` (with a one-line reason) for anything else: no answer within
``seconds``, a refused connection, another status, a body that is not JSON. The
operator reads a batch runner's ``GET /progress`` with it (docs/batch.md); like the other
clients of this package, it is the one place such a connection is opened.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp


class HttpReadError(RuntimeError):
    """A URL did not give a JSON document."""


async def get_json(url: str, seconds: float = 5.0) -> Any:
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=seconds)) as session,
            session.get(url) as resp,
        ):
            text = await resp.text()
            if resp.status != 200:
                raise HttpReadError(f"GET {url}: HTTP {resp.status}")
    except (TimeoutError, aiohttp.ClientError, OSError) as e:
        raise HttpReadError(f"GET {url}: {type(e).__name__}: {e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise HttpReadError(f"GET {url}: not JSON ({e.msg})") from None
