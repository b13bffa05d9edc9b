"""What every plot of `make bench` shares: a headless backend, stable SVG
ids, the GPU and date in the title, and the file name <topic>-<gpu>.svg."""

from __future__ import annotations

from pathlib import Path


def new_figure(width: float, height: float, ncols: int = 1):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "gpu-handbook"  # stable SVG ids between runs
    return plt.subplots(1, ncols, figsize=(width, height))


def save(fig, ax, topic: str, env: dict, out_dir: Path, title: str, fontsize: int = 10) -> list[Path]:
    import matplotlib.pyplot as plt

    ax.set_title(f"{title}, {env['gpu']}, {env['date'][:10]}", fontsize=fontsize)
    fig.tight_layout()
    path = Path(out_dir) / f"{topic}-{env['gpu_slug']}.svg"
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)
    return [path]
