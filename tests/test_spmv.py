"""SpMV in CSR (kernels/spmv.py, kernels/cuda/spmv.cu) and its two bench
topics (kernels/bench/spmv.py, kernels/bench/spmv_crossover.py).

On the CPU: check_csr names the array at fault for every kind of broken
CSR; the generators make what they say (exact row lengths, sorted distinct
columns, a fixed seed, power-law skew) and fast; the float64 reference; the
Numba kernels in the simulator on every family and edge case (empty rows, a
single row, all nonzeros in one row, n = 1, nnz = 0, unsorted and repeated
columns), output poisoned with NaN; a line-by-line Python port of the CUDA C
merge path (its 32-way warp search, the tile's shared-memory layout, each
thread's walk, the block's segmented scan and the fix-up of tile carries)
and of the subwarp kernel's 128-bit chunking, against the reference; the
source holds every kernel the wrappers name; NVRTC compiles it and the SASS
has the 128-bit loads; the plots draw in both languages from made-up records.

On the GPU: every kernel and launch parameter against float64 at odd sizes
and on the edge cases, misaligned arrays, rows longer than many tiles,
cuSPARSE, refusals of bad input, and the sanitize launches.
"""

from __future__ import annotations

import re
import subprocess
import time

import numpy as np
import pytest

from kernels import spmv as S
from tests.test_cuda_compile import nvcc

gpu = pytest.mark.gpu
N_COLS = 40


# --- matrices for the tests -----------------------------------------------------

def unsorted(A, seed=0):
    """The same matrix with each row's (column, value) pairs shuffled."""
    indptr, indices, data = (a.copy() for a in A)
    rng = np.random.default_rng(seed)
    for r in range(indptr.size - 1):
        a, b = indptr[r], indptr[r + 1]
        p = rng.permutation(b - a)
        indices[a:b], data[a:b] = indices[a:b][p], data[a:b][p]
    return indptr, indices, data


def repeated_columns():
    """Rows that name one column twice (their values add)."""
    indptr = np.array([0, 3, 3, 6], np.int32)
    indices = np.array([5, 5, 2, 7, 1, 7], np.int32)
    return indptr, indices, np.random.default_rng(9).standard_normal(6).astype(np.float32)


def small_cases():
    """(name, (indptr, indices, data), n_cols): every family and edge case, small."""
    return [
        ("banded", S.banded(37, 3, seed=1), 37),
        ("uniform", S.uniform_random(41, 5.0, seed=2), 41),
        ("power_law", S.power_law(43, 4.0, seed=3), 43),
        ("empty_rows", S.from_row_lengths([0, 3, 0, 0, 7, 0], N_COLS, seed=4), N_COLS),
        ("single_row", S.from_row_lengths([9], N_COLS, seed=5), N_COLS),
        ("all_in_one_row", S.from_row_lengths([0, 0, N_COLS, 0], N_COLS, seed=6), N_COLS),
        ("n_is_1", S.from_row_lengths([1], 1, seed=7), 1),
        ("no_nonzeros", S.from_row_lengths([0, 0, 0, 0, 0], N_COLS, seed=8), N_COLS),
        ("unsorted", unsorted(S.uniform_random(39, 6.0, seed=9)), 39),
        ("repeated_columns", repeated_columns(), 8),
    ]


def x_for(n_cols, seed=11):
    return np.random.default_rng(seed).standard_normal(n_cols).astype(np.float32)


def tol(indptr):
    """The largest rel_err a correct float32 product may have: a row of k terms summed
    in float32 errs by about eps * sqrt(k / 2) of its size (a random walk of roundings),
    so 2e-6 * sqrt(k) leaves a margin of ~50 (a dropped term of a row of 10^5 nonzeros
    costs ~3e-3)."""
    return 2e-6 * np.sqrt(max(int(np.max(np.diff(indptr), initial=0)), 0) + 1)


def rel(got, want):
    got = np.asarray(got, np.float64)
    den = np.linalg.norm(want)
    return np.linalg.norm(got - want) / den if den else np.linalg.norm(got)


# --- check_csr ------------------------------------------------------------------

def test_check_csr_accepts_valid_unsorted_and_repeated_columns():
    for name, A, n_cols in small_cases():
        assert S.check_csr(*A, (A[0].size - 1, n_cols)) == (A[0].size - 1, n_cols, A[1].size), name


def _broken(what):
    indptr, indices, data = S.banded(10, 1, seed=0)  # 28 nonzeros, 10 x 10
    shape = (10, 10)
    if what == "indptr length":
        indptr = indptr[:-1]
    elif what == "indptr start":
        indptr = indptr.copy()
        indptr[0] = 1
    elif what == "indptr end":
        indptr = indptr.copy()
        indptr[-1] -= 1
    elif what == "indptr decreasing":
        indptr = indptr.copy()
        indptr[3] = indptr[2] - 1
    elif what == "indices too large":
        indices = indices.copy()
        indices[5] = 10
    elif what == "indices negative":
        indices = indices.copy()
        indices[0] = -1
    elif what == "data size":
        data = data[:-1]
    elif what == "indices 2-D":
        indices = indices.reshape(2, -1)
    elif what == "negative shape":
        shape = (10, -1)
    return indptr, indices, data, shape


@pytest.mark.parametrize("what, message", [
    ("indptr length", r"indptr must have n_rows \+ 1 = 11 entries, got 10"),
    ("indptr start", r"indptr must start at 0, got indptr\[0\] = 1"),
    ("indptr end", r"indptr must end at nnz = indices.size = 28, got indptr\[-1\] = 27"),
    ("indptr decreasing", r"indptr must not decrease: indptr\[3\] = \d+ < indptr\[2\]"),
    ("indices too large", r"indices must lie in \[0, n_cols = 10\), got indices\[5\] = 10"),
    ("indices negative", r"indices must lie in \[0, n_cols = 10\), got indices\[0\] = -1"),
    ("data size", r"data must have one value per column index: 28 \(indices.size\), got 27"),
    ("indices 2-D", r"indices must be 1-D, got 2-D"),
    ("negative shape", r"shape must be non-negative"),
])
def test_check_csr_names_the_array(what, message):
    indptr, indices, data, shape = _broken(what)
    with pytest.raises(ValueError, match=message):
        S.check_csr(indptr, indices, data, shape)


