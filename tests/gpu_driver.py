"""Launch every CUDA C kernel of the project once, at odd sizes, and check
the results: the program that `make sanitize` runs under compute-sanitizer
(memcheck, racecheck). Exit code 0 only when every result is right.

    compute-sanitizer --tool memcheck --error-exitcode 1 python -m tests.gpu_driver [matmul ...]

The launches are each topic's `sanitize()` (kernels/bench/<topic>.py); the
arguments name topics.
"""

import sys


def drivers() -> dict:
    """{topic: its sanitize()} for every topic that has CUDA C kernels."""
    from kernels.bench import TOPICS

    return {t: m.sanitize for t, m in TOPICS.items() if hasattr(m, "sanitize")}


def main(argv=None) -> int:
    """Run every topic's launches, or those of the topics named."""
    names = sys.argv[1:] if argv is None else argv
    found = drivers()
    unknown = set(names) - set(found)
    if unknown:
        print(f"unknown topics {sorted(unknown)}; choose from {sorted(found)}")
        return 2
    for topic, sanitize in found.items():
        if names and topic not in names:
            continue
        sanitize()
        print(f"{topic}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
