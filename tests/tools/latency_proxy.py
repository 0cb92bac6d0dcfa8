"""A TCP proxy that adds round-trip time, as a far-away object store has it.

    python tests/tools/latency_proxy.py --upstream 127.0.0.1:8333 --latency-ms 20

Every byte is held half the latency on its way up and half on its way down,
so each HTTP request over a kept-alive connection takes `latency` more; a
new connection's set-up is delayed by the latency too (as a TCP handshake
is). Order within a connection is kept. One asyncio loop: it forwards at
thousands of requests a second on one core (bench_s3.py measures its ceiling
against the server reached directly). This kernel has no `tc netem`.
Prints "port N" on its first line.
"""
import argparse
import asyncio
import collections
import sys


async def pump(reader, writer, delay):
    """Copies reader to writer, each chunk written `delay` s after it arrived."""
    loop = asyncio.get_running_loop()
    queue = collections.deque()
    ready = asyncio.Event()

    async def send():
        while True:
            while not queue:
                ready.clear()
                await ready.wait()
            due, data = queue.popleft()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    sender = asyncio.ensure_future(send())
    try:
        while True:
            data = await reader.read(1 << 16)
            queue.append((loop.time() + delay, data or None))
            ready.set()
            if not data:
                break
        await sender
    except (ConnectionError, OSError):
        sender.cancel()
        writer.close()


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True, help="HOST:PORT (or http://HOST:PORT)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency-ms", type=float, default=0.0)
    args = ap.parse_args()
    host, port = args.upstream.split("://")[-1].rstrip("/").rsplit(":", 1)
    half = args.latency_ms / 2000

    async def serve(client_r, client_w):
        await asyncio.sleep(2 * half)  # the handshake's round trip
        try:
            up_r, up_w = await asyncio.open_connection(host, int(port))
        except OSError:
            client_w.close()
            return
        await asyncio.gather(pump(client_r, up_w, half), pump(up_r, client_w, half),
                             return_exceptions=True)

    server = await asyncio.start_server(serve, "127.0.0.1", args.port, backlog=1024)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    except KeyboardInterrupt:
        pass
