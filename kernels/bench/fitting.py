"""What the planners' fits share (topics matmul_shapes and tc_hopper_shapes,
`--fit`): coordinate descent of a model's constants on a loss."""

from __future__ import annotations

from typing import Callable, Sequence

FACTORS = (0.6, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 1.6)


def descend(loss: Callable[[], float], knobs: Sequence, get: Callable, put: Callable, *,
            factors: Sequence[float] = FACTORS, rounds: int = 40, floor: float = 0.0) -> tuple[float, float]:
    """Lower loss() by scaling one knob at a time (get(knob) its value,
    put(knob, v) sets it) by each of `factors`, keeping a change only when
    the loss falls; `rounds` passes over the knobs, no value below floor.
    Returns the loss before and after."""
    before = loss()
    for _ in range(rounds):
        for knob in knobs:
            best_loss, best = loss(), get(knob)
            for f in factors:
                put(knob, max(best * f, floor))
                if (trial := loss()) < best_loss:
                    best_loss, best = trial, get(knob)
                put(knob, best)
    return before, loss()
