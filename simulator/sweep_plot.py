"""The sweep's plot: JCT against cluster size, one line per policy (needs matplotlib, the
``plots`` extra; importing this module raises ImportError without it)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)


def plot_jct(rows: list[dict], labels: list[str], path: Path) -> str:
    """Average and p95 JCT (mean over seeds, 95 % interval as error bars) against GPUs for
    each policy of ``labels``; written to ``path``; returns its file name."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharex=True)
    for lab in labels:
        mine = sorted((r for r in rows if r.get("policy") == lab and "avg_jct_s" in r),
                      key=lambda r: r["gpus"])
        if not mine:
            continue
        x = [r["gpus"] for r in mine]
        for ax, key in zip(axes, ("avg_jct_s", "p95_jct_s")):
            ax.errorbar(x, [r[key] / 3600 for r in mine],
                        yerr=[r[key + "_ci"] / 3600 for r in mine], marker="o", capsize=3,
                        label=lab)
    for ax, what in zip(axes, ("average JCT", "p95 JCT")):
        ax.set_yscale("log")
        ax.set_xlabel("cluster size (GPUs)")
        ax.set_ylabel(f"{what} (hours, log scale)")
        ax.set_title(f"{what} against cluster size")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("mean over seeds; bars: 95 % interval", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path).name
