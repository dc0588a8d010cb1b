"""Compile-only Triton on a CPU box: every kernel launch made through orcd's own wrappers is compiled for
an H100 (sm_90: Triton's full pipeline, PTX through the wheel's ptxas to a cubin) and not run.

How: a stand-in Triton driver whose current target is GPUTarget("cuda", 90, 32), and JITFunction.run
turned into its warmup form (compile, cache, skip the launch). Tensors stay on the CPU: the binder reads
only their dtype and data_ptr alignment. Outputs stay torch.empty garbage (a case must not index with
them on the host); only compilation matters.
The variant helpers answer as on an H100: kernels apply to these CPU tensors (orcd.env.triton_interpreter
True for the wrappers' device checks), programmatic dependent launch on (pdl_enabled), inline PTX on
(asm_ok). Process-wide and not undone (driver, helpers): use it in a subprocess (compile_cases.py),
never inside the pytest process.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
import sys
import time
from dataclasses import dataclass, field

H100_SHARED = 232448  # bytes of shared memory a block may opt into on sm_90 (227 KB)


@dataclass
class Compiled:
    """One compiled specialization: kernel (module.name), shared memory (bytes), its constexpr and launch
    keywords, compile time (s)."""
    name: str
    shared: int
    constexprs: str
    seconds: float


@dataclass
class Record:
    kernels: list[Compiled] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # "<kernel> <constexprs>\n<error, shortened>"


def short_error(exc: Exception) -> str:
    """The exception's first lines and its distinct lines naming an error, without ptxas's file and line
    prefix (ptxas's message carries the whole PTX)."""
    lines = f"{type(exc).__name__}: {exc}".splitlines()
    errors = dict.fromkeys(ln.split("; ", 1)[-1] for ln in lines[3:] if "error" in ln.lower())
    return "\n".join(lines[:3] + list(errors)[:10])


class _Sm90Driver:
    """The parts of Triton's driver the JIT path reads before a launch."""

    def __init__(self, target):
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0


def _sm90_answers() -> None:
    """Rebind orcd's variant helpers, wherever a module imported them by name, to an H100's answer (the
    kernel, layer and runner modules imported first, so none binds the originals later)."""
    import orcd.models.layers
    import orcd.quant.kernels
    import orcd.runner
    from orcd import env
    from orcd.quant.kernels import fused_linear, xquant

    for pkg in (orcd.quant.kernels, orcd.models.layers, orcd.runner):
        for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + "."):
            importlib.import_module(info.name)
    originals = {fused_linear.pdl_enabled, xquant.asm_ok}
    env.triton_interpreter = lambda: True  # the wrappers' "kernels run on this device" check
    for name, mod in list(sys.modules.items()):
        if name.startswith("orcd."):
            for attr, value in list(vars(mod).items()):
                if any(value is o for o in originals):
                    setattr(mod, attr, _yes)


def _yes(device) -> bool:
    return True


@contextlib.contextmanager
def compile_only(record: Record):
    """Launches inside compile for sm_90 and record each new specialization, or the failure (then the
    launch returns None and the caller goes on); nothing runs."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    driver.set_active(_Sm90Driver(GPUTarget("cuda", 90, 32)))
    launch, seen = JITFunction.run, set()

    def run(self, *args, grid, warmup, **kwargs):
        name = f"{self.fn.__module__}.{self.fn.__qualname__}"
        consts = ",".join(f"{k}={v}" for k, v in kwargs.items() if k.isupper())
        t0 = time.perf_counter()
        try:
            kernel = launch(self, *args, grid=grid, warmup=True, **kwargs)
        except Exception as exc:  # recorded once; the wrapper goes on to its next launch
            if not any(f.startswith(f"{name} {consts}\n") for f in record.failures):
                record.failures.append(f"{name} {consts}\n{short_error(exc)}")
            return None
        if id(kernel) not in seen:  # a new specialization (Triton keeps each compiled kernel cached)
            seen.add(id(kernel))
            shared = int(kernel.metadata.shared)
            if shared > H100_SHARED:  # the launch would fail (out of resources) on the GPU
                record.failures.append(f"{name} {consts}\n{shared} bytes of shared memory > {H100_SHARED}")
            record.kernels.append(Compiled(name, shared, consts, time.perf_counter() - t0))
        return kernel

    JITFunction.run = run
    _sm90_answers()
    try:
        yield record
    finally:
        JITFunction.run = launch