@pytest.mark.parametrize("name, index", [("indptr", 0), ("indices", 1), ("data", 2)])
def test_check_csr_names_a_wrong_dtype(name, index):
    A = list(S.banded(10, 1))
    A[index] = A[index].astype(np.float64 if name == "data" else np.int64)
    with pytest.raises(S.CSRDtypeError, match=f"{name} must be (int32|float32), got (int64|float64)") as info:
        S.check_csr(*A, (10, 10))
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)


def test_check_csr_refuses_what_is_not_an_array():
    indptr, indices, data = S.banded(4, 1)
    with pytest.raises(TypeError, match="indices must be a NumPy or CuPy array, got list"):
        S.check_csr(indptr, list(indices), data, (4, 4))
    with pytest.raises(TypeError, match="shape must be two ints"):
        S.check_csr(indptr, indices, data, (4.5, 4))


# --- generators and the reference ------------------------------------------------

def _rows(indptr):
    return np.repeat(np.arange(indptr.size - 1), np.diff(indptr))


def _sorted_distinct(indptr, indices, n_cols):
    keys = _rows(indptr).astype(np.int64) * n_cols + indices
    return bool(np.all(np.diff(keys) > 0))


def test_banded_is_the_band():
    indptr, indices, data = S.banded(50, 3, seed=0)
    dense = np.zeros((50, 50), bool)
    dense[_rows(indptr), indices] = True
    i, j = np.indices((50, 50))
    assert np.array_equal(dense, np.abs(i - j) <= 3)
    assert indptr.dtype == indices.dtype == np.int32 and data.dtype == np.float32
    assert np.all(data != 0)


def test_generators_are_sorted_distinct_and_seeded():
    for make in (lambda s: S.banded(300, 4, seed=s), lambda s: S.uniform_random(300, 9.0, seed=s),
                 lambda s: S.power_law(300, 9.0, seed=s)):
        a, b, c = make(1), make(1), make(2)
        assert all(np.array_equal(u, v) for u, v in zip(a, b))        # a fixed seed: the same matrix
        assert not all(np.array_equal(u, v) for u, v in zip(a, c))    # another seed: another one
        assert _sorted_distinct(a[0], a[1], 300)
        S.check_csr(*a, (300, 300))


def test_from_row_lengths_keeps_every_length_even_full_rows():
    lengths = [0, 5, 40, 39, 0, 1, 20, 40]
    indptr, indices, _ = S.from_row_lengths(lengths, 40, seed=3)
    assert np.array_equal(np.diff(indptr), lengths)
    assert _sorted_distinct(indptr, indices, 40)
    with pytest.raises(ValueError, match="lengths must be"):
        S.from_row_lengths([41], 40)


def test_uniform_rows_are_near_the_mean_and_power_law_rows_are_skewed():
    lengths = np.diff(S.uniform_random(20_000, 16.0, seed=1)[0])
    assert abs(lengths.mean() - 16) < 0.2 and lengths.max() < 50
    lengths = np.diff(S.power_law(20_000, 16.0, seed=3)[0])
    assert 8 < lengths.mean() < 24 and lengths.max() > 100 * lengths.mean()
    top = np.sort(lengths)[::-1]
    assert top[:20].sum() > 0.1 * lengths.sum()  # 0.1 % of the rows hold a tenth of the nonzeros


def test_power_law_is_vectorized():
    """About 5 M nonzeros in seconds (the bench's 50 M are ten times that)."""
    t0 = time.perf_counter()
    _, indices, _ = S.power_law(300_000, 16.0, seed=0)
    assert indices.size > 3_000_000
    assert time.perf_counter() - t0 < 20


def test_reference_matches_the_dense_product():
    for name, A, n_cols in small_cases():
        dense = np.zeros((A[0].size - 1, n_cols))
        np.add.at(dense, (_rows(A[0]), A[1]), A[2].astype(np.float64))
        x = x_for(n_cols)
        assert np.allclose(S.spmv_reference(*A, x), dense @ x.astype(np.float64), rtol=1e-12, atol=1e-12), name


def test_default_lanes_follow_the_mean_row():
    assert S.default_lanes(16, vec=True) == 4 and S.default_lanes(16, vec=False) == 8
    assert S.default_lanes(17, vec=True) == 4 and S.default_lanes(64, vec=True) == 16
    assert S.default_lanes(0.5) == 2 and S.default_lanes(10_000) == 32
    assert all(S.default_lanes(m, v) in S.LANES for m in (0, 1, 3, 7, 30, 100, 1e6) for v in (True, False))


# --- Numba (the simulator on a CPU, the GPU on a GPU) ----------------------------

@pytest.mark.parametrize("kernel", ["scalar", "vector"])
@pytest.mark.parametrize("case", [c[0] for c in small_cases()])
def test_numba_matches_float64(case, kernel):
    from numba import cuda

    _, A, n_cols = next(c for c in small_cases() if c[0] == case)
    x = x_for(n_cols)
    out = cuda.to_device(np.full(A[0].size - 1, np.nan, np.float32))  # an unwritten row stays NaN
    got = S.spmv_numba(*(cuda.to_device(a) for a in A), cuda.to_device(x), out, kernel=kernel)
    assert got is out
    assert rel(out.copy_to_host(), S.spmv_reference(*A, x)) < tol(A[0])


def test_numba_refuses_bad_input():
    from numba import cuda

    A = [cuda.to_device(a) for a in S.banded(6, 1)]
    x = cuda.to_device(x_for(6))
    with pytest.raises(TypeError, match="indices must be a Numba device array"):
        S.spmv_numba(A[0], np.zeros(16, np.int32), A[2], x)
    with pytest.raises(TypeError, match="data must have dtype float32, got float64"):
        S.spmv_numba(A[0], A[1], cuda.to_device(np.zeros(16)), x)
    with pytest.raises(ValueError, match="kernel must be one of"):
        S.spmv_numba(*A, x, kernel="merge")
    with pytest.raises(ValueError, match="out must be a float32 Numba device array of n_rows = 6"):
        S.spmv_numba(*A, x, cuda.to_device(np.zeros(5, np.float32)))
    with pytest.raises(ValueError, match="out must not overlap x"):
        S.spmv_numba(*A, x, x)


