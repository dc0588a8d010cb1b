"""`orcd serve --api-processes N`: N API processes over one engine process.

The parent (this module's run_api_processes) supervises and serves nothing itself:
- it starts the engine process (orcd/engine/core_process.py) with one socket pair per API process;
- it binds the HTTP socket (not yet listening: the port refuses connections until an API process is
  ready, as with one process), and hands it to N spawned API processes. Each attaches to the engine
  (ProcessEngine over its socket), renders templates, tokenizes and frames SSE on its own GIL, and
  listens on the shared socket: the kernel spreads connections over the processes accepting;
- SIGTERM/SIGINT: SIGTERM to every API process (each drains as one server does), then the engine process
  exits once its last client has left. An API process that exits unasked stops the server (exit status
  1); an engine process that dies leaves the API processes answering 503 (as with one process).
  If the parent itself dies, each API process sees its pipe's EOF and drains: nothing is left behind.
/metrics: counters and histograms are summed over the API processes (prometheus_client's multiprocess
mode, files in a private directory removed at exit); engine gauges come from the engine's stats, the same
in every process; orcd_event_loop_tasks is the answering process's own.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from multiprocessing import connection as mp_connection
from pathlib import Path

from orcd.cli.serve_http import HttpOptions, serve_app
from orcd.engine.core_process import EngineBuild, engine_main
from orcd.errors import OrcdError
from orcd.server.settings import ServerSettings

log = logging.getLogger("orcd.serve")


def run_api_processes(build: EngineBuild, settings: ServerSettings, opts: HttpOptions, n: int,
                      t0: float) -> int:
    """Serve until SIGTERM/SIGINT with n API processes over one engine process; the exit status."""
    ctx = multiprocessing.get_context("spawn")
    sock = bind_socket(opts.host, opts.port)
    metrics_dir = tempfile.mkdtemp(prefix="orcd-metrics-")
    # prometheus_client reads this at import, in each API process (spawned: they inherit os.environ)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    settings = dataclasses.replace(settings, metrics_dir=metrics_dir)
    pipes = [ctx.Pipe(duplex=True) for _ in range(n)]  # (API end, engine end) per API process
    engine = ctx.Process(target=engine_main, args=([e for _, e in pipes], build), name="orcd-engine",
                         daemon=True)
    lines = [ctx.Pipe(duplex=True) for _ in range(n)]  # (parent end, API end): "ready" up, EOF down
    workers = [ctx.Process(target=api_process, name=f"orcd-api-{i}",
                           args=(i, build.path, pipes[i][0], sock, settings, opts, lines[i][1], t0))
               for i in range(n)]
    try:
        engine.start()
        for w in workers:
            w.start()
        for conn in [c for pair in pipes for c in pair] + [child for _, child in lines]:
            conn.close()  # the children hold them now: EOFs must reach the engine and the API processes
        sock.close()
        return _supervise(workers, engine, [parent for parent, _ in lines], settings, opts, t0)
    finally:
        _stop(workers, engine, settings.shutdown_grace_s + 20)
        shutil.rmtree(metrics_dir, ignore_errors=True)


def bind_socket(host: str, port: int) -> socket.socket:
    """The HTTP socket, bound but not listening (uvicorn listens in each API process once it is ready)."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                      flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as err:
        sock.close()
        raise OrcdError(f"cannot bind http://{host}:{port}: {err}") from None
    return sock


def _supervise(workers: list, engine, lines: list, settings: ServerSettings, opts: HttpOptions,
               t0: float) -> int:
    """Until a signal (exit status 0) or an API process exits unasked (its status, or 1)."""
    stop: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _: stop.append(signum))
    ready, watch = 0, [engine.sentinel]
    while not stop:
        mp_connection.wait([w.sentinel for w in workers] + lines + watch, timeout=0.5)
        for line in [c for c in lines if c.poll()]:
            try:
                line.recv()
            except (EOFError, OSError):
                lines.remove(line)
                continue
            ready += 1
            if ready == len(workers):
                print(f"orcd serve: {settings.served_model_name} served by {ready} API processes on "
                      f"http://{opts.host}:{opts.port} (startup {time.perf_counter() - t0:.1f} s, API key "
                      f"{'on' if settings.api_key else 'off'})", file=sys.stderr, flush=True)
        dead = [w for w in workers if not w.is_alive()]
        if dead and not stop:
            code = dead[0].exitcode
            print(f"orcd serve: API process {dead[0].name} exited (status {code}); stopping",
                  file=sys.stderr, flush=True)
            return code if code not in (0, None) else 1
        if watch and not engine.is_alive():
            watch = []
            print(f"orcd serve: the engine process exited (status {engine.exitcode}); /health says 503",
                  file=sys.stderr, flush=True)
    return 0


def _stop(workers: list, engine, wait_s: float) -> None:
    """SIGTERM to the API processes (they drain), then wait for them and for the engine process, which
    exits when its last client has gone; whatever is left after wait_s is killed."""
    for w in workers:
        if w.is_alive():
            os.kill(w.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    for proc in [*workers, engine]:
        if proc.pid is None:  # never started
            continue
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            log.warning("%s did not exit in time: killed", proc.name)
            proc.kill()
            proc.join(timeout=10)


def api_process(index: int, path: Path, conn, sock, settings: ServerSettings, opts: HttpOptions, parent,
                t0: float) -> None:
    """An API process's entry point (multiprocessing "spawn" target)."""
    from orcd.engine.core_client import ProcessEngine

    logging.basicConfig(level=opts.log_level.upper(), stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s %(name)s[api {index}]: %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # while attaching (the parent sends SIGTERM); uvicorn
    # installs its own handlers while it serves
    try:
        engine = ProcessEngine(path, conn, model_name=settings.served_model_name)
    except OrcdError as err:
        if index == 0:  # every API process hears the same failure: say it once
            print(f"orcd serve: error: {err}", file=sys.stderr, flush=True)
        sys.exit(2)
    sys.exit(serve_app(engine, settings, opts, t0, sock=sock, parent=parent))
