"""Every launch wrapper rejects an output that shares memory with an input.

The kernels declare their pointers __restrict__ and read inputs that other
threads may already have overwritten: `conv2d_cupy(x, w, out=x)` or an out
that is x shifted by one element would give a silently wrong answer. So each
wrapper that takes a caller's output (kernels/ and the examples' copies) must
raise ValueError naming the output and the input, for

- out identical to the input (or, where the shapes differ, starting where it
  starts),
- out a view of the same buffer shifted by one element (four for float4
  kernels, which must stay 16-byte aligned),

and must accept out placed right after the input in the same buffer, giving
the answer a separate out gets and leaving the input as it was.

Sizes need many blocks (at least 8), so that without the check the kernel
really would go wrong: 2^20 elements or 1024 x 1024 on a GPU; in Numba's
CUDA simulator a few hundred elements in blocks of 32 threads. (The
simulator runs a grid-stride kernel of kernels/host_transfer.py on 2 blocks
whatever n is; its threads then loop over the rest.) CuPy cases need a GPU.

Each chapter declares its cases beside it, in tests/test_<topic>.py
(`overlap_cases()`, made of tests/overlap.py's `Case`; tests/chapters.py
finds them), and the functions that need none (`OVERLAP_EXEMPT`).
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import numpy as np
import pytest

from tests import chapters
from tests.overlap import poison, to_host, to_lib, values, view

ROOT = Path(__file__).resolve().parent.parent
CASES = chapters.overlap_cases()


def params():
    out = []
    for case in CASES:
        for name in case.inputs:
            marks = [pytest.mark.gpu] if case.gpu else []
            out.append(pytest.param(case, name, id=f"{case.id}[{name}]", marks=marks))
    return out


# -------------------------------------------------------------- tests --

@pytest.mark.parametrize("case,name", params())
def test_out_sharing_memory_with_an_input_is_rejected(case, name):
    rng = np.random.default_rng(1)
    host = {k: values(rng, shape, case.dtype) for k, shape in case.inputs.items()}
    inputs = {k: to_lib(v, case.lib) for k, v in host.items()}
    shape, size = case.inputs[name], host[name].size
    out_size = math.prod(case.out_shape)
    # one buffer: the input first, then room for an out of its own
    buf = to_lib(np.concatenate([host[name].ravel(), poison(out_size + case.shift, case.dtype)]), case.lib)
    x = view(buf, 0, shape)
    message = re.escape(f"{case.out_name} must not overlap {name}")

    # out is the input itself (or, where the shapes differ, starts where it starts)
    same = x if tuple(shape) == tuple(case.out_shape) else view(buf, 0, case.out_shape)
    with pytest.raises(ValueError, match=message):
        case.call({**inputs, name: x}, same)
    # out is the same buffer shifted by a few elements: every element but the
    # first few is both read and written
    with pytest.raises(ValueError, match=message):
        case.call({**inputs, name: x}, view(buf, case.shift, case.out_shape))

    # out right after the input, in the same buffer: no byte shared, accepted
    beside = view(buf, size, case.out_shape)
    case.call({**inputs, name: x}, beside)
    alone = view(to_lib(poison(out_size, case.dtype), case.lib), 0, case.out_shape)
    case.call(inputs, alone)  # inputs[name] holds the same values in an allocation of its own
    np.testing.assert_allclose(to_host(beside, case.lib), to_host(alone, case.lib), rtol=1e-5, atol=1e-6)
    if case.input_kept:
        np.testing.assert_array_equal(to_host(buf, case.lib)[:size], host[name].ravel())


def test_every_wrapper_with_an_output_is_covered():
    """A function taking an `out` (or `out_host`, `work`) in any kernels/
    module or example must get a case in its chapter's tests/test_<topic>.py,
    or a reason in its OVERLAP_EXEMPT."""
    covered = {c.id.rsplit(".", 1)[-1].removesuffix("_work") for c in CASES}
    exempt = chapters.overlap_exempt()
    files = sorted((ROOT / "kernels").glob("*.py")) + sorted((ROOT / "examples").glob("*.py"))
    missing = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            if any("jit" in ast.unparse(d) for d in node.decorator_list):
                continue  # a kernel, not a wrapper
            names = {a.arg for a in node.args.args + node.args.kwonlyargs}
            if names & {"out", "out_host", "work"} and node.name not in covered | set(exempt):
                missing.append(f"{f.relative_to(ROOT)}:{node.name}")
    assert not missing, "wrappers taking an output with no overlap case: " + ", ".join(missing)
