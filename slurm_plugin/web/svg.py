"""Inline SVG: a GPU as a bar of share slots with each job's slice, and a job's memory curve
with its forecast and the line of its partition. Plain strings, every text escaped."""
from __future__ import annotations

from html import escape

from slurm_plugin.web.jobview import JobDetail
from slurm_plugin.web.model import GpuView

GIB = 1024.0**3
BAR_W, BAR_H = 360, 30


def _a(value: object) -> str:
    return escape(str(value), quote=True)


def gpu_bar(gpu: GpuView) -> str:
    unit = BAR_W / max(1, gpu.shares)
    parts = [
        f'<svg class="gpu-bar" viewBox="0 0 {BAR_W} {BAR_H}" width="{BAR_W}" height="{BAR_H}" role="img" '
        f'aria-label="GPU {gpu.index} of {_a(gpu.node)}: {gpu.mode}">',
        f'<rect class="slot-bg" x="0" y="0" width="{BAR_W}" height="{BAR_H}"/>',
    ]
    if gpu.shares > 1:
        grid = "".join(f"M{i * unit:.0f} 0V{BAR_H}" for i in range(1, gpu.shares))
        parts.append(f'<path class="slot-line" d="{grid}"/>')
    for s in gpu.slices:
        x, w = s.start * unit, max(2.0, s.size * unit)
        if s.job_id is None:
            parts.append(
                f'<g class="slice slice-idle" data-kind="idle" data-label="{_a(s.label)}" data-gpu="{gpu.index}" '
                f'data-node="{_a(gpu.node)}"><title>idle MIG instance {_a(s.label)} at slice {s.start:.0f}</title>'
                f'<rect x="{x + 1:.1f}" y="2" width="{w - 2:.1f}" height="{BAR_H - 4}" rx="3"/>'
                f'<text x="{x + w / 2:.1f}" y="{BAR_H / 2 + 4:.0f}" text-anchor="middle">{"free" if w < 70 else "free " + _a(s.label)}</text></g>'
            )
            continue
        text = f"{s.job_id} {s.label}" if w > 70 else str(s.job_id)
        who = f"{s.user}/{s.name}" if s.user or s.name else ""
        parts.append(
            f'<a href="job/{s.job_id}"><g class="slice slice-{_a(s.kind)}" data-job="{s.job_id}" '
            f'data-kind="{_a(s.kind)}" data-label="{_a(s.label)}" data-gpu="{gpu.index}" data-node="{_a(gpu.node)}">'
            f'<title>job {s.job_id} {_a(who)} {_a(s.label)}{"" if s.placed else " (position drawn, not placed)"}</title>'
            f'<rect x="{x + 1:.1f}" y="2" width="{w - 2:.1f}" height="{BAR_H - 4}" rx="3"/>'
            f'<text x="{x + w / 2:.1f}" y="{BAR_H / 2 + 4:.0f}" text-anchor="middle">{_a(text)}</text></g></a>'
        )
    parts.append("</svg>")
    return "".join(parts)


PLOT_W, PLOT_H = 680, 280
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 14, 34


def _thin(points: list, limit: int = 600) -> list:
    if len(points) <= limit:
        return points
    step = len(points) / limit
    return [points[int(i * step)] for i in range(limit)] + [points[-1]]


