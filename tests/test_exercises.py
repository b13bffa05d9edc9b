"""The checked exercises (kernels/exercises.py, examples/exercises/).

Every reference solution passes its task's checks, in Numba's simulator on
the CPU and on the GPU (the speed goals too, on the GPU: `make check`);
every untouched starter fails with a message that names what is wrong;
planted faults in the solutions fail; and the grader's own checks catch
known-wrong kernels: a write past the end, a read past the end, an element
left unwritten, a race, a wrong value.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernels import exercise_tasks as et, exercises as ex
from kernels.device import has_gpu

GPU = has_gpu()
NUMBA = [t for t in ex.tasks().values() if t.kind == "numba"]
CUDA = [t for t in ex.tasks().values() if t.kind == "cuda"]
gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU (CUDA C tasks and the speed goals)")

# What each untouched starter must be told (a part of the grader's message).
STARTER_SAYS = {
    "vector_add_guard": "past the end",
    "vector_add_grid_stride": "never written",
    "vector_add_cuda": "past the end",
    "transpose_tiled": "past the end" if not GPU else "size",
    "block_sum": "past the end" if not GPU else "read past the end",
    "occupancy_block_size": "never written",
    'coalesced_copy': 'never written',
    'stencil_borders': 'a wrong value',
    'stencil_tiled': 'a wrong value',
    'occupancy_staged_add': 'past the end',
    'ilp_dot': 'a wrong value',
    'ilp_chains': 'a wrong value',
    'sgemm_tiled_edges': 'past the end',
    'sgemm_register_tiles': 'never written',
    'spmv_csr_rows': 'a wrong value',
    'softmax_rows': 'a wrong value',
    'divergence_branch_free': 'a wrong value',
    'wmma_gemm_edges': 'never written',
    'wmma_gemm_smem': 'never written',
    'ws_double_buffer': 'never written',
    'ws_cp_async': 'past the end',
}

# Planted faults in the solutions: (task, old, new); each must make the check fail.
FAULTS = [
    ("vector_add_guard", "if i < out.shape[0]:", "if i <= out.shape[0]:"),
    ("vector_add_guard", "out[i] = a[i] + b[i]", "out[i] = a[i] - b[i]"),
    ("vector_add_grid_stride", "range(start, out.shape[0], stride)", "range(start, out.shape[0] - 1, stride)"),
    ("vector_add_grid_stride", "start, stride = cuda.grid(1), cuda.gridsize(1)",
     "start, stride = cuda.grid(1), cuda.gridsize(1) + 1"),
    ("vector_add_cuda", "if (i < n) out[i]", "if (i <= n) out[i]"),
    ("transpose_tiled", "out[r, c] = tile[tx, ty]", "out[r, c] = tile[ty, tx]"),
    ("transpose_tiled", "if r < cols and c < rows:", "if r < cols and c < rows - 1:"),
    ("block_sum", "if i < x.shape[0] else float32(0)", "if i < x.shape[0] else float32(1)"),
    ("block_sum", "s = THREADS // 2", "s = THREADS // 4"),
    ("occupancy_block_size", "(n + THREADS - 1) // THREADS", "n // THREADS + (n % THREADS > 1)"),
    ("occupancy_block_size", "if i < out.shape[0]:", "if i < out.shape[0] - 1:"),
    ('coalesced_copy', 'range(start, out.shape[0], stride)', 'range(start, out.shape[0] - 1, stride)'),
    ('coalesced_copy', 'out[i] = x[i]', 'out[i] = x[i + 1]'),
    ('stencil_borders', '0 <= xx < W', '0 <= xx <= W'),
    ('stencil_borders', 'yy, xx = row + i - R, col + j - R', 'yy, xx = row + i - R, col + j - R - 1'),
    ('stencil_borders', 'out[row * W + col] = acc', 'out[row * H + col] = acc'),
    ('stencil_tiled', 'yy, xx = y0 + r - R, x0 + c - R', 'yy, xx = y0 + r - R, x0 + c - R + 1'),
    ('stencil_tiled', '0 <= yy < H and 0 <= xx < W', '0 <= yy < H and 0 <= xx <= W'),
    ('stencil_tiled', 'acc += w[i, j] * tile[ty + i, tx + j]', 'acc += w[i, j] * tile[ty + j, tx + i]'),
    ('occupancy_staged_add', 'if base + k < n:  # the last tile', 'if base + k <= n:  # the last tile'),
    ('occupancy_staged_add', 'sb[k] = b[base + k]', 'sb[k] = a[base + k]'),
    ('occupancy_staged_add', 'base, t = cuda.blockIdx.x * TILE,', 'base, t = cuda.blockIdx.x * THREADS,'),
    ('ilp_dot', 'while i < n:  # the tail', 'while i < n - 1:  # the tail'),
    ('ilp_dot', 's2 += a[i + 2 * stride] * b[i + 2 * stride]', 's2 += a[i + 2 * stride] * b[i + stride]'),
    ('ilp_dot', 'i += 4 * stride', 'i += 3 * stride'),
    ('ilp_chains', 'acc1 = acc1 * a + b', 'acc1 = acc0 * a + b'),
    ('ilp_chains', 'out[i] = (acc0 + acc1) + (acc2 + acc3)', 'out[i] = (acc0 + acc1) + acc2'),
    ('sgemm_tiled_edges', 'if row < M and k0 + tx < K else', 'if row < M else'),
    ('sgemm_tiled_edges', 'if row < M and col < N:', 'if row < M and col < N - 1:'),
    ('sgemm_tiled_edges', 'for k in range(TILE):', 'for k in range(TILE - 1):'),
    ('sgemm_register_tiles', 'b[j] = Bs[k, tx + j * TX]', 'b[j] = Bs[k, tx + j]'),
    ('sgemm_register_tiles', 'if k0 + r < K and n0 + c < N else', 'if n0 + c < N else'),
    ('sgemm_register_tiles', 'row = m0 + ty + i * TY', 'row = m0 + ty * TM + i'),
    ('spmv_csr_rows', 'acc = float32(0.0)', 'acc = float32(0.001)'),
    ('spmv_csr_rows', 'range(indptr[row], indptr[row + 1])', 'range(indptr[row], indptr[row + 1] - 1)'),
    ('spmv_csr_rows', 'if row < out.shape[0]:', 'if row < out.shape[0] - 1:'),
    ('softmax_rows', 's = s * math.exp(m - v) + float32(1.0)', 's = s + float32(1.0)'),
    ('softmax_rows', '    if s2 == 0:\n        return m1, s1\n    if s1 == 0:\n        return m2, s2\n', ''),
    ('softmax_rows', 'out[r, c] = math.exp(x[r, c] - m) / s', 'out[r, c] = math.exp(x[r, c]) / s'),
    ('divergence_branch_free', 'b = B_POS if pos else B_NEG', 'b = B_POS if v > 0 else B_NEG'),
    ('divergence_branch_free', 'pos = v >= 0', 'pos = cuda.threadIdx.x % 2 == 0'),
    ('wmma_gemm_edges', 'for (int k0 = 0; k0 < K; k0 += 16) {', 'for (int k0 = 0; k0 + 16 <= K; k0 += 16) {'),
    ('wmma_gemm_edges', '__half, wmma::row_major> b;', '__half, wmma::col_major> b;'),
    ('wmma_gemm_edges', 'if (row0 >= M || col0 >= N) return;', 'if (row0 + 16 > M || col0 + 16 > N) return;'),
    ('wmma_gemm_smem', '&Bs[kk][wn + j * 16], BN + PAD);', '&Bs[kk][wn + j * 16], BN);'),
    ('wmma_gemm_smem', 'if (r < M && c < N)', 'if (r + 16 < M && c < N)'),
    ('wmma_gemm_smem', 'for (int kk = 0; kk < BK; kk += 16) {', 'for (int kk = 0; kk < BK; kk += 32) {'),
    ('ws_double_buffer', '    while tile < tiles:\n', '    while tile + cuda.gridDim.x < tiles:\n'),
    ('ws_double_buffer', 'v = buf[cur, q]', 'v = buf[1 - cur, q]'),
    ('ws_double_buffer', 'i = nxt * TILE + t + j * THREADS', 'i = tile * TILE + t + j * THREADS'),
    ('ws_cp_async', 'const int bytes = n - i >= 4 ? 16 : (int)(n - i) * 4;', 'const int bytes = base + TILE <= n ? 16 : 0;'),
    ('ws_cp_async', 'if (i + 1 < n) out[i + 1] = v.y;', ''),
    ('ws_cp_async', 'if (i >= n) break;', 'if (i + 4 > n) break;'),
]


def test_every_task_has_a_starter_a_solution_and_a_chapter():
    from tests import pages as P

    assert len(ex.tasks()) >= 20
    assert len({t.chapter for t in ex.tasks().values()}) == 10 and all(
        sum(t.chapter == c for t in ex.tasks().values()) >= 2 for c in {t.chapter for t in ex.tasks().values()})
    for t in ex.tasks().values():
        assert (ex.STARTERS / f"{t.name}.py").is_file() and (ex.SOLUTIONS / f"{t.name}.py").is_file()
        assert (P.DOCS / f"{t.chapter}.md").is_file()
        assert t.name in (ex.STARTERS / f"{t.name}.py").read_text()  # its docstring names the check command


@pytest.mark.parametrize("task", NUMBA + CUDA, ids=lambda t: t.name)
def test_the_solution_passes(task):
    if task.kind == "cuda" and not GPU:
        pytest.skip("a CUDA C task needs a GPU")
    report = ex.check(task.name, ex.SOLUTIONS / f"{task.name}.py", time=False)
    assert report.ok, str(report)


@pytest.mark.parametrize("task", NUMBA + CUDA, ids=lambda t: t.name)
def test_the_untouched_starter_fails_and_says_why(task):
    if task.kind == "cuda" and not GPU:
        pytest.skip("a CUDA C task needs a GPU")
    report = ex.check(task.name, time=False)
    assert not report.ok, str(report)
    assert "FAILED" in str(report) and STARTER_SAYS[task.name] in str(report), str(report)


@pytest.mark.parametrize("name, old, new", FAULTS, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(FAULTS)])
def test_a_fault_planted_in_a_solution_fails(name, old, new, tmp_path):
    if ex.tasks()[name].kind == "cuda" and not GPU:
        pytest.skip("a CUDA C task needs a GPU")
    text = (ex.SOLUTIONS / f"{name}.py").read_text()
    assert text.count(old) == 1, old
    mutant = tmp_path / f"{name}.py"
    mutant.write_text(text.replace(old, new))
    report = ex.check(name, mutant, time=False)
    assert not report.ok and "FAILED" in str(report), str(report)


def test_a_cuda_task_without_a_gpu_says_it_needs_one(monkeypatch):
    monkeypatch.setattr(ex, "has_gpu", lambda: False)
    report = ex.check("vector_add_cuda")
    assert not report.ok and "needs a GPU" in str(report)


def test_a_file_without_the_function_is_named(tmp_path):
    f = tmp_path / "empty.py"
    f.write_text("x = 1\n")
    report = ex.check("vector_add_guard", f)
    assert not report.ok and "has no add()" in str(report)


# ---------------------------------------------------------------- the grader itself --
# Known-wrong "kernels" as host code on the device arrays (Numba's device
# arrays in the simulator, on the GPU its real ones): each fault the
# grader must name, at a size it must name.

def _task(**kw):
    return ex.Task("t", "programming-model", "numba", "add", et._vectors, lambda n: (n,), et._add_ref,
                   (1, 5, 300), (1, 5, 300), 300, lambda n: ("bytes", 12 * n), **kw)


def _write(out, values):
    out.copy_to_device(np.ascontiguousarray(values, dtype=np.float32))


def _sum(a, b):
    return a.copy_to_host() + b.copy_to_host()


def run_fake(fn, size=300, **kw):
    task = _task(**kw)
    with pytest.raises(ex.Failure) as err:
        ex.check_size(task, fn, size, np.random.default_rng(0))
    return str(err.value)


def test_the_grader_names_an_unwritten_element():
    def last_missing(a, b, out):
        got = _sum(a, b)
        got[-1] = np.nan
        _write(out, got)
    msg = run_fake(last_missing)
    assert "size 300" in msg and "out[299]" in msg and "never written" in msg and "1 of 300" in msg


def test_the_grader_names_a_wrong_value_with_both_numbers():
    def off(a, b, out):
        got = _sum(a, b)
        got[7] += 1.0
        _write(out, got)
    msg = run_fake(off)
    assert "out[7]" in msg and "a wrong value" in msg and "expected" in msg


# past the end goes a plain value, or the NaN an unguarded out[i] = a[i] + b[i] writes from the inputs'
# NaN canaries: the output's canaries are not NaN, so that write shows too (on the H200 a NaN canary
# after the output once let exactly this through)
@pytest.mark.parametrize("past", [0.0, np.nan], ids=["value", "nan"])
def test_the_grader_catches_a_write_past_the_end(monkeypatch, past):
    made = {}
    device = ex._device

    def spy(task, host, shape):
        views, out, whole = device(task, host, shape)
        made["whole"] = whole
        return views, out, whole
    monkeypatch.setattr(ex, "_device", spy)

    def one_more(a, b, out):
        got = np.concatenate([_sum(a, b), [past]]).astype(np.float32)  # n + 1 values: one past the end
        whole = made["whole"]
        host = whole.copy_to_host()
        host[:got.size] = got
        whole.copy_to_device(host)
    msg = run_fake(one_more)
    assert "wrote past the end of the output" in msg and "element 300" in msg


def test_the_grader_catches_a_read_past_the_end_through_its_canaries():
    def reads_one_more(a, b, out):  # the inputs' NaN canaries come in, as a GPU would let them
        got = _sum(a, b)
        got[-1] = np.nan  # what a[n] + b[n] gives: NaN follows every input
        _write(out, got)
    assert "read past the end of an input" in run_fake(reads_one_more)


def test_the_grader_catches_a_race_as_two_different_answers():
    calls = []

    def racy(a, b, out):
        calls.append(1)
        got = _sum(a, b).astype(np.float32)
        if len(calls) == 2:  # the second run: one element rounded otherwise, still within tolerance
            got[3] = np.nextafter(got[3], np.float32(np.inf))
        _write(out, got)
    msg = run_fake(racy, size=300, rtol=1e-5)
    assert "two runs gave different answers at (3,)" in msg and "race" in msg


def test_the_grader_allows_rounding_between_runs_when_the_task_does():
    calls = []

    def atomic_order(a, b, out):
        calls.append(1)
        got = _sum(a, b).astype(np.float32)
        if len(calls) == 2:
            got[3] = np.nextafter(got[3], np.float32(np.inf))
        _write(out, got)
    ex.check_size(_task(rtol=1e-5, deterministic=False), atomic_order, 300, np.random.default_rng(0))


def test_the_leaderboard_keeps_the_best_time_and_energy(tmp_path, monkeypatch):
    monkeypatch.setattr(ex, "gpu_name", lambda: "NVIDIA Test GPU")
    task = ex.tasks()["vector_add_guard"]
    f = ex.SOLUTIONS / "vector_add_guard.py"
    for ms, e in ((2.0, 5e-12), (1.0, 9e-12), (3.0, 4e-12)):
        ex.record(task, f, 1000, {"ms": ms, "rate": 1.0, "energy_per_unit": e},
                  {"chapter": {"ms": 1.5, "rate": 1.0, "energy_per_unit": 6e-12}}, board=tmp_path)
    lines = ex.board_lines(tmp_path)
    assert lines[0] == "nvidia-test-gpu:"
    assert "best time 1.0000 ms" in lines[1] and "best energy 4.00 pJ/unit" in lines[1]
    assert ex.board_lines(tmp_path / "none")[0].startswith("no graded run yet")


def test_the_command_lists_checks_and_fails_on_a_wrong_kernel(capsys, monkeypatch):
    # on a GPU the command also times and records: that is the slow goal test's, with its own board
    monkeypatch.setattr(ex, "measure", lambda task, fn, path: (["(not timed here)"], True))
    assert ex.main(["list"]) == 0 and "vector_add_guard" in capsys.readouterr().out
    assert ex.main(["check", "no_such_task"]) == 2
    assert ex.main(["check", "vector_add_guard"]) == 1  # the starter: wrong
    assert "FAILED" in capsys.readouterr().out
    assert ex.main(["check", "vector_add_guard", str(ex.SOLUTIONS / "vector_add_guard.py")]) == 0


@pytest.mark.slow
@gpu
@pytest.mark.parametrize("task", [t for t in ex.tasks().values() if t.goal], ids=lambda t: t.name)
def test_the_solution_meets_the_speed_goal_on_the_gpu(task, tmp_path, monkeypatch):
    monkeypatch.setattr(ex, "BOARD", tmp_path)  # the grader's leaderboard is the reader's, not the tests'
    report = ex.check(task.name, ex.SOLUTIONS / f"{task.name}.py", time=True)
    assert report.ok, str(report)
    assert "goal met" in str(report)
