// y = A x with A in CSR: indptr (n_rows + 1 int32 offsets), indices (nnz int32
// column indices, in any order within a row) and data (nnz float32 values).
// Kernel arguments everywhere: indptr, indices, data, x, out, n_rows (then the
// kernel's own). The ladder, each step named after the one idea it adds:
//
//   spmv_scalar           one thread per row
//   spmv_vector           one warp per row, shuffles
//   spmv_subwarp_l{L}     L lanes per row (L = 2 .. 32), chosen from the mean row length
//   spmv_subwarp_v4_l{L}  the same, data and indices read 128 bits at a time
//   spmv_merge[_v4]_i{I}  merge path: every thread consumes I items (row ends + nonzeros)
//                         whatever the row lengths; spmv_merge_fixup adds the
//                         partial sums of rows cut between tiles
//
// Bytes: SpMV moves 8 bytes per nonzero (value + index) plus indptr, x and out;
// at 2 FLOP per nonzero it is bound by memory everywhere. What separates the
// steps is how much of the bandwidth each keeps busy: coalescing, loads in
// flight per thread, idle lanes, and (on skewed rows) load balance.

#define FULL_MASK 0xffffffffu

// --8<-- [start:spmv_scalar]
// Step 1, one thread per row. The 32 threads of a warp walk 32 different rows:
// each load instruction touches 32 places a row apart (uncoalesced), and the
// warp runs as long as its longest row -- on a power-law matrix one long row
// keeps 31 threads idle for thousands of iterations.
extern "C" __global__ void spmv_scalar(const int* __restrict__ indptr, const int* __restrict__ indices,
                                       const float* __restrict__ data, const float* __restrict__ x,
                                       float* __restrict__ out, int n_rows) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n_rows) {
        const int end = indptr[row + 1];
        float acc = 0.0f;
        for (int k = indptr[row]; k < end; ++k) acc += data[k] * x[indices[k]];
        out[row] = acc;
    }
}
// --8<-- [end:spmv_scalar]

// --8<-- [start:spmv_vector]
// Step 2, one warp per row. The lanes read 32 consecutive nonzeros of one row
// (coalesced) and sum their 32 partial sums with five shuffles. Still slow: a
// row shorter than 32 leaves lanes idle (a row of 16 nonzeros: half the warp
// for one load, then five shuffles), and a very long row still runs on one warp.
extern "C" __global__ void spmv_vector(const int* __restrict__ indptr, const int* __restrict__ indices,
                                       const float* __restrict__ data, const float* __restrict__ x,
                                       float* __restrict__ out, int n_rows) {
    const int lane = threadIdx.x & 31;
    // 64-bit: n_rows * 32 threads can pass 2^31
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= n_rows) return;  // whole warps leave together: blockDim.x is a multiple of 32
    const int end = indptr[row + 1];
    float acc = 0.0f;
    for (int k = indptr[row] + lane; k < end; k += 32) acc += data[k] * __ldg(&x[indices[k]]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(FULL_MASK, acc, off);
    if (lane == 0) out[row] = acc;
}
// --8<-- [end:spmv_vector]

