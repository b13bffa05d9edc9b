"""Topic `attention_hopper`: attention's forward pass on Hopper
(kernels/hopper_attention.py, kernels/cuda/hopper_attention.cu), the
FlashAttention-3 style kernel and its ladder, against torch's SDPA.

Cases (BH, N, d, format, causal): the issue's goal sizes, BH = 16, N =
8192, d = 128 and BH = 32, N = 4096, d = 64, each in FP16 and BF16, with
and without the causal mask. In each case, timed in paired rounds (CUDA
events, median; ratio = the reference's time over this one's, with its
spread): our kernel (`ha_overlap`), torch SDPA with the cuDNN backend (the
reference) and with the flash backend (FlashAttention-2), when `import
torch` works (an optional anchor; without it ha_overlap is its own
reference and the summary says so). In FP16 at both sizes, every step of
the ladder (`ha_plain`, `ha_ws`, `ha_pingpong`) and the chapter's portable
mma.sync kernel (`attention_fused_fp16`, FP32 out) as well.

Each record: ms, tflops of useful work (4 N^2 d per head, 2 N (N + 1) d
causal: kernels.attention.useful_flop), rel_err against float64 on the
first head (the 16-bit inputs' values), vs_flash = flash's time / this
one's. At the goal size in FP16, non-causal, board energy over >= 2 s
(NVML), J per useful GFLOP, for ha_overlap, cuDNN and mma.sync. The ncu
records (impl "ncu"): one launch of each ladder step at the goal size under
`ncu --clock-control none`, in a child process that checks each result on
the host: the tensor pipe's share of its peak, the issue slots', and the
share of instructions on the XU pipe (ex2 of the softmax).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from .. import results
from . import plotting

TOPIC = "attention_hopper"
ORDER = 146  # after attention
GOAL = (16, 8192, 128)
CASES = [(bh, n, d, fmt, causal) for (bh, n, d) in (GOAL, (32, 4096, 64))
         for fmt in ("fp16", "bf16") for causal in (False, True)]
QUICK_CASES = [(2, 1024, 128, "fp16", False), (2, 1024, 64, "bf16", True)]
LADDER = ("ha_plain", "ha_ws", "ha_pingpong", "ha_overlap")
DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
ROUNDS = 5
REL_TOL = {"fp16": 4e-3, "bf16": 3e-2}  # O rounded to the 16-bit format, P rounded before P V
LABELS = {
    "step": ("写法", "step"),
    "causal": ("因果掩码", "causal"),
    "format": ("格式", "format"),
    "vs_flash": ("相对 flash 后端", "vs flash backend"),
    "tensor_pipe_active": ("Tensor 流水线占用", "tensor pipe busy"),
    "issue_active": ("发射槽占用", "issue slots busy"),
    "xu_active": ("XU 流水线占用（ex2）", "XU pipe busy (ex2)"),
}
NCU_METRICS = {
    "ncu_ns": "gpu__time_duration.sum",
    "tensor_pipe_active": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "issue_active": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "xu_active": "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
}
PERCENT = ("tensor_pipe_active", "issue_active", "xu_active")


def inputs(bh: int, n: int, d: int, fmt: str, seed: int):
    """q, k, v (BH, N, d) standard normal in the format (FP16, or BF16 bit
    patterns in uint16), and the first head's values in float64."""
    import cupy as cp

    from ..gemm_formats import from_bf16, to_bf16

    rng = cp.random.default_rng(seed)
    x = [rng.standard_normal((bh, n, d), dtype=cp.float32) for _ in range(3)]
    if fmt == "fp16":
        h = [a.astype(cp.float16) for a in x]
        return h, [a[:1].astype(cp.float64) for a in h]
    b = [to_bf16(a) for a in x]
    return b, [from_bf16(a[:1]).astype(cp.float64) for a in b]


