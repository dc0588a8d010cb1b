"""gc_paused(): Python's cyclic GC off for a block (loading a model or a vocabulary makes hundreds of
thousands of objects that are never garbage; full collections over them cost ~0.1 s)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Cyclic GC off for the block (restored to its previous state after)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