// --8<-- [start:spmv_subwarp]
// Steps 3 and 4, a sub-warp of L lanes per row (32 / L rows per warp), L picked
// by the wrapper from the mean row length (rows of ~16 nonzeros: 4 or 8 lanes):
// no idle lanes on short rows, log2(L) shuffles instead of five. x is read
// through the read-only data cache (__ldg): its reuse across rows is what the
// cache can catch. Step 3 gives each lane two elements per step, L apart (still
// coalesced), loaded together. With VEC4 (step 4) each lane reads 4 values and 4
// indices with one 128-bit load each and has 4 gathers of x in flight: a row
// starts anywhere, so the sub-warp walks the aligned 4-element chunks covering
// [start, end) and drops the elements of the first chunk that precede `start`;
// the last chunk, which may run past `end` (and past the array), is read
// element by element. Needs data and indices on 16-byte boundaries (the wrapper
// checks). Still slow on skewed rows: a row of 10^5 nonzeros runs on L lanes.
template <int L, bool VEC4>
__device__ __forceinline__ void spmv_subwarp(const int* __restrict__ indptr, const int* __restrict__ indices,
                                             const float* __restrict__ data, const float* __restrict__ x,
                                             float* __restrict__ out, int n_rows) {
    static_assert(L >= 2 && L <= 32 && (L & (L - 1)) == 0, "L must be a power of two from 2 to 32");
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & (L - 1);
    const long long row = t / L;
    // No early return: every lane of the warp must reach the shuffles below.
    const bool valid = row < n_rows;
    const int start = valid ? __ldg(&indptr[row]) : 0;
    const int end = valid ? __ldg(&indptr[row + 1]) : 0;
    float acc = 0.0f;
    if constexpr (VEC4) {
        for (int k = (start & ~3) + 4 * lane; k < end; k += 4 * L) {
            if (k + 4 <= end) {  // the whole chunk lies in this row's part of the arrays
                const float4 v = __ldg(reinterpret_cast<const float4*>(data + k));
                const int4 c = __ldg(reinterpret_cast<const int4*>(indices + k));
                // only the row's first chunk can begin before `start` (k + 3 >= start always)
                const float p0 = k >= start ? v.x * __ldg(&x[c.x]) : 0.0f;
                const float p1 = k + 1 >= start ? v.y * __ldg(&x[c.y]) : 0.0f;
                const float p2 = k + 2 >= start ? v.z * __ldg(&x[c.z]) : 0.0f;
                const float p3 = v.w * __ldg(&x[c.w]);
                acc += (p0 + p1) + (p2 + p3);
            } else {  // the chunk runs past the row's end: element by element (at most 3)
#pragma unroll 1
                for (int j = max(k, start); j < end; ++j) acc += __ldg(&data[j]) * __ldg(&x[__ldg(&indices[j])]);
            }
        }
    } else {
        // two elements per lane per step, both loaded before either is used (a loop of one
        // element per step waits a full round trip for each)
        for (int k = start + lane; k < end; k += 2 * L) {
            const bool second = k + L < end;
            const float v0 = __ldg(&data[k]), v1 = second ? __ldg(&data[k + L]) : 0.0f;
            const int c0 = __ldg(&indices[k]), c1 = second ? __ldg(&indices[k + L]) : 0;
            const float x0 = __ldg(&x[c0]), x1 = second ? __ldg(&x[c1]) : 0.0f;
            acc += v0 * x0 + v1 * x1;
        }
    }
    // tree over the L lanes of this row (width L keeps the sub-warps apart)
#pragma unroll
    for (int off = L / 2; off > 0; off >>= 1) acc += __shfl_down_sync(FULL_MASK, acc, off, L);
    if (valid && lane == 0) out[row] = acc;
}

#define SPMV_SUBWARP(L)                                                                                          \
    extern "C" __global__ void __launch_bounds__(256)                                                            \
        spmv_subwarp_l##L(const int* __restrict__ indptr, const int* __restrict__ indices,                      \
                          const float* __restrict__ data, const float* __restrict__ x, float* __restrict__ out, \
                          int n_rows) {                                                                          \
        spmv_subwarp<L, false>(indptr, indices, data, x, out, n_rows);                                           \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(256)                                                            \
        spmv_subwarp_v4_l##L(const int* __restrict__ indptr, const int* __restrict__ indices,                   \
                             const float* __restrict__ data, const float* __restrict__ x,                       \
                             float* __restrict__ out, int n_rows) {                                              \
        spmv_subwarp<L, true>(indptr, indices, data, x, out, n_rows);                                            \
    }
SPMV_SUBWARP(2)
SPMV_SUBWARP(4)
SPMV_SUBWARP(8)
SPMV_SUBWARP(16)
SPMV_SUBWARP(32)
// --8<-- [end:spmv_subwarp]

