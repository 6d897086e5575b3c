"""HTML of the main page and of a job's page (server-rendered; the browser swaps the
`<main>` fragment in place every few seconds, see static/live.js). Every text is escaped."""
from __future__ import annotations

import time
from html import escape

from slurm_plugin.web.jobview import JobDetail, as_stored
from slurm_plugin.web.model import EventRow, JobRow, Overview
from slurm_plugin.web.svg import GIB, gpu_bar, memory_plot


def _e(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def utc(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


def document(title: str, fragment_url: str, body: str, refresh_s: float, base_path: str = "/",
             taken_at: float | None = None) -> str:
    """A whole page: `body` inside a `<main>` that live.js refreshes from `fragment_url`
    (relative to `base_path`, where the site's proxy serves the view)."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<base href="{_e(base_path.rstrip("/") + "/")}"><title>{_e(title)}</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<noscript><meta http-equiv="refresh" content="{max(1, round(refresh_s * 3))}"></noscript>'
        '<link rel="stylesheet" href="static/web.css"><script src="static/live.js" defer></script>'
        "</head><body>"
        f'<header><a class="home" href="./">gpupack</a> <span class="title">{_e(title)}</span>'
        f'<span id="live-status" class="live-status">{"data from " + _e(utc(taken_at)) + " UTC" if taken_at else ""}</span></header>'
        f'<main id="live" data-fragment="{_e(fragment_url)}" data-refresh-ms="{int(refresh_s * 1000)}">'
        f"{body}</main></body></html>\n"
    )


def _peak_of(run) -> str:
    """A run's peak; a lower bound (`packer.run_truth`) as "≥ peak (why)"."""
    return f"&ge; {_gib(run.peak_mem_bytes)} ({_e(run.end_state)})" if run.lower_bound else _gib(run.peak_mem_bytes)


def _job_link(job_id: int | None) -> str:
    return "-" if job_id is None else f'<a href="job/{job_id}">{job_id}</a>'


def _decision_cell(r: JobRow) -> str:
    text = r.decision + (f" shard:{r.shards}" if r.decision == "packed" and r.shards else "")
    if r.verdict and r.verdict != r.decision:
        text += f" (advised {r.verdict})"
    return f'<td class="decision decision-{_e(r.decision)}">{_e(text)}</td>'


def _job_rows(rows: tuple[JobRow, ...], pending: bool) -> str:
    out = []
    for r in rows:
        why = r.state_reason if pending else r.nodes
        out.append(
            f'<tr class="job" data-job="{r.job_id}" data-decision="{_e(r.decision)}"><td>{_job_link(r.job_id)}</td>'
            f"<td>{_e(r.user)}</td><td>{_e(r.name)}</td><td>{_e(r.state)}</td>{_decision_cell(r)}"
            f"<td>{_e(r.reason or '-')}</td><td>{_e(r.gres or '-')}</td><td>{_e(why or '-')}</td></tr>"
        )
    return "".join(out)


def _events_table(events: tuple[EventRow, ...]) -> str:
    if not events:
        return '<p class="empty">No events yet.</p>'
    rows = "".join(
        f'<tr class="event" data-kind="{_e(e.kind)}" data-job="{_e(e.job_id)}"><td>{_e(utc(e.at))}</td>'
        f"<td>{_job_link(e.job_id)}</td><td class=\"kind kind-{_e(e.kind)}\">{_e(e.kind)}</td><td>{_e(e.detail)}</td></tr>"
        for e in events
    )
    return f'<table class="events"><thead><tr><th>UTC</th><th>job</th><th>kind</th><th>what and why</th></tr></thead><tbody>{rows}</tbody></table>'


def overview_fragment(ov: Overview) -> str:
    modes = ov.gpu_modes
    gpus = sum(modes.values())
    by = ov.running_by_decision
    out = [
        '<section class="summary">'
        f"<p>{len(ov.nodes)} nodes, {gpus} GPUs "
        f"(<b>{modes.get('packed', 0)}</b> shared, <b>{modes.get('exclusive', 0)}</b> exclusive, "
        f"{modes.get('idle', 0)} idle); {ov.running_total} jobs running "
        f"(<b>{by.get('packed', 0)}</b> packed, {by.get('exclusive', 0)} exclusive, {by.get('untouched', 0)} untouched), "
        f"{ov.pending_total} pending.</p>"
    ]
    for p in ov.problems:
        out.append(f'<p class="problem">{_e(p)}</p>')
    out.append("</section><section class=\"nodes\"><h2>Nodes and GPUs</h2>")
    for n in ov.nodes:
        gpus_html = "".join(
            f'<div class="gpu gpu-{g.mode}" data-gpu="{g.index}" data-mode="{g.mode}">'
            f'<span class="gpu-name">GPU {g.index}</span>{gpu_bar(g)}<span class="gpu-mode">{g.mode}</span></div>'
            for g in n.gpus
        ) or '<p class="empty">no GPUs</p>'
        out.append(f'<div class="node{"" if n.usable else " unusable"}" id="node-{_e(n.name)}" data-node="{_e(n.name)}">'
                   f'<h3>{_e(n.name)} <span class="state">{_e(n.state)}</span></h3>{gpus_html}</div>')
    out.append("</section>")
    head = "<thead><tr><th>job</th><th>user</th><th>name</th><th>state</th><th>decision</th><th>reason</th><th>request</th><th>{}</th></tr></thead>"
    out.append(f'<section class="pending"><h2>Pending ({ov.pending_total})</h2>')
    if ov.pending_by_reason:
        out.append('<table class="reasons"><thead><tr><th>decision</th><th>reason</th><th>jobs</th></tr></thead><tbody>'
                   + "".join(f"<tr><td>{_e(d)}</td><td>{_e(r)}</td><td>{n}</td></tr>" for d, r, n in ov.pending_by_reason)
                   + "</tbody></table>")
    if ov.pending:
        out.append(f'<table class="jobs" id="pending-jobs">{head.format("waits for")}<tbody>{_job_rows(ov.pending, True)}</tbody></table>')
    if ov.pending_total > len(ov.pending):
        out.append(f'<p class="cut">… and {ov.pending_total - len(ov.pending)} more (see <code>gpupack jobs</code>).</p>')
    out.append(f'</section><section class="events-latest"><h2>Latest events</h2>{_events_table(ov.events)}</section>')
    out.append(f'<section class="running"><h2>Running ({ov.running_total})</h2>')
    if ov.running:
        out.append(f'<table class="jobs" id="running-jobs">{head.format("nodes")}<tbody>{_job_rows(ov.running, False)}</tbody></table>')
    if ov.running_total > len(ov.running):
        out.append(f'<p class="cut">… and {ov.running_total - len(ov.running)} more.</p>')
    out.append("</section>")
    return "".join(out)


def _gib(b: float | None) -> str:
    return "-" if b is None else f"{b / GIB:.2f} GiB"


def job_fragment(d: JobDetail) -> str:
    r = d.row
    out = ['<section class="job-head">']
    if r is None:
        out.append(f"<p>Slurm no longer knows job {d.job_id} (past MinJobAge); its history and events follow.</p>")
    else:
        out.append(
            f'<dl class="facts"><dt>job</dt><dd>{d.job_id} {_e(r.name)} ({_e(r.user)})</dd>'
            f'<dt>state</dt><dd id="job-state">{_e(r.state)}{" (" + _e(r.state_reason) + ")" if r.state_reason and r.state == "PENDING" else ""}'
            f"{', restarted ' + str(r.restarts) + ' time(s)' if r.restarts else ''}</dd>"
            f'<dt>decision</dt><dd id="job-decision" class="decision-{_e(r.decision)}">{_e(r.decision)}'
            f"{' shard:' + str(r.shards) if r.shards else ''}{' (advised ' + _e(r.verdict) + ')' if r.verdict and r.verdict != r.decision else ''}</dd>"
            f"<dt>reason</dt><dd>{_e(r.reason or '-')}</dd><dt>request</dt><dd>{_e(r.gres or '-')}</dd>"
            f"<dt>nodes</dt><dd>{_e(r.nodes or '-')}</dd>"
            f"<dt>AdminComment</dt><dd><code>{_e(d.admin_comment or '-')}</code></dd></dl>"
        )
    out.append("</section><section class=\"history\"><h2>History estimate</h2>")
    if d.estimate is None:
        fp = d.record_fields.get("fp")
        out.append(f"<p>No finished run of this workload yet{' (fingerprint ' + _e(fp) + ')' if fp else ''}: "
                   "a job without history keeps a whole GPU and is profiled on its first run.</p>")
    else:
        est = d.estimate
        util = "-" if est.mean_util_pct is None else f"{est.mean_util_pct:.0f}%"
        runs = f"the last {est.runs} run(s)" if est.measured else f"{est.runs} lower bound(s) only: no run measured it whole"
        out.append(f'<p id="estimate">Peak {_gib(est.peak_mem_bytes)}, utilisation {util}, from {runs} '
                   f"(fingerprint {_e(d.record_fields.get('fp', '-'))}).</p>")
    if d.remembered_shards is not None:
        out.append(f"<p>Remembered size after a memory restart: shard:{d.remembered_shards}.</p>")
    if d.runs:
        out.append('<table class="runs"><thead><tr><th>job</th><th>ended (UTC)</th><th>peak</th><th>util</th>'
                   "<th>throughput</th></tr></thead><tbody>" + "".join(
                       f"<tr><td>{_job_link(run.job_id)}</td><td>{_e(utc(run.ended_at))}</td><td>{_peak_of(run)}</td>"
                       f"<td>{'-' if run.mean_util_pct is None else f'{run.mean_util_pct:.0f}%'}</td>"
                       f"<td>{'-' if run.throughput is None else f'{run.throughput:.2f}/s'}</td></tr>" for run in d.runs)
                   + "</tbody></table>")
    out.append('</section><section class="memory"><h2>Memory</h2>')
    if d.node is not None:
        out.append(f"<p>On {_e(d.node)} GPU {d.gpu_index}, isolation <code>{_e(d.isolation)}</code>"
                   f"{'; partition ' + _e(d.capacity_label) + ' = ' + _gib(d.capacity_bytes) if d.capacity_bytes else ''}.</p>")
    if d.stored is not None:
        c = d.stored
        out.append(f'<p id="stored-curve" class="stored">Stored at the run\'s end ({_e(utc(c.ended_at))} UTC, '
                   f"{_e(c.how_it_ended)}): {len(c.points)} points kept of {c.samples} samples, peak "
                   f"{_gib(c.peak_bytes)} over {c.duration_s:.0f} s. A finished run has no forecast.</p>")
    out.append(memory_plot(d))
    fc = d.forecast
    if fc is not None:
        verdict = "will outgrow its partition" if fc.warn else ("may outgrow it" if fc.may_exceed else "fits")
        out.append(f'<p id="forecast" class="forecast-{"warn" if fc.warn else "ok"}">Forecast at {fc.horizon:.0f} s: '
                   f"peak {_gib(fc.predicted_peak_bytes)} (upper bound {_gib(fc.upper_bytes)}), observed {_gib(fc.observed_peak_bytes)} "
                   f"over {fc.samples} samples: <b>{verdict}</b>. <span class=\"why\">{_e(fc.reason)}</span></p>")
    fc_key = "" if d.stored is not None else '<span class="k-fc">forecast and upper bound</span> '
    out.append('<p class="legend"><span class="k-mem">in use</span> <span class="k-peak">peak</span> '
               f'{fc_key}<span class="k-part">partition</span></p>')
    if d.earlier:
        out.append(f'</section><section class="earlier-runs"><h2>Earlier runs of this job ({len(d.earlier)})</h2>')
        for c in d.earlier:
            part = f"; partition {_e(c.capacity_label)} = {_gib(c.capacity_bytes)}" if c.capacity_bytes else ""
            out.append(f'<div class="earlier-run" data-started="{c.started_at:.3f}" data-end="{_e(c.end_state)}">'
                       f"<p>Ended {_e(utc(c.ended_at))} UTC, {_e(c.how_it_ended)}, on {_e(c.node)} GPU {c.gpu_index}"
                       f"{part}: {len(c.points)} points kept of {c.samples} samples, peak {_gib(c.peak_bytes)} "
                       f"over {c.duration_s:.0f} s.</p>{memory_plot(as_stored(d, c), 'memplot earlier')}</div>")
    out.append(f'</section><section class="job-events"><h2>Events</h2>{_events_table(d.events)}</section>')
    return "".join(out)
