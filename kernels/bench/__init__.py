"""`make bench`: measure every topic on the GPU, write the results file and plots.

    python -m kernels.bench                      # every topic
    python -m kernels.bench --topics vector_add  # one topic; the others are kept

Each topic module exposes `TOPIC`, `measure(quick) -> list[record]` and
`plot(data, out_dir) -> list[Path]`.
"""

from __future__ import annotations

from . import (ceilings, coalescing, divergence, energy, four_step, host_transfer, ilp, latency, matmul,
               occupancy_check, occupancy_sweep, reduction, transpose, vector_add)

TOPICS = {m.TOPIC: m for m in (ceilings, vector_add, reduction, divergence, ilp, matmul, latency, energy,
                                 coalescing, transpose, host_transfer, occupancy_check,
                                 occupancy_sweep, four_step)}