// --8<-- [start:spmv_merge]
// Step 5, merge path (Merrill and Garland, SC16). Lay the n_rows row ends
// (indptr[1:]) and the nnz nonzeros out as one merged sequence of
// n_rows + nnz "items": nonzero k comes before row end r exactly when
// k < indptr[r + 1]. Walking that sequence is the whole SpMV: a nonzero adds
// data[k] * x[indices[k]] to a running sum, a row end writes the sum and
// resets it. Cut the sequence into tiles of MERGE_THREADS * IPT items and give
// each thread IPT consecutive items: the same work per thread whatever the row
// lengths, so one row of 10^6 nonzeros spreads over 10^6 / IPT threads and
// a run of empty rows costs one item each.
//
// Where diagonal d (the first d items) crosses the merge: (rows ended, nonzeros
// taken) = (i, d - i), i the number of row ends among the first d items. Row
// end i is item number i + indptr[i + 1], so it is among them exactly when
// indptr[i + 1] <= d - 1 - i: a predicate false then true along i, and i is
// where it turns true, searched on [max(d - nnz, 0), min(d, n_rows)].
//
// Per tile (one block): (1) warps 0 and 1 find the tile's two ends with a
// 32-way search (each round every lane tests one point and a ballot keeps the
// 1/32 of the range where the predicate turns: 5 rounds of one load for
// 10^7 rows, where a binary search makes 24 dependent loads); (2) the
// block reads the tile's row ends and its nonzeros' products data * x into
// shared memory, coalesced (128-bit loads of data and indices when VEC4);
// (3) each thread finds its own start in shared memory (binary search) and
// walks its IPT items, writing every row it both starts and ends; (4) a row
// cut between threads of the tile: the threads' last partial sums, keyed by
// row, go through a block-wide segmented scan (warp shuffles, then one value
// per warp through shared memory), and the thread that ends the row adds what
// the threads before it carried; (5) a row cut between tiles: the tile's last
// partial sum goes to carry[tile], and spmv_merge_fixup adds it to out after
// this kernel (one atomic per tile, not one per row, and no zeroing of out:
// every row is written exactly once by the thread that ends it).
//
// The CSR arrays are read once: their loads use __ldcs (cache-streaming,
// evict first), which leaves more of L1 and L2 to x, whose gathers are what
// bounds SpMV on random columns (measured on the H200: 1 to 2.5 % faster on
// the uniform and power-law matrices than __ldg).
#define MERGE_THREADS 256

// Rows ended among the first d items (the i above), found by one warp.
// Invariant: the answer lies in [lo, hi]. Every lane tests one point; lanes
// past hi count as "turned" (the answer is at most hi).
__device__ __forceinline__ int merge_search_warp(int d, const int* __restrict__ row_end, int n_rows, int nnz) {
    const int lane = threadIdx.x & 31;
    int lo = max(d - nnz, 0), hi = min(d, n_rows);
    while (lo < hi) {  // lo and hi are the same in every lane: the loop is warp-uniform
        const int step = ((hi - lo) >> 5) + 1;  // 32 points, step apart, reach past hi
        const int i = lo + lane * step;
        const bool turned = i >= hi || __ldg(&row_end[i]) > d - 1 - i;
        const unsigned ballot = __ballot_sync(FULL_MASK, turned);
        if (ballot == 0u) {                 // all 32 points before the turn
            lo += 31 * step + 1;
        } else {
            const int f = __ffs(ballot) - 1;  // the first point that turned
            const int new_hi = min(lo + f * step, hi);
            if (f > 0) lo += (f - 1) * step + 1;  // past the last point that had not
            hi = new_hi;
        }
    }
    return lo;
}