# --- the CUDA C merge path and subwarp chunking, ported line by line ---------------

def merge_search_warp(d, row_end, n_rows, nnz):
    """merge_search_warp of spmv.cu: 32 lanes, one ballot per round."""
    lo, hi = max(d - nnz, 0), min(d, n_rows)
    rounds = 0
    while lo < hi:
        step = ((hi - lo) >> 5) + 1
        turned = [i >= hi or row_end[i] > d - 1 - i for i in (lo + lane * step for lane in range(32))]
        if not any(turned):
            lo += 31 * step + 1
        else:
            f = turned.index(True)
            new_hi = min(lo + f * step, hi)
            if f > 0:
                lo += (f - 1) * step + 1
            hi = new_hi
        rounds += 1
    return lo, rounds


def shfl_up(values, delta):
    """__shfl_up_sync over one warp: lane l gets lane l - delta's value, lanes below delta their own."""
    return [values[lane - delta] if lane >= delta else values[lane] for lane in range(32)]


def emulate_merge(indptr, indices, data, x, ipt, threads=256, vec4=True, fixup_threads=4):
    """spmv_merge_tile and spmv_merge_fixup of spmv.cu, block by block and
    thread by thread, in float64. Asserts on the way that every product slot
    is written once, that every row is written exactly once before the fix-up,
    and that no load leaves its array."""
    n_rows, nnz = indptr.size - 1, indices.size
    total = n_rows + nnz
    tile = threads * ipt
    row_end = indptr[1:]
    out = np.full(n_rows, np.nan)
    written = np.zeros(n_rows, int)
    carries = []
    for block in range(-(-total // tile)):
        d0 = block * tile
        d1 = min(d0 + tile, total)
        r0, _ = merge_search_warp(d0, row_end, n_rows, nnz)
        r1, _ = merge_search_warp(d1, row_end, n_rows, nnz)
        k0, k1 = d0 - r0, d1 - r1
        rows, items = r1 - r0, d1 - d0
        assert 0 <= rows and rows + (k1 - k0) == items <= tile
        s_row_end = [None] * rows
        for i in range(ipt):
            for tid in range(threads):
                r = tid + i * threads
                if r < rows:
                    s_row_end[r] = int(indptr[r0 + 1 + r])
        assert None not in s_row_end
        s_prod = [None] * (k1 - k0)

        def put(j):
            assert 0 <= j < nnz and s_prod[j - k0] is None
            s_prod[j - k0] = float(data[j]) * float(x[indices[j]])

        if vec4:
            chunks = (tile // 4 + 1 + threads - 1) // threads
            kb = k0 & ~3
            for c in range(chunks):
                for tid in range(threads):
                    k = kb + 4 * (tid + c * threads)
                    if k < k1:
                        if k + 4 <= k1:
                            assert k % 4 == 0 and k + 3 < nnz  # an aligned 16-byte load inside the arrays
                            for e in range(3):
                                if k + e >= k0:
                                    put(k + e)
                            assert k + 3 >= k0
                            put(k + 3)
                        else:
                            for j in range(max(k, k0), k1):
                                put(j)
        else:
            for i in range(ipt):
                for tid in range(threads):
                    j = k0 + tid + i * threads
                    if j < k1:
                        put(j)
        assert None not in s_prod
        keys, vals, state = [], [], []
        for tid in range(threads):
            td = min(tid * ipt, items)
            lo, hi = max(td - (k1 - k0), 0), min(td, rows)
            while lo < hi:
                mid = (lo + hi) >> 1
                if s_row_end[mid] <= k0 + td - 1 - mid:
                    lo = mid + 1
                else:
                    hi = mid
            r, j = lo, td - lo
            r_first, acc, first, ended = r, 0.0, 0.0, False
            mine = min(ipt, items - td)
            for it in range(ipt):
                if it < mine:
                    if r < rows and s_row_end[r] <= k0 + j:
                        if ended:
                            assert written[r0 + r] == 0
                            out[r0 + r] = acc
                            written[r0 + r] += 1
                        else:
                            first = acc
                        ended = True
                        acc = 0.0
                        r += 1
                    else:
                        acc += s_prod[j]
                        j += 1
            keys.append(r)
            vals.append(acc)
            state.append((r_first, first, ended))
        # the segmented scan: shuffles within each warp, then one value per warp through shared memory
        carry_key, carry_val, warp_key, warp_val = [], [], [], []
        for w in range(threads // 32):
            key, val = keys[32 * w:32 * w + 32], list(vals[32 * w:32 * w + 32])
            for off in (1, 2, 4, 8, 16):
                key_up, val_up = shfl_up(key, off), shfl_up(val, off)
                val = [val[lane] + val_up[lane] if lane >= off and key_up[lane] == key[lane] else val[lane]
                       for lane in range(32)]
            carry_key += shfl_up(key, 1)
            carry_val += shfl_up(val, 1)
            warp_key.append(key[31])
            warp_val.append(val[31])
        for tid in range(threads):
            lane, warp = tid & 31, tid >> 5
            prefix_key, prefix_val = -1, 0.0
            for w in range(warp):
                prefix_val = prefix_val + warp_val[w] if warp_key[w] == prefix_key else warp_val[w]
                prefix_key = warp_key[w]
            ck, cv = carry_key[tid], carry_val[tid]
            if lane == 0:
                ck, cv = prefix_key, prefix_val
            elif ck == prefix_key:
                cv += prefix_val
            r_first, first, ended = state[tid]
            if ended:
                assert written[r0 + r_first] == 0
                out[r0 + r_first] = first + (cv if ck == r_first else 0.0)
                written[r0 + r_first] += 1
            if tid == threads - 1:
                tail = cv + vals[tid] if ck == keys[tid] else vals[tid]
                assert keys[tid] == rows  # the last thread ends at the tile's end
                carries.append((r0 + keys[tid] if r0 + keys[tid] < n_rows else -1, tail))
    assert np.all(written == 1)  # every row written once, by the thread that ends it
    return emulate_fixup(carries, out, fixup_threads)


def emulate_fixup(carries, out, threads=1024):
    """spmv_merge_fixup of spmv.cu, thread by thread: each thread's stretch of
    carries, an exclusive segmented scan over the threads (in the order the
    kernel's tree gives the same sum for), and the writes. Asserts that each
    row is added to at most once."""
    tiles = len(carries)
    per = -(-tiles // threads)
    added = {}
    state = []
    for tid in range(threads):
        t0, t1 = min(tid * per, tiles), min(tid * per + per, tiles)
        key, first_key, acc, first, ended = -1, -1, 0.0, 0.0, False
        for t in range(t0, t1):
            row, value = carries[t]
            if t > t0 and row != key:
                if ended:
                    if key >= 0:
                        out[key] += acc
                        added[key] = added.get(key, 0) + 1
                else:
                    first_key, first, ended = key, acc, True
                acc = 0.0
            key = row
            acc += value
        state.append((t0, t1, key, first_key, acc, first, ended))
    prefix_key, prefix_val = -2, 0.0  # the exclusive scan: what the threads before carried
    for t0, t1, key, first_key, acc, first, ended in state:
        if t0 < t1:
            if ended and first_key >= 0:
                out[first_key] += (prefix_val if prefix_key == first_key else 0.0) + first
                added[first_key] = added.get(first_key, 0) + 1
            if (t1 == tiles or carries[t1][0] != key) and key >= 0:
                out[key] += (prefix_val if not ended and prefix_key == key else 0.0) + acc
                added[key] = added.get(key, 0) + 1
        prefix_val = prefix_val + acc if key == prefix_key else acc
        prefix_key = key
    assert all(n == 1 for n in added.values()), added
    return out


def test_the_fixup_adds_every_carry_to_its_row_once_whatever_the_split():
    """Rows cut by one tile, by many, across thread stretches, at the ends;
    rows -1 skipped; every thread count from one that gives each thread a
    single tile to one that gives a thread them all."""
    rng = np.random.default_rng(3)
    for runs in ([1], [5], [1, 1, 1], [3, 40, 1, 7, 2, 90, 1], rng.integers(1, 30, 60).tolist()):
        rows = np.cumsum(rng.integers(0, 3, len(runs)))  # non-decreasing rows: gaps where tiles ended on a row end
        carries = [(int(r), float(v)) for r, n in zip(rows, runs) for v in rng.standard_normal(n)]
        carries += [(-1, 0.0)] * int(rng.integers(0, 3))  # tiles that ended past the last row
        want = np.zeros(int(rows.max()) + 1)
        for r, v in carries:
            if r >= 0:
                want[r] += v
        for threads in (1, 2, 3, 7, 32, len(carries), 1024):
            got = emulate_fixup(carries, np.zeros_like(want), threads)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{runs} {threads}")


def test_warp_search_finds_every_diagonal_in_few_rounds():
    rng = np.random.default_rng(0)
    for lengths in ([0, 0, 3, 0, 5000, 0, 1], rng.poisson(3, 3000), [7], [0, 0, 0], np.diff(S.power_law(5000, 6.0)[0])):
        lengths = np.asarray(lengths)
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        n_rows, nnz = lengths.size, int(indptr[-1])
        # brute force: where each row end sits in the merged sequence
        end_pos = np.arange(n_rows) + indptr[1:]
        ds = sorted(set(rng.integers(0, n_rows + nnz + 1, 300).tolist()) | {0, n_rows + nnz})
        for d in ds:
            want = int(np.searchsorted(end_pos, d))  # row ends among the first d items
            got, rounds = merge_search_warp(d, indptr[1:], n_rows, nnz)
            assert got == want, (d, got, want)
            assert rounds <= 1 + int(np.ceil(np.log(max(n_rows, 2)) / np.log(32))) + 1


@pytest.mark.parametrize("ipt", S.MERGE_ITEMS)
def test_merge_path_port_matches_float64(ipt):
    """The port at the kernel's 256 threads (one tile per matrix here) and at
    32 and 64 threads per tile, where the small cases already span many tiles,
    rows cross threads, warps and tiles, and a tile can hold no row end."""
    cases = small_cases() + [("long_row", S.from_row_lengths([0, 3, 2000, 0, 0, 5, 700, 1], 2001, seed=1), 2001),
                             ("long_first_row", S.from_row_lengths([1500, 0, 2], 1501, seed=3), 1501),
                             ("power_law_big", S.power_law(600, 7.0, seed=2), 600)]
    for threads in (256, 64, 32):
        for name, A, n_cols in cases:
            for vec4 in (True, False):
                x = x_for(n_cols).astype(np.float64)
                got = emulate_merge(*A, x, ipt, threads=threads, vec4=vec4)
                want = S.spmv_reference(*A, x)
                assert rel(got, want) < 1e-12, (name, threads, vec4)


def test_subwarp_lanes_cover_each_row_once():
    """spmv_subwarp<L, true>: the lanes' aligned chunks hit every nonzero of
    [start, end) once, and every 16-byte load lies inside [start & ~3, end);
    spmv_subwarp<L, false>: the lanes' pairs hit every nonzero once."""
    rng = np.random.default_rng(4)
    for _ in range(400):
        start = int(rng.integers(0, 64))
        end = start + int(rng.choice([0, 1, 2, 3, 4, 5, 7, 16, 17, 33, 130]))
        for L in S.LANES:
            seen = []
            for lane in range(L):
                k = (start & ~3) + 4 * lane
                while k < end:
                    if k + 4 <= end:
                        assert k % 4 == 0 and k + 3 >= start
                        seen += [k + e for e in range(4) if k + e >= start]
                    else:
                        seen += list(range(max(k, start), end))
                    k += 4 * L
            assert sorted(seen) == list(range(start, end)), (start, end, L)
            # spmv_subwarp<L, false>: two elements L apart per lane per step
            seen = [j for lane in range(L) for k in range(start + lane, end, 2 * L) for j in (k, k + L) if j < end]
            assert sorted(seen) == list(range(start, end)), (start, end, L)


# --- the CUDA C source -------------------------------------------------------------

def test_the_source_defines_every_kernel_the_wrappers_launch():
    text = S.CUDA_SOURCE.read_text()
    names = set(re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\w+\)\s*)?(\w+)\(', text))
    for macro, params in (("SPMV_SUBWARP", S.LANES), ("SPMV_MERGE", S.MERGE_ITEMS)):
        body = re.search(rf"#define {macro}\(\w+\)(.*?)\n\n", text, re.S).group(1)
        stems = re.findall(r"(\w+)##\w+\(", body)
        made = [int(v) for v in re.findall(rf"^{macro}\((\d+)\)$", text, re.M)]
        assert made == list(params), macro
        names |= {f"{stem}{v}" for stem in stems for v in made}
    wanted = {"spmv_scalar", "spmv_vector", "spmv_merge_fixup"}
    wanted |= {f"spmv_subwarp{v}_l{L}" for L in S.LANES for v in ("", "_v4")}
    wanted |= {f"spmv_merge{v}_i{i}" for i in S.MERGE_ITEMS for v in ("", "_v4")}
    assert wanted <= names, wanted - names
    assert "#define MERGE_THREADS 256" in text and S.THREADS == 256
    for section in ("spmv_scalar", "spmv_vector", "spmv_subwarp", "spmv_merge"):
        assert f"// --8<-- [start:{section}]" in text and f"// --8<-- [end:{section}]" in text
    py = S.__file__ and open(S.__file__).read()
    for section in ("csr_check", "generators", "spmv_launch", "cusparse", "spmv_numba"):
        assert f"# --8<-- [start:{section}]" in py and f"# --8<-- [end:{section}]" in py


@pytest.mark.skipif(nvcc() is None, reason="nvcc not found (install the CUDA toolkit)")
def test_the_source_compiles_alone_with_every_kernel_the_wrappers_name(tmp_path):
    """CuPy's RawModule compiles spmv.cu alone (NVRTC: no host headers): the
    front end to PTX for sm_90 must hold every kernel the wrappers name."""
    ptx = tmp_path / "spmv.ptx"
    # -Xcicc -O0: the front end only (seconds); which kernels exist does not depend on it
    proc = subprocess.run([nvcc(), "-arch=sm_90", "-std=c++17", "-ptx", "-Xcicc", "-O0", str(S.CUDA_SOURCE),
                           "-o", str(ptx)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    entries = set(re.findall(r"\.entry (\w+)", ptx.read_text()))
    assert {f"spmv_merge_v4_i{i}" for i in S.MERGE_ITEMS} <= entries and "spmv_subwarp_v4_l32" in entries


def test_sass_has_what_each_step_is_about():
    from kernels import sass

    if not sass.available():
        pytest.skip("nvcc, cuobjdump or nvdisasm not found")
    text = {k: "\n".join(sass.sass("spmv.cu", k)) for k in
            ("spmv_vector", "spmv_subwarp_l8", "spmv_subwarp_v4_l8", "spmv_merge_i8", "spmv_merge_v4_i8")}
    assert "LDG.E.128" in text["spmv_subwarp_v4_l8"] and "LDG.E.128" not in text["spmv_subwarp_l8"]
    # the merge path streams the CSR arrays with __ldcs: LDG.E.EF (evict first), 128-bit with VEC4
    assert "LDG.E.EF.128" in text["spmv_merge_v4_i8"] and ".128" not in text["spmv_merge_i8"]
    assert "LDG.E.EF " in text["spmv_merge_i8"] and "LDG.E.EF" not in text["spmv_subwarp_l8"]
    assert "SHFL.DOWN" in text["spmv_vector"] and "SHFL.DOWN" in text["spmv_subwarp_l8"]
    for k in ("spmv_merge_i8", "spmv_merge_v4_i8"):  # the warp search's ballot, the scan's shuffles
        assert "VOTE.ANY" in text[k] and "SHFL.UP" in text[k] and "ATOM" not in text[k]


# --- the bench topics' plots, from made-up records ---------------------------------

def _fake_data():
    from kernels import results
    from kernels.bench import spmv as B, spmv_crossover as C

    env = {"gpu": "NVIDIA H200", "gpu_slug": "nvidia-h200", "date": "2026-11-30T00:00:00Z"}
    recs = []
    for f in B.FAMILIES:
        for n, nnz in ((700_000, 11_000_000), (3_200_000, 51_000_000)):
            steps = [("cusparse", "cuSPARSE"), ("cuda_memcpy", "copy")] + [("cupy", s) for s in B.STEPS]
            steps += [("numba", f"{s}_numba") for s in B.NUMBA_STEPS]
            for i, (impl, step) in enumerate(steps):
                recs.append(results.record(B.TOPIC, impl, f"{f}/{step}", [n, n, nnz], "float32", ms=0.1 + 0.05 * i,
                                           rel_err=1e-7, step=step, family=f, gbps=1000.0 / (1 + i), ratio=1 / (1 + i),
                                           ratio_to_copy=0.5 / (1 + i), nnz=nnz))
    for i, d in enumerate(C.DENSITIES):
        nnz = int(d * C.N**2)
        for impl, step, ms, e in (("cublas", "dense", 0.3, 0.2), ("cusparse", "cuSPARSE", 0.01 + 2 * d, 0.02 + 1.5 * d),
                                  ("cupy", "merge", 0.012 + 1.8 * d, 0.02 + 1.2 * d),
                                  ("cupy", "subwarp_v4", 0.015 + 2.2 * d, 0.03 + 2 * d)):
            recs.append(results.record(C.TOPIC, impl, step, [C.N, C.N, nnz], "float32", ms=ms, rel_err=1e-7,
                                       step=step, density=d, nnz=nnz, tflops=1.0, ratio=0.3 / ms,
                                       energy_j_per_call=e, energy_ratio_to_dense=e / 0.2,
                                       dense_bytes=C.dense_bytes(C.N), csr_bytes=S.csr_bytes(C.N, C.N, nnz)))
    return {"records": recs, "topics": {B.TOPIC: {"env": env}, C.TOPIC: {"env": env}}}, recs


def test_plots_draw_in_both_languages_with_no_english_left(tmp_path):
    pytest.importorskip("matplotlib")
    from kernels.bench import spmv as B, spmv_crossover as C
    from tests.test_plots import KEPT, texts

    data, recs = _fake_data()
    paths = B.plot(data, tmp_path) + C.plot(data, tmp_path)
    names = sorted(p.name for p in paths)
    assert names == ["spmv-nvidia-h200-zh.svg", "spmv-nvidia-h200.svg", "spmv_crossover-nvidia-h200-zh.svg",
                     "spmv_crossover-nvidia-h200.svg", "spmv_crossover_energy-nvidia-h200-zh.svg",
                     "spmv_crossover_energy-nvidia-h200.svg"]
    allowed = set(KEPT) | {B.TOPIC, C.TOPIC}
    for r in recs:
        allowed.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f"{r['impl']} {r['variant']} {r['topic']}"))
        allowed.update(re.split(r"[_\s/]+", r["variant"]) + r["topic"].split("_"))
    for p in paths:
        if p.name.endswith("-zh.svg"):
            for t in texts(p):
                t = re.sub(r"\$.*?\$", "", t)
                left = [w for w in re.findall(r"(?<![0-9A-Za-z_])[A-Za-z_][A-Za-z0-9_]*", t) if w not in allowed]
                assert not left, (p.name, t, left)
    assert B.summary(data) and C.summary(data)


def test_crossover_is_interpolated_where_csr_stops_winning():
    from kernels.bench import spmv_crossover as C

    _, recs = _fake_data()
    rows = [r for r in recs if r["topic"] == C.TOPIC]
    d = C.crossover(rows, "cusparse", "cuSPARSE", "ms")
    assert 0.1 < d < 0.2  # 0.01 + 2d = 0.3 at d = 0.145
    assert C.crossover(rows, "cupy", "merge", "energy_j_per_call") > 0.1
    assert C.crossover([r for r in rows if r["density"] < 0.05], "cusparse", "cuSPARSE", "ms") is None


def _host_stats(indptr):
    """row_stats' numbers from the host arrays, to test the rule without a GPU."""
    lengths = np.diff(indptr).astype(np.float64)
    return {"n_rows": lengths.size, "nnz": int(lengths.sum()), "mean_row": lengths.mean(),
            "max_row": int(lengths.max()), "spread": lengths.std() / lengths.mean()}


def test_auto_picks_by_row_lengths():
    """The rule on the chapter's three families (at 1/10 of their size) and a
    long-row sweep: even rows get the 128-bit sub-warp kernel, Poisson rows
    the 4-byte one, Zipf rows the merge path; one row growing past the tail
    the rule allows switches it to the merge path, and longer rows keep it."""
    banded = S.auto_options(_host_stats(S.banded(65_000, 8)[0]))
    assert banded == {"kernel": "subwarp", "lanes": 4, "vec": True}
    uniform = S.auto_options(_host_stats(S.uniform_random(70_000, 16.0)[0]))
    assert uniform == {"kernel": "subwarp", "lanes": 8, "vec": False}
    assert S.auto_options(_host_stats(S.uniform_random(70_000, 16.0)[0]), aligned=False)["vec"] is False
    assert S.auto_options(_host_stats(S.banded(65_000, 8)[0]), aligned=False) == {
        "kernel": "subwarp", "lanes": 8, "vec": False}
    assert S.auto_options(_host_stats(S.power_law(70_000, 16.0)[0]))["kernel"] == "merge"
    base = np.random.default_rng(1).poisson(16.0, 700_000)
    picks = []
    for longest in 2 ** np.arange(6, 21):
        lengths = base.copy()
        lengths[-1] = longest
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        picks.append(S.auto_options(_host_stats(indptr))["kernel"])
    switch = picks.index("merge")
    assert 0 < switch and set(picks[switch:]) == {"merge"} and set(picks[:switch]) == {"subwarp"}, picks


# --- GPU ----------------------------------------------------------------------------

ALL_RUNS = ([{"kernel": "scalar"}, {"kernel": "vector"}, {"kernel": "auto"}]
            + [{"kernel": "subwarp", "lanes": L, "vec": v} for L in S.LANES for v in (False, True)]
            + [{"kernel": "merge", "items": i, "vec": v} for i in S.MERGE_ITEMS for v in (False, True)])


def _gpu_case(A, n_cols, seed=11):
    import cupy as cp

    x = x_for(n_cols, seed)
    return [cp.asarray(a) for a in A] + [cp.asarray(x)], S.spmv_reference(*A, x)


@gpu
@pytest.mark.parametrize("opts", ALL_RUNS, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
def test_every_kernel_matches_float64(opts):
    import cupy as cp

    cases = small_cases() + [
        ("uniform_odd", S.uniform_random(10_007, 13.0, seed=1), 10_007),
        ("power_law_odd", S.power_law(20_011, 16.0, seed=2), 20_011),
        ("banded_odd", S.banded(9_999, 8, seed=3), 9_999),
        ("long_rows", S.from_row_lengths([0, 30_000, 0, 0, 7, 100_000, 0, 1], 100_003, seed=4), 100_003),
        ("one_long_row", S.from_row_lengths([99_991], 100_003, seed=5), 100_003),
    ]
    for name, A, n_cols in cases:
        d, want = _gpu_case(A, n_cols)
        out = cp.full(A[0].size - 1, cp.nan, dtype=cp.float32)
        assert S.spmv(*d, out, **opts) is out
        assert rel(cp.asnumpy(out), want) < tol(A[0]), name


@gpu
def test_merge_path_gives_the_same_bits_every_run():
    """A row cut by hundreds of tiles (and rows across the fix-up's thread
    stretches): twenty runs, one answer to the bit, for every tile size."""
    import cupy as cp

    lengths = [3, 0, 800_000, 5, 0, 1, 150_000] + [17] * 20_000 + [60_000, 2]  # 1.35 M items: at 1024 items
    # a tile (items=4), more tiles than the fix-up has threads, so its threads walk stretches of two
    A = S.from_row_lengths(lengths, 1_000_003, seed=8)
    d, want = _gpu_case(A, 1_000_003)
    assert -(-(A[0].size - 1 + A[1].size) // (S.THREADS * min(S.MERGE_ITEMS))) > S.FIXUP_THREADS
    for items in S.MERGE_ITEMS:
        for vec in (False, True):
            launch, out = S.spmv_plan(*d, kernel="merge", items=items, vec=vec)
            runs = set()
            for _ in range(20):  # one plan launched again and again
                out.fill(cp.nan)
                launch()
                runs.add(cp.asnumpy(out).tobytes())
            runs.add(cp.asnumpy(S.spmv(*d, kernel="merge", items=items, vec=vec)).tobytes())  # a new plan
            assert len(runs) == 1, (items, vec, len(runs))
            got = np.frombuffer(runs.pop(), dtype=np.float32)
            assert rel(got, want) < tol(A[0]), (items, vec)


@gpu
def test_misaligned_arrays_take_the_4_byte_loads():
    import cupy as cp

    A = S.power_law(5_003, 12.0, seed=6)
    d, want = _gpu_case(A, 5_003)
    shifted = []
    for a in d[1:3]:  # indices and data one element past a 16-byte boundary
        buf = cp.empty(a.size + 1, dtype=a.dtype)
        buf[1:] = a
        shifted.append(buf[1:])
    for opts in ({"kernel": "merge"}, {"kernel": "subwarp"}, {"kernel": "merge", "vec": False}):
        out = S.spmv(d[0], *shifted, d[3], **opts)
        assert rel(cp.asnumpy(out), want) < tol(A[0]), opts
    with pytest.raises(ValueError, match="16-byte boundaries"):
        S.spmv(d[0], *shifted, d[3], kernel="subwarp", vec=True)


@gpu
def test_a_plan_runs_again_and_check_true_validates():
    import cupy as cp

    A = S.uniform_random(3_001, 9.0, seed=7)
    d, want = _gpu_case(A, 3_001)
    launch, out = S.spmv_plan(*d, kernel="merge", items=4, check=True)
    for _ in range(3):
        out.fill(cp.nan)
        launch()
        assert rel(cp.asnumpy(out), want) < tol(A[0])
    bad = d[1].copy()
    bad[17] = 3_001
    with pytest.raises(ValueError, match=r"indices must lie in \[0, n_cols = 3001\), got indices\[17\] = 3001"):
        S.spmv(d[0], bad, d[2], d[3], check=True)


@gpu
def test_row_stats_on_the_gpu_match_numpy():
    import cupy as cp

    for name, A, _ in small_cases() + [("power_law", S.power_law(20_011, 16.0, seed=2), 20_011)]:
        if A[0].size < 2:
            continue
        got, want = S.row_stats(cp.asarray(A[0])), _host_stats(A[0]) if A[1].size else None
        assert got["n_rows"] == A[0].size - 1 and got["nnz"] == A[1].size, name
        if want is not None:
            assert got["max_row"] == want["max_row"], name
            assert got["mean_row"] == pytest.approx(want["mean_row"]) and got["spread"] == pytest.approx(
                want["spread"]), name


@gpu
def test_one_shot_spmv_checks_the_matrix_and_the_context_lives_on():
    """spmv() checks by default: a column index past the matrix is a
    ValueError naming indices, and the next product in the process works
    (unchecked, that index would be an illegal address, fatal to the
    context)."""
    import cupy as cp

    A = S.power_law(4_001, 9.0, seed=12)
    d, want = _gpu_case(A, 4_001)
    bad = d[1].copy()
    bad[-1] = 4_001
    for kernel in ("auto", "merge", "subwarp"):
        with pytest.raises(ValueError, match=r"indices must lie in \[0, n_cols = 4001\)"):
            S.spmv(d[0], bad, d[2], d[3], kernel=kernel)
    falls = d[0].copy()
    falls[5] = falls[4] - 1
    with pytest.raises(ValueError, match="indptr must not decrease"):
        S.spmv(falls, d[1], d[2], d[3])
    assert rel(cp.asnumpy(S.spmv(*d)), want) < tol(A[0])
    cp.cuda.Device().synchronize()


@gpu
def test_cusparse_agrees_and_leaves_the_arrays_alone():
    import cupy as cp

    for name, A, n_cols in small_cases() + [("power_law", S.power_law(7_001, 10.0, seed=8), 7_001)]:
        d, want = _gpu_case(A, n_cols)
        before = [cp.asnumpy(a) for a in d]
        out = S.spmv_cusparse(*d)
        assert rel(cp.asnumpy(out), want) < tol(A[0]), name
        assert all(np.array_equal(b, cp.asnumpy(a)) for b, a in zip(before, d)), name


@gpu
def test_numba_on_cupy_arrays():
    import cupy as cp
    from numba import cuda

    A = S.power_law(2_003, 8.0, seed=9)
    d, want = _gpu_case(A, 2_003)
    for kernel in ("scalar", "vector"):
        out = S.spmv_numba(*(cuda.as_cuda_array(a) for a in d), kernel=kernel)
        assert rel(out.copy_to_host(), want) < tol(A[0])
        assert isinstance(d[0], cp.ndarray)


@gpu
def test_spmv_refuses_bad_input():
    import cupy as cp

    A = S.banded(10, 1)
    d, _ = _gpu_case(A, 10)
    indptr, indices, data, x = d
    with pytest.raises(TypeError, match="indptr must be a cupy.ndarray"):
        S.spmv(A[0], indices, data, x)
    with pytest.raises(TypeError, match="data must have dtype float32, got float64"):
        S.spmv(indptr, indices, data.astype(cp.float64), x)
    with pytest.raises(TypeError, match="indices must have dtype int32, got int64"):
        S.spmv(indptr, indices.astype(cp.int64), data, x)
    with pytest.raises(ValueError, match="data must have one value per column index"):
        S.spmv(indptr, indices, data[:-1], x)
    with pytest.raises(ValueError, match="indptr must have n_rows \\+ 1 >= 1 entries"):
        S.spmv(indptr[:0], indices, data, x)
    with pytest.raises(ValueError, match="kernel must be 'auto' or one of"):
        S.spmv(*d, kernel="csr_adaptive")
    with pytest.raises(ValueError, match="lanes must be one of"):
        S.spmv(*d, kernel="subwarp", lanes=3)
    with pytest.raises(ValueError, match="items must be one of"):
        S.spmv(*d, kernel="merge", items=5)
    with pytest.raises(ValueError, match="lanes applies to kernel='subwarp' only"):
        S.spmv(*d, kernel="merge", lanes=4)
    with pytest.raises(ValueError, match="vec applies to"):
        S.spmv(*d, kernel="scalar", vec=True)
    with pytest.raises(ValueError, match="out must have n_rows = 10 entries"):
        S.spmv(*d, cp.empty(9, dtype=cp.float32))
    with pytest.raises(ValueError, match="out must not overlap x"):
        S.spmv(*d, x)


@gpu
def test_sanitize_launches_pass():
    from kernels.bench import spmv as B

    B.sanitize()


@pytest.mark.gpu
def test_cusparse_plan_matches_the_reference_and_refuses_bad_shapes():
    import cupy as cp

    ip, ix, dv = S.uniform_random(1000, 7.0, seed=3)
    x_host = np.random.default_rng(4).standard_normal(1000, dtype=np.float32)
    A = S.cusparse_matrix(*(cp.asarray(a) for a in (ip, ix, dv)), 1000)
    x = cp.asarray(x_host)
    out = cp.full(1000, cp.nan, dtype=cp.float32)
    launch, got = S.cusparse_plan(A, x, out)
    launch()
    assert got is out
    assert float(np.linalg.norm(cp.asnumpy(out) - S.spmv_reference(ip, ix, dv, x_host))) < 1e-5 * float(
        np.linalg.norm(S.spmv_reference(ip, ix, dv, x_host)))
    with pytest.raises(ValueError, match="need x of 1000"):
        S.cusparse_plan(A, x[:999], out)
    with pytest.raises(TypeError, match="float32"):
        S.cusparse_plan(A, x.astype(cp.float64), out)


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/spmv.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
# the Numba vector step drops each row's last nonzero; the merge path's fix-up overwrites a row cut between
# tiles instead of adding to it; the subwarp kernel sums half its lanes; the launcher drops the last block
EXAMPLE_FAULTS = [
    ("spmv.py",
     "for k in range(indptr[row] + lane, indptr[row + 1], 32):",
     "for k in range(indptr[row] + lane, indptr[row + 1] - 1, 32):",
     "numba"),
    ("spmv.cu",
     "out[key] += (began_before && carry_key == key ? carry_val : 0.0f) + acc;",
     "out[key] = (began_before && carry_key == key ? carry_val : 0.0f) + acc;",
     "cupy"),
    ("spmv.cu",
     "for (int off = L / 2; off > 0; off >>= 1) acc += __shfl_down_sync(FULL_MASK, acc, off, L);",
     "for (int off = L / 4; off > 0; off >>= 1) acc += __shfl_down_sync(FULL_MASK, acc, off, L);",
     "cupy"),
    ("spmv.py", "(-(-n_rows * per_row // THREADS),)", "(n_rows * per_row // THREADS,)", "cupy"),
]

# A page's planted fault given by hand, where the automatic wrong-result
# mutation hits code whose result cannot be checked (tests/mutants.py):
# "file:section:function" -> (old, new, why). An unused one fails.
MUTANT_OVERRIDES = {
    "examples/spmv.py:overlaps:overlaps": (
        "a_lo < b_hi and", "a_lo <= b_hi and",
        "(b_hi) - 1 can only matter for spans that meet at one byte, which arrays of 4-byte elements never do; "
        "<= makes arrays that merely touch overlap, which the check's out-right-after-input case refuses"),
    "examples/spmv.py:csr_matrices:uniform_random": (
        "return random_csr(lengths, n, seed + 1)", "return random_csr(lengths, 2 * n, seed + 1)",
        "seed + 1 -> seed - 1 is another valid matrix; a column past n_cols is not"),
    "examples/spmv.py:csr_matrices:power_law": (
        "return random_csr(lengths, n, seed + 1)", "return random_csr(lengths, 2 * n, seed + 1)", "as uniform_random"),
    "examples/spmv.py:csr_matrices:edge_cases": (
        "random_csr([9], 40, seed=5), 40)", "random_csr([9], 40, seed=5), 30)",
        "its first constant, a row length, gives another valid matrix; columns past x's end do not"),
    "examples/spmv.py:csr_rejects:check_csr_rejects": (
        "(indptr, indices + 10, data)", "(indptr, indices, data)",
        "indices + 10 -> - 10 is still out of range; a matrix no longer broken must be caught"),
}


def overlap_cases() -> list:
    """This chapter's wrappers that take an output: each must refuse one
    that overlaps an input (tests/test_overlap.py)."""
    from kernels import spmv as sp
    from tests.overlap import cupy_case, numba_case, ex, N, ROWS, spmv_structure, spmv_lengths

    def planned(i, out):  # the plan refuses out; the launch writes it
        launch, _ = sp.spmv_plan(*spmv_structure(N, "cupy"), i["data"], i["x"], out, kernel="merge")
        launch()

    def cusparse_planned(i, out):
        indptr, indices = spmv_structure(N, "cupy")
        launch, _ = sp.cusparse_plan(sp.cusparse_matrix(indptr, indices, i["data"], N), i["x"], out)
        launch()

    nnz = int(spmv_lengths(N).sum())
    return [
        cupy_case("spmv", call=lambda i, out: sp.spmv(*spmv_structure(N, "cupy"), i["data"], i["x"], out,
                                                      kernel="subwarp"),
                  inputs={"data": (nnz,), "x": (N,)}, out_shape=(N,)),
        cupy_case("spmv_plan", call=planned, inputs={"data": (nnz,), "x": (N,)}, out_shape=(N,)),
        cupy_case("cusparse_plan", call=cusparse_planned, inputs={"data": (nnz,), "x": (N,)}, out_shape=(N,)),
        cupy_case("examples/spmv.spmv_cupy",
            call=lambda i, out: ex("spmv.spmv_cupy")(*spmv_structure(N, "cupy"), i["data"], i["x"], out,
                                                   kernel="merge"),
            inputs={"data": (int(spmv_lengths(N).sum()),), "x": (N,)}, out_shape=(N,)),
        # one row per thread, 128-thread blocks: 8 blocks in the simulator
        numba_case("examples/spmv.spmv_numba",
            call=lambda i, out: ex("spmv.spmv_numba")(*spmv_structure(ROWS, "numba"), i["data"], i["x"], out,
                                                    kernel="scalar"),
            inputs={"data": (int(spmv_lengths(ROWS).sum()),), "x": (ROWS,)}, out_shape=(ROWS,)),
    ]


# Functions taking an output that need no overlap case, and why.
OVERLAP_EXEMPT = {
    "spmv_cusparse": "the product is made in a new array (csr_matrix @ x) before out is written: an out "
                     "overlapping x still gets the right answer",
}
