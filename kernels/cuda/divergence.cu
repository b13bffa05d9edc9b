// Warp divergence (chapter "Warp divergence"). The 32 threads of a warp
// issue one instruction at a time; when they disagree on a branch, the warp
// runs both paths one after the other with the other lanes masked off, and
// pays for both. Short branches are often compiled to predicated or select
// instructions instead, which cost both paths' instructions but never diverge.

// --8<-- [start:seed_if_else]
// The source's example, with a bounds guard: per element, multiply by 2 or
// divide by 2. Short enough that nvcc (sm_90) emits no branch: the lanes not
// above the threshold run a predicated FMUL by 0.5, its store and an EXIT;
// the other lanes then run an FADD (x + x) and their store.
extern "C" __global__ void seed_if_else(float* data, float threshold, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        if (data[i] > threshold) {
            data[i] = data[i] * 2.0f;
        } else {
            data[i] = data[i] / 2.0f;
        }
    }
}
// --8<-- [end:seed_if_else]

// --8<-- [start:seed_ternary]
// The source's "fix": the same thing as a ternary. It compiles to other
// code, not better code: an FSEL picks the factor (2 or 0.5) and one FMUL
// applies it. The if/else had no branch either; a ternary guarantees nothing.
extern "C" __global__ void seed_ternary(float* data, float threshold, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = data[i];
        data[i] = (v > threshold) ? (v * 2.0f) : (v / 2.0f);
    }
}
// --8<-- [end:seed_ternary]

// --8<-- [start:branch_long]
// A branch long enough to diverge. Lanes 0 .. split-1 of every warp run path
// A, the others path B; each path is a dependent chain of `iters` FMAs with
// different constants (iters is a run-time value, so neither path can be
// predicated away). split = 0 or 32: the whole warp agrees. 1 <= split <= 31:
// the warp runs A, then B, and takes about twice as long.
extern "C" __global__ void branch_long(const float* __restrict__ x, float* __restrict__ out,
                                       long long n, int split, int iters)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    if ((threadIdx.x & 31) < split) {
        for (int k = 0; k < iters; ++k) v = fmaf(v, 0.999f, 0.001f);   // path A
    } else {
        for (int k = 0; k < iters; ++k) v = fmaf(v, 1.001f, -0.001f);  // path B
    }
    out[i] = v;
}
// --8<-- [end:branch_long]

// --8<-- [start:branch_short]
// The same split with one instruction per path, inside the same loop: the
// compiler predicates both paths. Every iteration issues path A's FFMA and
// path B's FFMA, each under its predicate (@P1 / @!P1), plus predicated
// MOVs that reload their multipliers. No lane branches apart, so the split
// costs nothing extra; but every warp issues both paths on every iteration,
// which here costs more than a diverged branch_long running its two loops
// in turn.
extern "C" __global__ void branch_short(const float* __restrict__ x, float* __restrict__ out,
                                        long long n, int split, int iters)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    bool a = (threadIdx.x & 31) < split;
    for (int k = 0; k < iters; ++k) {
        if (a) v = fmaf(v, 0.999f, 0.001f);   // path A
        else   v = fmaf(v, 1.001f, -0.001f);  // path B
    }
    out[i] = v;
}
// --8<-- [end:branch_short]