template <int IPT, bool VEC4>
__device__ __forceinline__ void spmv_merge_tile(const int* __restrict__ indptr, const int* __restrict__ indices,
                                                const float* __restrict__ data, const float* __restrict__ x,
                                                float* __restrict__ out, int n_rows, int nnz,
                                                int2* __restrict__ carry) {
    constexpr int TILE = MERGE_THREADS * IPT;
    constexpr int WARPS = MERGE_THREADS / 32;
    // One buffer for both: the tile's row ends in [0, rows), then the products
    // of its nonzeros in [rows, rows + nonzeros); rows + nonzeros <= TILE.
    // Products are kept as their bits (__float_as_int): one type per array.
    __shared__ int s_buf[TILE];
    __shared__ int s_ends[2];
    __shared__ int s_warp_key[WARPS];
    __shared__ float s_warp_val[WARPS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int total = n_rows + nnz;  // the wrapper keeps it below 2^31 - 2^17
    const int d0 = blockIdx.x * TILE;
    const int d1 = min(d0 + TILE, total);

    // (1) the tile's two ends, one warp each
    if (warp < 2) {
        const int rows_ended = merge_search_warp(warp == 0 ? d0 : d1, indptr + 1, n_rows, nnz);
        if (lane == 0) s_ends[warp] = rows_ended;
    }
    __syncthreads();
    const int r0 = s_ends[0], r1 = s_ends[1];  // rows r0 .. r1-1 end in this tile
    const int k0 = d0 - r0, k1 = d1 - r1;      // nonzeros k0 .. k1-1 lie in it
    const int rows = r1 - r0, items = d1 - d0;
    int* s_row_end = s_buf;
    int* s_prod = s_buf + rows;

    // (2) row ends and products into shared memory, coalesced
#pragma unroll
    for (int i = 0; i < IPT; ++i) {
        const int r = tid + i * MERGE_THREADS;
        if (r < rows) s_row_end[r] = __ldcs(&indptr[r0 + 1 + r]);
    }
    // Each thread's loads all go out before any of them is used: first the values and
    // indices, then the gathers of x, then the products into shared memory. (One pass
    // per element or chunk would wait one memory round trip per pass.)
    if constexpr (VEC4) {
        // Aligned 4-element chunks covering [k0, k1), at most TILE / 4 + 1 of them. A chunk
        // that starts before k0 is still read whole (those elements belong to the tile
        // before: dropped); the one that runs past k1 is read element by element.
        constexpr int CHUNKS = (TILE / 4 + 1 + MERGE_THREADS - 1) / MERGE_THREADS;
        const int kb = k0 & ~3;
        float4 v[CHUNKS];
        int4 col[CHUNKS];
        float xv[CHUNKS][4];
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
            const int k = kb + 4 * (tid + c * MERGE_THREADS);
            v[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            col[c] = make_int4(0, 0, 0, 0);
            if (k + 4 <= k1) {
                v[c] = __ldcs(reinterpret_cast<const float4*>(data + k));
                col[c] = __ldcs(reinterpret_cast<const int4*>(indices + k));
            }
        }
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
            const int k = kb + 4 * (tid + c * MERGE_THREADS);
            const bool whole = k + 4 <= k1;
            xv[c][0] = whole && k >= k0 ? __ldg(&x[col[c].x]) : 0.0f;
            xv[c][1] = whole && k + 1 >= k0 ? __ldg(&x[col[c].y]) : 0.0f;
            xv[c][2] = whole && k + 2 >= k0 ? __ldg(&x[col[c].z]) : 0.0f;
            xv[c][3] = whole ? __ldg(&x[col[c].w]) : 0.0f;  // k + 3 >= k0 always
        }
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
            const int k = kb + 4 * (tid + c * MERGE_THREADS);
            if (k + 4 <= k1) {
                if (k >= k0) s_prod[k - k0] = __float_as_int(v[c].x * xv[c][0]);
                if (k + 1 >= k0) s_prod[k + 1 - k0] = __float_as_int(v[c].y * xv[c][1]);
                if (k + 2 >= k0) s_prod[k + 2 - k0] = __float_as_int(v[c].z * xv[c][2]);
                s_prod[k + 3 - k0] = __float_as_int(v[c].w * xv[c][3]);
            } else if (k < k1) {  // the chunk that runs past k1 (one per tile): at most 3 elements
#pragma unroll 1
                for (int j = max(k, k0); j < k1; ++j)
                    s_prod[j - k0] = __float_as_int(__ldcs(&data[j]) * __ldg(&x[__ldcs(&indices[j])]));
            }
        }
    } else {
        float val[IPT], xv[IPT];
        int col[IPT];
#pragma unroll
        for (int i = 0; i < IPT; ++i) {
            const int j = k0 + tid + i * MERGE_THREADS;
            val[i] = j < k1 ? __ldcs(&data[j]) : 0.0f;
            col[i] = j < k1 ? __ldcs(&indices[j]) : 0;
        }
#pragma unroll
        for (int i = 0; i < IPT; ++i) xv[i] = k0 + tid + i * MERGE_THREADS < k1 ? __ldg(&x[col[i]]) : 0.0f;
#pragma unroll
        for (int i = 0; i < IPT; ++i) {
            const int j = k0 + tid + i * MERGE_THREADS;
            if (j < k1) s_prod[j - k0] = __float_as_int(val[i] * xv[i]);
        }
    }
    __syncthreads();

    // (3) this thread's start (rows ended r, nonzeros taken j, tile-local), then its IPT items
    const int td = min(tid * IPT, items);
    int lo = max(td - (k1 - k0), 0), hi = min(td, rows);
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (s_row_end[mid] <= k0 + td - 1 - mid) lo = mid + 1;
        else hi = mid;
    }
    int r = lo, j = td - lo;
    const int r_first = r;     // the row this thread starts in
    float acc = 0.0f, first = 0.0f;
    bool ended = false;        // has this thread ended a row yet?
    const int mine = min(IPT, items - td);