def memory_plot(d: JobDetail, cls: str = "memplot") -> str:
    """The job's memory (in use and peak) against seconds since its start; its partition's
    size; the forecast peak at the horizon with its upper bound (a band). `cls`: the svg's
    class (an earlier run's plot: "memplot earlier")."""
    if not d.curve:
        if d.finished:
            return ('<p class="no-plot" id="no-stored-curve">No memory curve was stored for this job: the helper '
                    "stores a run's curve when it sees the run end, so this run ended unwatched (no samples, "
                    "or the helper was down), or its curve was pruned (only the newest runs of each workload keep "
                    "theirs: <code>[monitor] curves_per_fingerprint</code>).</p>")
        return '<p class="no-plot">No memory samples: the job is not running (or its node agent did not answer).</p>'
    t_last = d.curve[-1].t
    fc = d.forecast
    x_max = max(t_last, 1.0) * 1.25
    if fc is not None and fc.horizon > t_last:
        x_max = max(x_max, min(fc.horizon, max(4 * t_last, t_last + 60)))
    y_top = max(p.peak_bytes for p in d.curve)
    if d.capacity_bytes:
        y_top = max(y_top, d.capacity_bytes)
    if fc is not None:
        y_top = max(y_top, _at(fc, t_last, x_max, fc.upper_bytes))
    y_max = max(y_top * 1.12, 1 * GIB)
    iw, ih = PLOT_W - LEFT - RIGHT, PLOT_H - TOP - BOTTOM

    def X(t: float) -> float:
        return LEFT + iw * min(max(t, 0.0), x_max) / x_max

    def Y(b: float) -> float:
        return TOP + ih * (1 - min(max(b, 0.0), y_max) / y_max)

    source = "stored" if d.stored is not None else "live"
    out = [f'<svg class="{_a(cls)}" data-source="{source}" viewBox="0 0 {PLOT_W} {PLOT_H}" width="{PLOT_W}" '
           f'height="{PLOT_H}" role="img" aria-label="memory of job {d.job_id}{" (stored)" if d.stored else ""}">',
           f'<rect class="plot-bg" x="{LEFT}" y="{TOP}" width="{iw}" height="{ih}"/>']
    for k in range(5):  # y grid in GiB
        b = y_max * k / 4
        out.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + iw}" y1="{Y(b):.1f}" y2="{Y(b):.1f}"/>'
                   f'<text class="tick" x="{LEFT - 6}" y="{Y(b) + 4:.1f}" text-anchor="end">{b / GIB:.1f}</text>')
    for k in range(5):
        t = x_max * k / 4
        out.append(f'<text class="tick" x="{X(t):.1f}" y="{PLOT_H - 16}" text-anchor="middle">{t:.0f}</text>')
    out.append(f'<text class="axis" x="{LEFT + iw / 2:.0f}" y="{PLOT_H - 2}" text-anchor="middle">seconds since start</text>'
               f'<text class="axis" x="12" y="{TOP + ih / 2:.0f}" transform="rotate(-90 12 {TOP + ih / 2:.0f})" '
               f'text-anchor="middle">GiB</text>')
    if fc is not None:
        x0, y0 = X(t_last), Y(fc.observed_peak_bytes)
        x1 = X(min(fc.horizon, x_max))
        pred = _at(fc, t_last, x_max, fc.predicted_peak_bytes)
        upper = _at(fc, t_last, x_max, fc.upper_bytes)
        out.append(
            f'<g class="forecast" data-predicted="{fc.predicted_peak_bytes}" data-upper="{fc.upper_bytes}" '
            f'data-horizon="{fc.horizon:.0f}" data-warn="{str(fc.warn).lower()}">'
            f'<title>forecast peak {fc.predicted_peak_bytes / GIB:.2f} GiB (upper {fc.upper_bytes / GIB:.2f} GiB) '
            f'at {fc.horizon:.0f} s: {_a(fc.reason)}</title>'
            f'<polygon class="band" points="{x0:.1f},{y0:.1f} {x1:.1f},{Y(upper):.1f} {x1:.1f},{Y(pred):.1f}"/>'
            f'<line class="predicted" x1="{x0:.1f}" y1="{y0:.1f}" x2="{x1:.1f}" y2="{Y(pred):.1f}"/></g>')
    if d.capacity_bytes:
        yc = Y(d.capacity_bytes)
        out.append(f'<g class="partition" data-bytes="{int(d.capacity_bytes)}"><line x1="{LEFT}" x2="{LEFT + iw}" '
                   f'y1="{yc:.1f}" y2="{yc:.1f}"/><text x="{LEFT + iw - 4}" y="{yc - 5:.1f}" text-anchor="end">'
                   f'{_a(d.capacity_label)} {d.capacity_bytes / GIB:.1f} GiB</text></g>')
    pts = _thin(list(d.curve))
    mem = " ".join(f"{X(p.t):.1f},{Y(p.mem_bytes):.1f}" for p in pts)
    peak = " ".join(f"{X(p.t):.1f},{Y(p.peak_bytes):.1f}" for p in pts)
    out.append(f'<polyline class="peak" points="{peak}"/><polyline class="mem" data-points="{len(d.curve)}" points="{mem}"/>')
    out.append("</svg>")
    return "".join(out)


def _at(fc, t_last: float, x_max: float, value_at_horizon: float) -> float:
    """The straight line from the observed peak now to `value_at_horizon`, where it leaves
    the plot (the horizon may lie far to the right of what the plot shows)."""
    if fc.horizon <= t_last or fc.horizon <= x_max:
        return float(value_at_horizon)
    frac = (x_max - t_last) / (fc.horizon - t_last)
    return fc.observed_peak_bytes + frac * (value_at_horizon - fc.observed_peak_bytes)
