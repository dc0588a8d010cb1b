"""The HTTP side of `orcd serve`: the app around an engine, under uvicorn, until SIGTERM/SIGINT drains it.

Used by `orcd serve` in its one process, and by each API process of `orcd serve --api-processes N`
(orcd/cli/serve_procs.py), which serves a listening socket its parent bound and shares.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from dataclasses import dataclass

from orcd.engine.core_process import freeze_heap
from orcd.server.settings import ServerSettings


@dataclass(frozen=True)
class HttpOptions:
    """How uvicorn serves (picklable: it crosses to the API processes)."""

    host: str = "127.0.0.1"
    port: int = 8080
    http: str = "auto"  # auto | h11 | httptools
    loop: str = "auto"  # auto | asyncio | uvloop
    log_level: str = "info"
    gil_switch_interval: float | None = None  # sys.setswitchinterval, seconds


def serve_app(engine, settings: ServerSettings, opts: HttpOptions, t0: float, sock=None, parent=None) -> int:
    """Serve `engine` (an AsyncEngine, ProcessEngine or ModelPool) until a signal drains it; the exit
    status. `sock`: a bound socket to listen on (else opts.host:opts.port). `parent`: a Connection to the
    supervising process; "ready" goes up once the app has started, and its EOF (the parent is gone) drains
    this server as SIGTERM would."""
    import uvicorn

    from orcd.server.app import begin_drain, create_app

    app = create_app(engine, settings)

    class DrainingServer(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if parent is not None and not self.should_exit:
                parent.send(("ready",))
                _watch_parent(parent, self)

        async def shutdown(self, sockets=None) -> None:
            begin_drain(app)
            await super().shutdown(sockets)

    config = uvicorn.Config(app, host=opts.host, port=opts.port, log_level=opts.log_level, http=opts.http,
                            loop=opts.loop, timeout_graceful_shutdown=settings.shutdown_grace_s + 10,
                            access_log=False)
    server = DrainingServer(config)
    # uvicorn re-raises the signal it caught once it has shut down; a no-op handler makes that a
    # clean return, so SIGTERM ends with exit status 0 after the drain.
    signal.signal(signal.SIGTERM, lambda *_: None)
    if opts.gil_switch_interval is not None:
        sys.setswitchinterval(opts.gil_switch_interval)
    freeze_heap()  # the loaded model and tokenizer: out of the cyclic GC's walks while serving
    if parent is None:
        served = settings.served_model_name or "models"
        print(f"orcd serve: {served} ready to bind http://{opts.host}:{opts.port} "
              f"(startup {time.perf_counter() - t0:.1f} s, API key {'on' if settings.api_key else 'off'})",
              file=sys.stderr, flush=True)
    server.run(sockets=None if sock is None else [sock])
    return 0 if server.started else 1


def _watch_parent(parent, server) -> None:
    """The parent never writes after start: the pipe turns readable only at its EOF."""
    loop = asyncio.get_running_loop()

    def gone() -> None:
        loop.remove_reader(parent.fileno())
        server.handle_exit(signal.SIGTERM, None)

    loop.add_reader(parent.fileno(), gone)