#pragma unroll
    for (int it = 0; it < IPT; ++it) {
        if (it < mine) {
            if (r < rows && s_row_end[r] <= k0 + j) {  // next item: row r's end (ties: the end first)
                if (ended) out[r0 + r] = acc;           // began in this thread too: complete
                else first = acc;                       // may have begun in an earlier thread: after (4)
                ended = true;
                acc = 0.0f;
                ++r;
            } else {                                    // next item: nonzero k0 + j, of row r
                acc += __int_as_float(s_prod[j]);
                ++j;
            }
        }
    }

    // (4) segmented scan of (row, partial sum) over the block's threads. The
    // rows are non-decreasing from thread to thread, so "add the value when the
    // rows match, else keep the right one" is associative, and a thread's
    // exclusive result is what the threads before it carried into its first row.
    const int key = r;
    float val = acc;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int key_up = __shfl_up_sync(FULL_MASK, key, off);
        const float val_up = __shfl_up_sync(FULL_MASK, val, off);
        if (lane >= off && key_up == key) val += val_up;
    }
    int carry_key = __shfl_up_sync(FULL_MASK, key, 1);
    float carry_val = __shfl_up_sync(FULL_MASK, val, 1);
    if (lane == 31) {
        s_warp_key[warp] = key;
        s_warp_val[warp] = val;
    }
    __syncthreads();
    int prefix_key = -1;  // -1: no row (the scan's identity on the left)
    float prefix_val = 0.0f;
    for (int w = 0; w < warp; ++w) {  // the warps before this one, folded left to right
        const int wk = s_warp_key[w];
        prefix_val = wk == prefix_key ? prefix_val + s_warp_val[w] : s_warp_val[w];
        prefix_key = wk;
    }
    if (lane == 0) {
        carry_key = prefix_key;
        carry_val = prefix_val;
    } else if (carry_key == prefix_key) {
        carry_val += prefix_val;
    }
    if (ended) out[r0 + r_first] = first + (carry_key == r_first ? carry_val : 0.0f);

    // (5) the tile's last thread holds the partial sum of row r1, cut by the tile's end
    if (tid == MERGE_THREADS - 1) {
        const float tail = carry_key == key ? carry_val + acc : acc;
        carry[blockIdx.x] = make_int2(r0 + key < n_rows ? r0 + key : -1, __float_as_int(tail));
    }
}

#define SPMV_MERGE(IPT)                                                                                          \
    extern "C" __global__ void __launch_bounds__(MERGE_THREADS)                                                  \
        spmv_merge_i##IPT(const int* __restrict__ indptr, const int* __restrict__ indices,                      \
                          const float* __restrict__ data, const float* __restrict__ x, float* __restrict__ out, \
                          int n_rows, int nnz, int2* __restrict__ carry) {                                       \
        spmv_merge_tile<IPT, false>(indptr, indices, data, x, out, n_rows, nnz, carry);                          \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(MERGE_THREADS)                                                  \
        spmv_merge_v4_i##IPT(const int* __restrict__ indptr, const int* __restrict__ indices,                   \
                             const float* __restrict__ data, const float* __restrict__ x,                       \
                             float* __restrict__ out, int n_rows, int nnz, int2* __restrict__ carry) {          \
        spmv_merge_tile<IPT, true>(indptr, indices, data, x, out, n_rows, nnz, carry);                           \
    }
