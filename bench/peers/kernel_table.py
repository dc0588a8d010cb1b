"""A torch.profiler run's GPU kernels grouped by name, per unit of work (a decode step, a token): the table
step_profile.py and kernels/gpt_oss_profile.py write to their JSON and print."""

from __future__ import annotations

from collections import defaultdict

import torch


def kernel_rows(prof, units: int, unit: str, name_chars: int) -> tuple[float, list[dict]]:
    """(µs of CUDA kernels per unit, rows sorted slowest first) of a profile over `units` units: each row
    {"kernel": name cut to name_chars, "calls_per_<unit>", "us_per_<unit>", "share" of the total}."""
    per: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])  # name -> [calls, µs]
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and ev.device_time_total > 0:
            per[ev.name][0] += 1
            per[ev.name][1] += ev.device_time_total  # µs
    total = sum(v[1] for v in per.values())
    rows = sorted(({"kernel": k[:name_chars], f"calls_per_{unit}": c / units, f"us_per_{unit}": t / units,
                    "share": t / total} for k, (c, t) in per.items()), key=lambda r: -r[f"us_per_{unit}"])
    return total / units, rows


def print_rows(rows: list[dict], unit: str, top: int, name_chars: int) -> None:
    """The `top` slowest rows: µs per unit, calls per unit, share, kernel name (cut to name_chars)."""
    for r in rows[:top]:
        print(f"{r[f'us_per_{unit}']:9.1f} us {r[f'calls_per_{unit}']:6.1f}x {100 * r['share']:5.1f}%  "
              f"{r['kernel'][:name_chars]}")
