"""An L4 round-robin TCP proxy on 127.0.0.1 — what a Service does for webhook replicas.

Run as its own process (`python -m e2e.testbed.tcpproxy --port P --backend A
--backend B`) so that proxying never competes with the test's own event loop. TLS passes
through untouched: the API server still verifies the webhook's certificate. A backend refusing
connections is skipped (a Service drops a dead endpoint; connections it held are lost).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import signal
from collections.abc import Sequence


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def serve(port: int, backends: Sequence[int]) -> None:
    turn = itertools.cycle(backends)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # a backend that refuses connections is skipped, as a Service drops a dead endpoint
        for _ in range(len(backends)):
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", next(turn))
                break
            except OSError:
                continue
        else:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--backend", type=int, action="append", required=True)
    args = p.parse_args()
    asyncio.run(serve(args.port, args.backend))


if __name__ == "__main__":
    main()