SPMV_MERGE(4)
SPMV_MERGE(6)
SPMV_MERGE(8)
SPMV_MERGE(12)
SPMV_MERGE(16)

// After spmv_merge: add each tile's carried partial sum to its row (written
// by the tile that ends the row), in an order fixed by the matrix alone, so
// that every run gives the same bits. One atomic per tile would round a row
// cut by many tiles (a power-law matrix's longest row spans thousands) in
// whatever order the atomics land. The carries' rows never decrease from tile
// to tile, so the tiles that cut one row are consecutive: one block walks all
// the carries, each thread a stretch of consecutive tiles, left to right. A
// row whose carries lie within one thread's stretch is summed and added there;
// one that runs across threads goes through the block-wide segmented scan of
// step (4) (a fixed tree of adds), and the thread that holds its last carry
// adds the total, once. Rows -1 (the tile ended past the last row) are skipped.
#define FIXUP_THREADS 1024
extern "C" __global__ void __launch_bounds__(FIXUP_THREADS)
spmv_merge_fixup(const int2* __restrict__ carry, float* __restrict__ out, int tiles) {
    constexpr int WARPS = FIXUP_THREADS / 32;
    __shared__ int s_warp_key[WARPS];
    __shared__ float s_warp_val[WARPS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int per = (tiles + FIXUP_THREADS - 1) / FIXUP_THREADS;
    const int t0 = min(tid * per, tiles), t1 = min(t0 + per, tiles);
    // my stretch's rows in order; all but the last end here; the first may have begun before
    int key = -1, first_key = -1;
    float acc = 0.0f, first = 0.0f;
    bool ended = false;  // has a row of my stretch ended in it?
    for (int t = t0; t < t1; ++t) {
        const int2 c = carry[t];
        if (t > t0 && c.x != key) {  // the row `key` ends in my stretch
            if (ended) {
                if (key >= 0) out[key] += acc;  // began in my stretch too: complete
            } else {
                first_key = key;                // may have begun before my stretch: after the scan
                first = acc;
                ended = true;
            }
            acc = 0.0f;
        }
        key = c.x;
        acc += __int_as_float(c.y);
    }
    // segmented scan of (row, partial sum) over the threads, as in step (4)
    float val = acc;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int key_up = __shfl_up_sync(FULL_MASK, key, off);
        const float val_up = __shfl_up_sync(FULL_MASK, val, off);
        if (lane >= off && key_up == key) val += val_up;
    }
    int carry_key = __shfl_up_sync(FULL_MASK, key, 1);
    float carry_val = __shfl_up_sync(FULL_MASK, val, 1);
    if (lane == 31) {
        s_warp_key[warp] = key;
        s_warp_val[warp] = val;
    }
    __syncthreads();
    int prefix_key = -2;  // -2: no row at all (-1 is "past the last row")
    float prefix_val = 0.0f;
    for (int w = 0; w < warp; ++w) {
        const int wk = s_warp_key[w];
        prefix_val = wk == prefix_key ? prefix_val + s_warp_val[w] : s_warp_val[w];
        prefix_key = wk;
    }
    if (lane == 0) {
        carry_key = prefix_key;
        carry_val = prefix_val;
    } else if (carry_key == prefix_key) {
        carry_val += prefix_val;
    }
    if (t0 == t1) return;  // no tiles (the threads past the end)
    // my first row, if it ended here: what the threads before me carried into it, then mine
    if (ended && first_key >= 0) out[first_key] += (carry_key == first_key ? carry_val : 0.0f) + first;
    // my last row ends here when the next tile is another row's (or there is none)
    if ((t1 == tiles || carry[t1].x != key) && key >= 0) {
        const bool began_before = !ended;  // my only row: the threads before me may have carried it
        out[key] += (began_before && carry_key == key ? carry_val : 0.0f) + acc;
    }
}
// --8<-- [end:spmv_merge]