def reference(q64, k64, v64, causal: bool):
    """softmax(Q K^T / sqrt(d)) V in float64 on the GPU (one head: (1, N, d))."""
    import cupy as cp

    n, d = q64.shape[1:]
    s = q64[0] @ k64[0].T / math.sqrt(d)
    if causal:
        s[cp.triu_indices(n, 1)] = -cp.inf
    s -= s.max(axis=1, keepdims=True)
    cp.exp(s, out=s)
    s /= s.sum(axis=1, keepdims=True)
    return (s @ v64[0])[None]


def as_float64(o, fmt: str):
    from ..gemm_formats import from_bf16

    return o.astype(np.float64) if fmt == "fp16" or o.dtype == np.float32 else from_bf16(o).astype(np.float64)


def _torch():
    """torch and its SDPA backend switch, or None (the anchor is optional)."""
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception as exc:  # noqa: BLE001 -- any failure to import means no anchor
        print(f"attention_hopper: torch is not importable ({exc}); no SDPA anchor measured")
        return None
    return torch, sdpa_kernel, SDPBackend


def _torch_fn(tch, q, k, v, causal: bool, backend: str):
    """torch SDPA on the same data (DLPack, no copy) as (1, BH, N, d); BF16 bit patterns viewed as bfloat16."""
    torch, sdpa_kernel, backends = tch
    bh, n, d = q.shape
    tq, tk, tv = (torch.from_dlpack(x).view(1, bh, n, d) for x in (q, k, v))
    if q.dtype == np.uint16:
        tq, tk, tv = (t.view(torch.bfloat16) for t in (tq, tk, tv))
    be = {"sdpa_cudnn": backends.CUDNN_ATTENTION, "sdpa_flash": backends.FLASH_ATTENTION}[backend]

    def run():
        with sdpa_kernel(be):
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    return run


def measure_case(bh: int, n: int, d: int, fmt: str, causal: bool, tch, quick: bool) -> list[dict]:
    import cupy as cp

    from .. import attention as at, harness, hopper_attention as ha

    shape, dtype = [bh, n, d], DTYPES[fmt]
    flop = at.useful_flop(bh, n, d, causal)
    sets, ref = [], None
    for s in range(harness.rotation(4 * bh * n * d * 2)):
        (q, k, v), f64 = inputs(bh, n, d, fmt, seed=n + d + s)
        if s == 0:
            ref = reference(*f64, causal)
        sets.append((q, k, v))
    outs = [cp.empty_like(q) for q, _, _ in sets]
    out32 = [cp.empty(q.shape, dtype=cp.float32) for q, _, _ in sets]
    names = list(LADDER) if fmt == "fp16" and not quick else ["ha_overlap"]
    cases: dict = {}
    for name in names:
        cases[name] = (lambda i, name=name: ha.hopper_attention(*sets[i], causal, outs[i], kernel=name),
                       [(i,) for i in range(len(sets))])
    if fmt == "fp16" and not quick:
        cases["mma_sync"] = (lambda i: at.attention_fused_fp16(*sets[i], causal, out32[i]),
                             [(i,) for i in range(len(sets))])
    if tch is not None:
        for backend in ("sdpa_cudnn", "sdpa_flash"):
            fns = [_torch_fn(tch, *x, causal, backend) for x in sets]
            cases[backend] = (lambda i, fns=fns: fns[i](), [(i,) for i in range(len(sets))])
    errs = {}
    for name, (fn, _) in cases.items():  # each checked against float64 first, its output poisoned
        outs[0].fill(0x7E00 if fmt == "fp16" else 0x7FC0)  # a 16-bit NaN in either format
        out32[0].fill(cp.nan)
        got = fn(0)
        got = cp.from_dlpack(got.float().contiguous()).reshape(q.shape) if name.startswith("sdpa") else got
        errs[name] = harness.rel_err(as_float64(got[:1], "fp16" if got.dtype != np.uint16 else fmt), ref)
        if not errs[name] < REL_TOL[fmt]:
            raise RuntimeError(f"{name} {fmt} {shape} causal={causal}: rel_err {errs[name]}")
    refname = "sdpa_cudnn" if tch is not None else "ha_overlap"
    paired = harness.paired_rounds(cases, refname, rounds=2 if quick else ROUNDS, warmup=2, samples=5,
                                   min_sample_ms=20.0)
    suffix = "_causal" if causal else ""
    ref_id = results.record_id(TOPIC, "torch" if tch is not None else "cupy", refname + suffix, shape, dtype)
    records = []
    for name, (fn, arg_sets) in cases.items():
        ms = paired[name]["ms"]
        fields = dict(step=name, causal=causal, format=fmt, tflops=flop / (ms * 1e-3) / 1e12, rel_err=errs[name],
                      ratio=paired[refname]["ms"] / ms, **harness.paired_fields(paired[name], ref_id))
        if "sdpa_flash" in paired:
            fields["vs_flash"] = paired["sdpa_flash"]["ms"] / ms
        if name.startswith("sdpa"):
            fields["torch"] = tch[0].__version__
        if (bh, n, d) == GOAL and fmt == "fp16" and not causal and name in ("ha_overlap", "sdpa_cudnn", "mma_sync"):
            fields.update(harness.energy_fields(harness.measure_energy(fn, arg_sets), gflop=flop / 1e9))
        records.append(results.record(TOPIC, "torch" if name.startswith("sdpa") else "cupy", name + suffix, shape,
                                      dtype, ms=ms, ref=None if name == refname else ref_id, **fields))
    return records


