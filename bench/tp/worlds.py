"""Run a rank function at several world sizes in turn and collect rank 0's rows (replay_time.py,
prefill_profile.py)."""

from __future__ import annotations

import json
from pathlib import Path


def rows_by_world(worlds: list[int], device: str, rank_fn, args: tuple, out: Path, name: str) -> list[dict]:
    """launch(n, device, rank_fn, (*args, tmp)) for each n in worlds; rank 0 writes its rows (a JSON list)
    to tmp. Returns them all; out/name is rewritten after each world, so a run cut short keeps the
    earlier ones. A world whose launch fails adds no rows."""
    from orcd.distributed.runtime import launch

    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    tmp = out / f".{name}"
    for n in worlds:
        if launch(n, device, rank_fn, (*args, str(tmp))) == 0:
            rows += json.loads(tmp.read_text())
            tmp.unlink()
            (out / name).write_text(json.dumps(rows, indent=1))
    return rows
