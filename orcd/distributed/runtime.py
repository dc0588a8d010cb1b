"""Process groups and the launcher: one process per rank (torch.multiprocessing spawn).

CUDA: rank r drives cuda:r over NCCL; the control messages (pickled step plans) go over a gloo group so
they never touch the GPU. CPU: gloo for both. NVLink multicast (NVLS) stays off in every rank.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from orcd import env
from orcd.distributed.partition import TensorParallelError
from orcd.errors import OrcdError

# NVLink multicast off in NCCL, PyTorch's symmetric memory and NVSHMEM: a program that uses it can put a
# host's GPUs out of service. Set in the launcher (inherited by every spawned rank) and again in each rank.
RANK_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# Followers wait in a broadcast while the leader idles (a server with no traffic): the control group's
# timeout must outlast any idle spell. A dead peer still fails fast (its socket closes).
CONTROL_TIMEOUT = timedelta(days=30)
COLLECTIVE_TIMEOUT = timedelta(minutes=10)


@dataclass
class TPContext:
    rank: int
    world: int
    device: torch.device
    group: object  # tensor collectives (NCCL on CUDA, gloo on CPU); None = the default group
    control: object  # gloo group for pickled control messages
    all_reduce: str = "nccl"  # the TP decode graphs' residual all-reduce: "nccl" or "symm" (fused_tp.py)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resolve_tp_device(device: str, world: int) -> str:
    """'cpu' or 'cuda' for a run over `world` ranks; 'auto' picks CUDA when it has enough GPUs."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() and torch.cuda.device_count() >= world else "cpu"
    if device not in ("cpu", "cuda"):
        raise TensorParallelError(f"--device {device}: with --tensor-parallel use cpu, cuda or auto "
                                  "(rank r runs on cuda:r)")
    if device == "cuda" and torch.cuda.device_count() < world:
        raise TensorParallelError(f"--tensor-parallel {world} needs {world} GPUs, "
                                  f"{torch.cuda.device_count()} visible")
    return device


def refuse_engine_process(args) -> None:
    """`orcd serve --engine-process` (or ORCD_ENGINE_PROCESS=1) with --tensor-parallel: refused by name.
    Rank 0 runs the engine's step loop on a thread beside the HTTP server (the ranks are processes
    already); a separate engine process would have to be rank 0 itself, which the launcher does not do.
    Unset (the CUDA default) means the in-process loop, as before."""
    if not hasattr(args, "engine_process"):  # orcd generate: no such option
        return
    chosen = env.engine_process() if args.engine_process is None else args.engine_process
    if chosen:
        raise TensorParallelError("--engine-process (or ORCD_ENGINE_PROCESS=1) is not supported with "
                                  "--tensor-parallel: rank 0 runs the step loop on a thread of its own "
                                  "process; pass --no-engine-process")


def rank_args_for(args) -> tuple[int, str, object]:
    """Checks `--tensor-parallel N` against the file before any process starts.
    Returns (world, device kind, a copy of args with the resolved model path and device)."""
    import argparse

    from orcd.distributed.partition import check_file_shardable
    from orcd.gguf import open_gguf
    from orcd.gguf.config import model_config_from_gguf
    from orcd.hub import resolve_model_path

    world = args.tensor_parallel
    refuse_engine_process(args)
    if world < 1:
        raise TensorParallelError(f"--tensor-parallel {world}: need at least 1 rank")
    device = resolve_tp_device(args.device, world)
    path = resolve_model_path(args.model)
    f = open_gguf(path)
    check_file_shardable(f, model_config_from_gguf(f), world)
    rank_args = argparse.Namespace(**vars(args))
    rank_args.model, rank_args.device = str(path), device
    return world, device, rank_args


def init_rank(rank: int, world: int, device_kind: str, port: int) -> TPContext:
    os.environ.update(RANK_ENV)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device_kind == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT,
                                device_id=device)
        with _stdout_to_stderr():
            control = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
        return TPContext(rank, world, device, None, control)
    with _stdout_to_stderr():
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=CONTROL_TIMEOUT)
    return TPContext(rank, world, torch.device("cpu"), None, None)


@contextlib.contextmanager
def _stdout_to_stderr():
    """File descriptor 1 goes to stderr meanwhile: gloo's C++ prints "[Gloo] Rank N is connected to ..."
    on stdout when a group connects (torch 2.9), where `orcd generate` writes its text."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _die_with_launcher() -> None:
    """Linux: this rank is sent SIGTERM when the launcher dies, even by SIGKILL, so no rank outlives it
    (rank 0 of a server then drains and releases the others; a follower just ends). torch's spawn sets
    SIGINT for this, which a server's followers ignore (serve_rank)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)


def _entry(rank: int, world: int, device_kind: str, port: int, threads: int, fn, fn_args: tuple) -> None:
    _die_with_launcher()
    if threads:
        torch.set_num_threads(threads)
    ctx = init_rank(rank, world, device_kind, port)
    code = 0
    try:
        code = int(fn(ctx, *fn_args) or 0)
    except OrcdError as err:  # a user error: one line, no traceback (the CLI's convention)
        print(f"orcd: error: {err}", file=sys.stderr, flush=True)
        code = 2
    finally:
        _teardown(rank, device_kind, code)
    if code:
        sys.exit(code)


def _teardown(rank: int, device_kind: str, code: int, timeout_s: float = 10.0) -> None:
    """destroy_process_group; on CUDA in a helper thread, and a rank that waits on it longer than
    timeout_s exits without it, so a shutdown never leaves a rank behind. After NCCL collectives were
    captured into CUDA graphs (tp_runner.py) the teardown hung on 2 H100s (torch 2.11, NCCL 2.28;
    pytorch/pytorch#115388), probably because NCCL keeps a captured collective's resources until its
    graph is destroyed: so the graphs go first (gc: the runners are unreachable by now) and the device
    is synchronized (not yet run on GPUs; the time limit is what was seen to work)."""
    if device_kind != "cuda":
        dist.destroy_process_group()
        return
    gc.collect()
    torch.cuda.synchronize()
    t = threading.Thread(target=dist.destroy_process_group, name="orcd-pg-teardown", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        print(f"orcd: rank {rank}: process group teardown still running after {timeout_s:.0f} s; "
              "exiting without it", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(code)


def launch(world: int, device_kind: str, fn, fn_args: tuple = (), threads: int = 0,
           forward_signals: bool = False) -> int:
    """Run fn(ctx, *fn_args) on `world` spawned ranks (fn must be a module-level function); returns the
    first non-zero exit status, else 0. A rank that fails ends the others (SIGTERM, then SIGKILL).
    forward_signals: SIGTERM/SIGINT to this process become a SIGTERM to rank 0 (the server), which
    drains and then releases the other ranks."""
    os.environ.update(RANK_ENV)  # inherited by every rank, before CUDA/NCCL is touched there
    port = free_port()
    procs = mp.spawn(_entry, args=(world, device_kind, port, threads, fn, fn_args), nprocs=world, join=False)
    saved = {}
    if forward_signals:
        def forward(signum, frame) -> None:
            if procs.processes[0].is_alive():
                os.kill(procs.processes[0].pid, signal.SIGTERM)

        saved = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not procs.join(grace_period=5):
            pass
    except mp.ProcessExitedException as err:  # exit_code < 0: killed by a signal
        return err.exit_code if err.exit_code and err.exit_code > 0 else 1
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    return 0