# ---------------------------------------------------------------- Nsight Compute --

def launch_each() -> None:
    """The child ncu profiles: each ladder step once at the goal size (FP16,
    non-causal), inputs copied from the host, the first 64 rows of the first
    head checked against float64 on the host."""
    import cupy as cp

    from .. import harness, hopper_attention as ha

    bh, n, d = GOAL
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((bh, n, d), dtype=np.float32).astype(np.float16) for _ in range(3)]
    q, k, v = (cp.asarray(x) for x in host)
    q64, k64, v64 = (x[0].astype(np.float64) for x in host)
    s = q64[:64] @ k64.T / math.sqrt(d)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = (p / p.sum(axis=1, keepdims=True)) @ v64
    out = cp.empty_like(q)
    for kernel in LADDER:
        ha.hopper_attention(q, k, v, out=out, kernel=kernel)
        err = harness.rel_err(cp.asnumpy(out[0, :64]).astype(np.float64), want)
        if not err < REL_TOL["fp16"]:
            raise RuntimeError(f"{kernel}: rel_err {err}")


def profile() -> dict:
    """{ladder step: {metric: value}} from one launch each under ncu."""
    from .. import harness

    rows, _ = harness.ncu_metrics(list(NCU_METRICS.values()), "ha_", ["kernels.bench.attention_hopper",
                                                                     "--launch-each"],
                                  need="attention_hopper reads Nsight Compute's counters")
    found = {}
    for kernel, m in harness.ncu_launches(rows, NCU_METRICS):
        found[kernel.rsplit("_d", 1)[0]] = m
    return found


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    tch = _torch()
    records = []
    for case in QUICK_CASES if quick else CASES:
        records += measure_case(*case, tch, quick)
        cp.get_default_memory_pool().free_all_blocks()  # the case's inputs, gone with its closures
    if not quick:
        bh, n, d = GOAL
        timed = {r["step"]: r for r in records if r["shape"] == list(GOAL) and r["format"] == "fp16"
                 and not r["causal"]}
        for step, m in profile().items():
            fields = {k: (v / 100 if k in PERCENT else v) for k, v in m.items() if k != "ncu_ns"}
            ms = m["ncu_ns"] / 1e6
            records.append(results.record(TOPIC, "ncu", step, list(GOAL), "float16", ms=ms,
                                          ref=timed[step]["id"], rel_err=timed[step]["rel_err"], step=step,
                                          causal=False, format="fp16", profiler="ncu --clock-control none",
                                          tflops=4 * n * n * d * bh / (ms * 1e-3) / 1e12,
                                          ratio=timed[step]["ms"] / ms, **fields))
    return records


