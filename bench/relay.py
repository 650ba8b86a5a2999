"""A TCP relay that delays every byte by a fixed time each way: a WAN's latency for bench.netns, where the kernel has
no netem (its qdiscs are tbf alone). It runs in a host's router namespace, on the address the broker advertises, and
forwards to the broker's listener:

    ip netns exec ROUTER python -m bench.relay --listen 10.a.b.9:PORT --to 10.a.b.6:PORT --delay-ms 25

Each chunk read from one side is written to the other `--delay-ms` after it was read, in order, so a request and its
response each take that much longer (25 ms each way: a 50 ms round trip) while the throughput is not capped by the
delay (the chunks in flight are queued, up to QUEUE_BYTES a direction, then the reader waits: back-pressure). What it
does not simulate: TCP's own behaviour over a long round trip (its window and its slow start see the relay's loopback
round trip, not the delay), so it is a latency for the Kafka protocol, not a long fat network.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

QUEUE_BYTES = 16 * 1024 * 1024  # per direction of a connection: a link's bytes in flight, at most
CHUNK = 256 * 1024


async def _carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    """Everything `reader` sends, to `writer`, each chunk `delay_s` after it was read; the end, likewise."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
    pending = [0]  # bytes read and not written yet
    room = asyncio.Condition()

    async def read() -> None:
        while True:
            async with room:
                await room.wait_for(lambda: pending[0] < QUEUE_BYTES)
            data = await reader.read(CHUNK)
            pending[0] += len(data)
            await queue.put((loop.time() + delay_s, data))
            if not data:
                return

    async def write() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
            async with room:
                pending[0] -= len(data)
                room.notify_all()

    try:
        await asyncio.gather(read(), write())
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def _serve(listen: tuple[str, int], to: tuple[str, int], delay_s: float) -> None:
    async def connected(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            broker_reader, broker_writer = await asyncio.open_connection(*to)
        except OSError:
            client_writer.close()  # the broker is down: the client sees its connection refused, as it would
            return
        await asyncio.gather(
            _carry(client_reader, broker_writer, delay_s), _carry(broker_reader, client_writer, delay_s)
        )

    server = await asyncio.start_server(connected, *listen, reuse_address=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"relay: {listen[0]}:{listen[1]} -> {to[0]}:{to[1]}, {delay_s * 1000:g} ms each way", flush=True)
    async with server:
        await stop.wait()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen", required=True, type=_address, help="HOST:PORT to accept connections on")
    parser.add_argument("--to", required=True, type=_address, help="HOST:PORT to forward them to")
    parser.add_argument("--delay-ms", type=float, required=True, help="added to every byte, each way")
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.listen, args.to, args.delay_ms / 1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
