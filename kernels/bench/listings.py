"""Rewrite the SASS and ptxas listings the pages embed (docs/assets/sass/):
every topic's LISTINGS. Works without a GPU (nvcc, cuobjdump, nvdisasm).

    python -m kernels.bench.listings
"""

from __future__ import annotations

import sys
from pathlib import Path

from .. import sass


def listings() -> dict:
    """{file name: function returning its text} over every topic."""
    from . import TOPICS

    out = {}
    for topic, module in TOPICS.items():
        for name, make in getattr(module, "LISTINGS", {}).items():
            if name in out:
                raise ValueError(f"two topics write docs/assets/sass/{name}")
            out[name] = make
    return out


def write() -> list[Path]:
    sass.LISTINGS.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in listings().items():
        path = sass.LISTINGS / name
        path.write_text(make())
        written.append(path)
    return written


if __name__ == "__main__":
    if not sass.available():
        sys.exit("needs nvcc, cuobjdump and nvdisasm (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    for p in write():
        print(f"wrote {p.relative_to(sass.ROOT)}")