def rel_err_bound(r: dict) -> float:
    return REL_TOL[r["format"]]


PLOT_WORDS = {
    "Hopper attention: the ladder against torch SDPA": "注意力核函数的逐级优化，对照 torch",
    "useful TFLOP/s": "有效 TFLOP/s",
    "non-causal": "无掩码",
    "causal": "因果掩码",
    "batch x heads": "批 × 头",
    "head dim": "头维度",
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    recs = [r for r in results.select(data, TOPIC) if r["impl"] != "ncu" and r["format"] == "fp16"]
    if not recs:
        return []
    env = data["topics"][TOPIC]["env"]
    steps = [s for s in ("mma_sync", *LADDER, "sdpa_flash", "sdpa_cudnn") if any(r["step"] == s for r in recs)]
    shapes = [s for s in (GOAL, (32, 4096, 64)) if any(r["shape"] == list(s) for r in recs)]
    fig, axes = plotting.new_figure(8, 3.4 * len(shapes), nrows=len(shapes))
    axes = np.atleast_1d(axes)
    for ax, shape in zip(axes, shapes):
        xs = np.arange(len(steps))
        for i, causal in enumerate((False, True)):
            by = {r["step"]: r for r in recs if r["shape"] == list(shape) and r["causal"] == causal}
            ax.bar(xs + (i - 0.5) * 0.4, [by.get(s, {}).get("tflops", np.nan) for s in steps], 0.4,
                   label="causal" if causal else "non-causal")
        ax.set_xticks(xs, steps, fontsize=7, rotation=30, ha="right")
        ax.set_title(f"batch x heads {shape[0]}, N = {shape[1]}, head dim {shape[2]}, FP16", fontsize=9)
        ax.set_ylabel("useful TFLOP/s")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.subplots_adjust(hspace=0.6)  # room for the rotated names above the next panel
    return plotting.save(fig, axes[0], TOPIC, env, out_dir, "Hopper attention: the ladder against torch SDPA",
                         words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    recs = results.select(data, TOPIC)
    out = [f"{'shape':>14} {'fmt':4} {'c':1} {'step':12} {'ms':>8} {'TFLOP/s':>7} {'ratio':>6} {'[min, max]':>13}"]
    for r in recs:
        if r["impl"] == "ncu":
            out.append(f"{'x'.join(map(str, r['shape'])):>14} ncu  {r['step']:12} {r['ms']:8.4f} tensor "
                       f"{r['tensor_pipe_active']:.2f} issue {r['issue_active']:.2f} xu {r['xu_active']:.2f}")
            continue
        spread = f"[{r['ratio_min']:.3f},{r['ratio_max']:.3f}]"
        out.append(f"{'x'.join(map(str, r['shape'])):>14} {r['format']:4} {int(r['causal'])} {r['step']:12} "
                   f"{r['ms']:8.4f} {r['tflops']:7.1f} {r['paired_ratio']:6.3f} {spread:>13}")
    if recs and not any(r["impl"] == "torch" for r in recs):
        out.append("torch was not importable when this was measured: no SDPA anchor")
    return out


def claims(data: dict) -> None:
    """docs/algorithms*.md, section "attention-hopper"."""
    from .. import harness

    recs = [r for r in results.select(data, TOPIC) if r["impl"] != "ncu"]
    assert all(r["rel_err"] < rel_err_bound(r) for r in recs)
    by = {(tuple(r["shape"]), r["format"], r["causal"], r["step"]): r for r in recs}
    if not any(r["impl"] == "torch" for r in recs):
        return  # measured without torch: no anchor to hold the goals against
    ours = {k[:3]: r for k, r in by.items() if k[3] == "ha_overlap"}
    assert len(ours) == len(CASES)
    under_goal = 0  # cases with a round under the goal line
    for (shape, fmt, causal), r in ours.items():
        goal = 0.85 if causal or shape[2] == 64 else 0.90  # the goals against cuDNN
        assert r["paired_ratio"] > goal and harness.against(r, goal) in ("above", "level"), (shape, fmt, causal)
        under_goal += harness.against(r, goal) != "above"
        assert r["vs_flash"] >= 1.5, (shape, fmt, causal)  # and >= 1.5 x FlashAttention-2
        if shape[2] == 128:  # level with cuDNN (rounds on both sides of 1.0), or ahead in every round
            assert harness.against(r, 1.0) in ("level", "above"), (shape, fmt, causal)
        elif causal:  # d = 64 with the mask: the median round behind cuDNN, no round clearly ahead
            assert r["paired_ratio"] < 1.0 and r["ratio_max"] < 1.01, (shape, fmt, causal)
        else:  # d = 64 without it: level
            assert harness.against(r, 1.0) == "level", (shape, fmt, causal)
    assert under_goal <= 1  # every round above the goal in all cases but at most one
    # the ladder at the goal size: specialization the big step; ping-pong alone no faster;
    # the overlap inside the warpgroup the fastest; the mma.sync kernel under half its speed
    g = {s: by[GOAL, "fp16", False, s] for s in (*LADDER, "mma_sync")}
    assert g["ha_plain"]["ms"] > 1.4 * g["ha_ws"]["ms"]
    assert g["ha_pingpong"]["ms"] > 0.97 * g["ha_ws"]["ms"]
    assert g["ha_overlap"]["ms"] < min(g[s]["ms"] for s in LADDER[:3])
    assert g["mma_sync"]["ms"] > 2 * g["ha_overlap"]["ms"]
    # d = 64: specialization alone gains nothing (if anything it is a few percent slower); the overlap does
    g64 = {s: by[(32, 4096, 64), "fp16", False, s] for s in LADDER}
    assert 0.97 < g64["ha_ws"]["ms"] / g64["ha_plain"]["ms"] < 1.08
    assert g64["ha_overlap"]["ms"] < 0.95 * min(g64[s]["ms"] for s in LADDER[:3])
    # energy per useful FLOP at the goal size: within 5 % of cuDNN's, under half the mma.sync kernel's
    e = {s: by[GOAL, "fp16", False, s]["energy_j_per_gflop"] for s in ("ha_overlap", "sdpa_cudnn", "mma_sync")}
    assert abs(e["ha_overlap"] / e["sdpa_cudnn"] - 1) < 0.05
    assert e["ha_overlap"] < 0.5 * e["mma_sync"]
    # the profile: the tensor pipe busiest in ha_overlap, about twice ha_plain's; the XU pipe
    # (ex2) under half busy in every step
    prof = {r["step"]: r for r in results.select(data, TOPIC) if r["impl"] == "ncu"}
    assert prof["ha_overlap"]["tensor_pipe_active"] == max(p["tensor_pipe_active"] for p in prof.values())
    assert prof["ha_overlap"]["tensor_pipe_active"] > 1.8 * prof["ha_plain"]["tensor_pipe_active"]
    assert all(p["xu_active"] < 0.5 for p in prof.values())


def sanitize() -> None:
    """`make sanitize`: every kernel, both formats and d, causal or not, at
    small odd N, twice in a row into a poisoned output, checked."""
    import cupy as cp

    from kernels import harness, hopper_attention as ha

    for n in (1, 77, 130):
        for d in (64, 128):
            for fmt in ("fp16", "bf16"):
                (q, k, v), f64 = inputs(2, n, d, fmt, seed=n + d)
                for causal in (False, True):
                    ref = reference(*f64, causal)
                    for kernel in ha.KERNELS:
                        for _ in range(2):
                            out = cp.full_like(q, 0x7E00 if fmt == "fp16" else 0x7FC0)
                            ha.hopper_attention(q, k, v, causal, out, kernel=kernel)
                            assert harness.rel_err(as_float64(out[:1], fmt), ref) < REL_TOL[fmt], (kernel, n, d)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--launch-each"]:
        launch_each()
