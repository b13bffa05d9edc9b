"""The results file, docs/assets/results/<gpu>.json: read, merge, check, render.

Layout:
    {"schema": 1,
     "env": {...stamp of the latest run...},
     "topics": {"vector_add": {"env": {...stamp of the run that measured it...}}},
     "records": [{"id", "topic", "impl", "variant", "shape", "dtype", "ms",
                  "gbps" or "tflops", "ref", "ratio", "rel_err", ...}, ...]}

A run replaces the records of the topics it measured and keeps the rest.
Pages render tables from this file (docs/hooks/results.py calls
`render_table` and `render_stamp`); nothing on a page is typed by hand.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "docs" / "assets" / "results"
SCHEMA = 1
REQUIRED = ("id", "topic", "impl", "variant", "shape", "dtype", "ms", "ref", "ratio", "rel_err")
ENV_REQUIRED = ("gpu", "compute_capability", "driver", "cuda_runtime", "cupy", "numba",
                "numba_cuda", "date", "commit")


def record_id(topic: str, impl: str, variant: str, shape, dtype: str) -> str:
    return f"{topic}/{impl}/{variant}/{'x'.join(str(s) for s in shape)}/{dtype}"


def results_path(gpu_slug: str) -> Path:
    return RESULTS_DIR / f"{gpu_slug}.json"


def load(path: Path) -> dict:
    if not Path(path).exists():
        return {"schema": SCHEMA, "env": {}, "topics": {}, "records": []}
    return json.loads(Path(path).read_text())


def merge(old: dict, env: dict, records: list[dict]) -> dict:
    """Replace the topics present in `records`; keep every other topic."""
    topics = {r["topic"] for r in records}
    kept = [r for r in old.get("records", []) if r["topic"] not in topics]
    topic_env = dict(old.get("topics", {}))
    for t in topics:
        topic_env[t] = {"env": env}
    merged = sorted(kept + list(records), key=lambda r: (r["topic"], r["id"]))
    return {"schema": SCHEMA, "env": env, "topics": dict(sorted(topic_env.items())),
            "records": merged}


def save(path: Path, data: dict) -> None:
    problems = validate(data)
    if problems:
        raise ValueError("results file would be invalid:\n  " + "\n  ".join(problems))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def validate(data: dict) -> list[str]:
    """Everything wrong with a results file (empty list: valid)."""
    problems = []
    for key in ENV_REQUIRED:
        if not data.get("env", {}).get(key):
            problems.append(f"env lacks {key}")
    ids = {}
    for r in data.get("records", []):
        rid = r.get("id", "?")
        for key in REQUIRED:
            if key not in r:
                problems.append(f"{rid}: lacks {key}")
        if not ("gbps" in r or "tflops" in r or "gops" in r or r.get("check") is True):
            problems.append(f"{rid}: has no rate (gbps, tflops, or gops for integer operations; "
                            f"or check: true for a record that compares two answers, not a speed)")
        if not isinstance(r.get("shape"), list) or not all(isinstance(s, int) for s in r.get("shape", [])):
            problems.append(f"{rid}: shape must be a list of ints")
        if r.get("topic") not in data.get("topics", {}):
            problems.append(f"{rid}: topic {r.get('topic')!r} has no env stamp")
        if rid in ids:
            problems.append(f"{rid}: duplicate id")
        ids[rid] = r
    for r in data.get("records", []):
        ref = ids.get(r.get("ref"))
        if ref is None:
            problems.append(f"{r.get('id')}: ref {r.get('ref')!r} is not a record")
            continue
        if ref["topic"] != r["topic"]:
            problems.append(f"{r['id']}: ref is from another topic (another run)")
        unit = next((u for u in ("gbps", "tflops", "gops") if u in r), None)
        if unit is None:
            continue  # reported above
        if unit in ref and ref[unit] and r.get("ratio") is not None:
            want = r[unit] / ref[unit]
            if not math.isclose(want, r["ratio"], rel_tol=1e-6):
                problems.append(f"{r['id']}: ratio {r['ratio']} != {unit}/{unit} of ref = {want}")
    return problems


# ------------------------------------------------------------- rendering --

HEADERS = {
    "zh": {"impl": "实现", "variant": "变体", "shape": "规模", "n": "元素数", "dtype": "类型",
           "ms": "时间 (ms)", "gbps": "带宽 (GB/s)", "tflops": "TFLOP/s", "ratio": "相对参考",
           "ref": "参考", "rel_err": "相对误差", "energy_j_per_gflop": "能耗 (J/GFLOP)",
           "energy_pj_per_byte": "能耗 (pJ/B)", "avg_power_w": "平均功率 (W)",
           "gops": "G 步/s", "ratio_to_cp_sum": "相对 cupy.sum", "registers": "寄存器",
           "local_bytes": "局部内存 (B)", "split": "路径 A 的 lane 数", "chains": "累加器数",
           "step": "步", "intensity": "算术强度 (FLOP/B)", "regs": "寄存器", "smem_bytes": "共享内存 (B)",
           "occupancy": "占用率", "blocks_per_sm": "每 SM 块数", "energy_ratio_to_naive": "能耗 / 朴素版",
           "cycles": "周期", "ns": "纳秒", "footprint_bytes": "链的大小",
           "energy_pj_per_op": "能耗 (pJ/字或 FMA)", "energy_dynamic_pj_per_op": "高出空闲部分 (pJ)",
           "relative_energy": "相对 FMA", "relative_energy_dynamic": "相对 FMA（高出空闲）",
           "stride": "步长", "offset": "偏移", "sectors_per_request": "每个 warp 的扇区数",
           "sector_model": "扇区模型", "calc_blocks_per_sm": "计算器：每 SM 块数",
           "driver_blocks_per_sm": "驱动：每 SM 块数", "binding": "受限于", "dynamic_smem": "动态共享内存 (B)",
           "threads": "线程数"},
    "en": {"impl": "impl", "variant": "variant", "shape": "shape", "n": "elements", "dtype": "dtype",
           "ms": "time (ms)", "gbps": "bandwidth (GB/s)", "tflops": "TFLOP/s", "ratio": "ratio to ref",
           "ref": "reference", "rel_err": "rel. error", "energy_j_per_gflop": "energy (J/GFLOP)",
           "energy_pj_per_byte": "energy (pJ/B)", "avg_power_w": "avg. power (W)",
           "gops": "Gsteps/s", "ratio_to_cp_sum": "ratio to cupy.sum", "registers": "registers",
           "local_bytes": "local memory (B)", "split": "lanes on path A", "chains": "accumulators",
           "step": "step", "intensity": "intensity (FLOP/B)", "regs": "registers", "smem_bytes": "shared (B)",
           "occupancy": "occupancy", "blocks_per_sm": "blocks/SM", "energy_ratio_to_naive": "energy / naive",
           "cycles": "cycles", "ns": "ns", "footprint_bytes": "footprint",
           "energy_pj_per_op": "energy (pJ/word or FMA)", "energy_dynamic_pj_per_op": "above idle (pJ)",
           "relative_energy": "× FMA", "relative_energy_dynamic": "× FMA (above idle)",
           "stride": "stride", "offset": "offset", "sectors_per_request": "sectors per warp",
           "sector_model": "sector model", "calc_blocks_per_sm": "calculator: blocks/SM",
           "driver_blocks_per_sm": "driver: blocks/SM", "binding": "bound by", "dynamic_smem": "dynamic shared (B)",
           "threads": "threads"},
}


def _fmt(key: str, value) -> str:
    if value is None:
        return "—"
    if key == "shape":
        return "×".join(str(s) for s in value)
    if key == "n":
        n = int(value)
        sup = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
        return f"2{str(n.bit_length() - 1).translate(sup)}" if n & (n - 1) == 0 else f"{n:,}"
    if (_derived(key) or key == "energy_ratio_to_naive") and isinstance(value, float):
        return f"{value:.3f}"
    if key.endswith("_bytes") and key not in ("smem_bytes", "local_bytes") and isinstance(value, int):
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size and value % size == 0:
                return f"{value // size} {unit}"
        return str(value)
    if key == "ref":
        return str(value).split("/")[1] + " " + str(value).split("/")[2]
    if isinstance(value, float):
        if key == "rel_err":
            return f"{value:.1e}"
        if key == "ratio":
            return f"{value:.2f}"
        if key == "ms":
            return f"{value:.4g}"
        return f"{value:,.1f}" if value >= 100 else f"{value:.3g}"
    return str(value)


def select(data: dict, topic: str, where: dict | None = None) -> list[dict]:
    """A topic's records (filtered by where={key: "v1|v2"}), ordered by
    impl, variant and size."""
    rows = sorted((r for r in data.get("records", []) if r["topic"] == topic),
                  key=lambda r: (r["impl"], r["variant"], r["shape"]))
    for key, want in (where or {}).items():
        rows = [r for r in rows if str(_value(r, key)) in want.split("|")]
    return rows


def _value(r: dict, key: str):
    if key == "n":
        return r["shape"][0]
    return r.get(key)


# Columns derived at render time from other records of the same run:
# time (or energy per GFLOP) of a row over that of the same implementation's
# step <variant> at the same shape, e.g. time_vs_naive, energy_vs_coalesced
# (the form of the source chapters' tables).
DERIVED = {"time_vs_": "ms", "energy_vs_": "energy_j_per_gflop"}


def _derived(key: str):
    return next(((p, f) for p, f in DERIVED.items() if key.startswith(p)), None)


def _derive(data: dict, topic: str, r: dict, key: str):
    prefix, field = _derived(key)
    variant = key[len(prefix):]
    base = next((b for b in data.get("records", []) if b["topic"] == topic and b["impl"] == r["impl"]
                 and b["variant"] == variant and b["shape"] == r["shape"]), None)
    if base is None or r.get(field) is None or not base.get(field):
        return None
    return r[field] / base[field]


def render_table(data: dict, topic: str, columns: list[str], lang: str = "zh",
                 where: dict | None = None, order: str | None = None) -> str:
    """A markdown table of a topic's records; `order` names a key to sort by
    ("-key": descending; records without it last), else impl, variant, size."""
    rows = select(data, topic, where)
    if not rows:
        return ""
    if order:  # "-key": largest first
        key, sign = (order[1:], -1) if order.startswith("-") else (order, 1)
        rows.sort(key=lambda r: (_value(r, key) is None, sign * (_value(r, key) or 0), r["shape"]))
    head = HEADERS[lang]

    def header(c):
        if _derived(c) and c not in head:
            prefix = _derived(c)[0]
            what = {"time_vs_": ("时间", "time"), "energy_vs_": ("能耗", "energy")}[prefix][lang == "en"]
            return f"{what} / {c[len(prefix):]}"
        return head.get(c, c)
    lines = ["| " + " | ".join(header(c) for c in columns) + " |",
             "|" + "|".join("---:" if c not in ("impl", "variant", "ref") else "---" for c in columns) + "|"]
    for r in rows:
        values = [_derive(data, topic, r, c) if _derived(c) else _value(r, c) for c in columns]
        lines.append("| " + " | ".join(_fmt(c, v) for c, v in zip(columns, values)) + " |")
    return "\n".join(lines)


def render_stamp(data: dict, topic: str, lang: str = "zh") -> str:
    env = data.get("topics", {}).get(topic, {}).get("env")
    if not env:
        return ""
    commit = str(env.get("commit", ""))[:10]
    if lang == "zh":
        return (f"测量环境：{env['gpu']}（计算能力 {env['compute_capability']}），驱动 {env['driver']}，"
                f"CUDA {env['cuda_runtime']}，CuPy {env['cupy']}，Numba {env['numba']}，"
                f"numba-cuda {env['numba_cuda']}；日期 {env['date'][:10]}，提交 `{commit}`。")
    return (f"Measured on {env['gpu']} (compute capability {env['compute_capability']}), driver "
            f"{env['driver']}, CUDA {env['cuda_runtime']}, CuPy {env['cupy']}, Numba {env['numba']}, "
            f"numba-cuda {env['numba_cuda']}; date {env['date'][:10]}, commit `{commit}`.")
