// A notification's live progress: status, per-platform counts, the
// delivery curves (uPlot: accepted by Apple/Google/push services, received on phones,
// opened) with the 90% and two-minute lines, t50/t90/t99, the provider-
// and device-side 90in2 verdicts, cleanup, a trace link and Cancel. Polls the status
// and the curve every second (ETags make an unchanged answer a 304).

import { api, currentSession } from './api.js';
import { $, confirmDialog, el, formatCount, formatMs, formatTime, formatVerdict, fromTemplate, setText, toast } from './dom.js';
// How a platform's name reads in the table (written by the coordinator
// from proto's platforms); any other shows as named.
import { PLATFORM_LABELS } from './platforms.js';

const POLL_MS = 1000;
const FINISHED = ['complete', 'failed', 'cancelled'];
const TWO_MINUTES = 120;

// How long after the send a finished notification's page keeps polling
// for the phones' receipts.
const RECEIPTS_FOLLOW_MS = 10 * 60 * 1000;

export function showProgress(main, id) {
  main.replaceChildren(fromTemplate('tpl-progress'));
  let timer = null;
  let stopped = false;
  let chart = null;

  async function poll() {
    try {
      const [status, curve] = await Promise.all([
        api('GET', `/api/v1/notifications/${id}`),
        api('GET', `/api/v1/notifications/${id}/curve`),
      ]);
      if (stopped) return;
      render(status);
      chart = drawCurve(chart, curve);
      // Once finished, only the phones' receipts still move the figures:
      // they trickle in for minutes after the send.
      const sentMs = Date.parse(status.fired_at ?? status.created_at);
      if (FINISHED.includes(status.status) && (!status.device || Date.now() - sentMs > RECEIPTS_FOLLOW_MS)) return;
    } catch (err) {
      if (stopped) return;
      setText('#status', `unknown (${err.message})`);
      if (err.status === 404) return;
    }
    timer = setTimeout(poll, POLL_MS);
  }

  function render(status) {
    setText('#n-title', status.message?.title || status.message?.body || `Notification ${status.id}`);
    setText('#n-topics', status.topics.join(', '));
    setText('#n-when', whenOf(status));
    setText('#status', status.status);
    $('#status').dataset.status = status.status;
    $('#dry-run-flag').hidden = !status.dry_run;
    $('#suspect').hidden = !status.cleanup.suspect_configuration;
    setText('#audience', formatCount(status.audience.total));
    setText('#delivered', `${status.delivered_percent_of_reachable}% of reachable`);
    setText('#t50', formatMs(status.timings.t50_ms));
    setText('#t90', formatMs(status.timings.t90_ms));
    setText('#t99', formatMs(status.timings.t99_ms));
    setText('#verdict', formatVerdict(status.ninety_in_two));
    const device = status.device;
    setText('#device-received', device ? `${device.received_percent}% of ${formatCount(device.reporting)} reporting` : '–');
    setText('#device-opened', device ? `${device.opened_percent}%` : '–');
    setText('#device-t90', formatMs(device?.t90_ms ?? null));
    setText('#device-verdict', formatVerdict(device?.ninety_in_two ?? null));
    renderPlatforms(status);
    const cleanup = status.cleanup;
    let cleanupText = `${formatCount(cleanup.registrations_deleted)} registrations deleted; invalid tokens ${cleanup.invalid_tokens}`;
    if (cleanup.suspect_configuration) cleanupText += ` (suspect configuration: ${cleanup.suspect_segments.join(', ')} kept)`;
    if (cleanup.parked > 0) cleanupText += `; ${cleanup.parked} cleanups parked`;
    setText('#cleanup', cleanupText);
    const failure = $('#failure');
    failure.hidden = !status.failure_reason;
    failure.textContent = status.failure_reason ?? '';
    const template = currentSession()?.trace_url_template;
    const trace = $('#trace-link');
    trace.hidden = !(template && status.trace_id);
    if (!trace.hidden) trace.href = template.replace('{trace_id}', encodeURIComponent(status.trace_id));
    const edit = $('#edit-link');
    edit.hidden = status.status !== 'scheduled';
    edit.href = `#/compose?edit=${status.id}`;
    $('#cancel-button').hidden = FINISHED.includes(status.status);
  }

  // One row per platform the status names (its `delivery` keys, in the
  // API's order): a new channel shows without a change here.
  function renderPlatforms(status) {
    const rows = Object.keys(status.delivery).map((platform) => {
      const d = status.delivery[platform];
      const row = el('tr', '', { 'data-platform': platform });
      row.append(el('th', PLATFORM_LABELS[platform] ?? platform, { scope: 'row' }));
      for (const value of [status.audience[platform], d.sent, d.failed, d.unregistered, d.invalid, d.expired]) {
        row.append(el('td', formatCount(value)));
      }
      return row;
    });
    $('#platforms tbody').replaceChildren(...rows);
  }

  $('#cancel-button').addEventListener('click', async () => {
    const confirmed = await confirmDialog(
      'Cancel this notification? Devices not reached yet will not get it; pushes already accepted stay delivered.',
      'Cancel the notification',
    );
    if (!confirmed) return;
    try {
      await api('POST', `/api/v1/notifications/${id}/cancel`);
      toast('Cancelled.');
      clearTimeout(timer);
      poll();
    } catch (err) {
      toast(`Cancel failed: ${err.message}`);
    }
  });

  poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
    chart?.destroy();
  };
}

/**
 * When it went out: a scheduled notification cancelled before its time
 * never went out at all, so it says so rather than "sent".
 */
function whenOf(status) {
  if (status.status === 'scheduled') return `scheduled for ${formatTime(status.send_at)}`;
  if (status.send_at && !status.fired_at) {
    return `never sent: cancelled before its time (${formatTime(status.send_at)})`;
  }
  return `sent ${formatTime(status.fired_at ?? status.created_at)}`;
}

/** The curves' series: what each plots and how. */
const SERIES = [
  { key: 'accepted', label: 'accepted by Apple/Google', stroke: '#1565c0', fill: 'rgba(21,101,192,0.1)' },
  { key: 'received', label: 'received on phones', stroke: '#2e7d32' },
  { key: 'opened', label: 'opened', stroke: '#ef6c00' },
];

/**
 * The three curves on one x axis: every second any of them has a point at;
 * each cumulative curve keeps its last share until its own last point, and
 * has no value beyond it.
 */
export function alignCurves(curves) {
  const xs = new Set([0]);
  for (const { key } of SERIES) for (const [s] of curves[key] ?? []) xs.add(s);
  const seconds = [...xs].sort((a, b) => a - b);
  const columns = SERIES.map(({ key }) => {
    const points = curves[key] ?? [];
    const last = points.length ? points[points.length - 1][0] : -1;
    let i = 0;
    let share = 0;
    return seconds.map((x) => {
      while (i < points.length && points[i][0] <= x) { share = points[i][1]; i += 1; }
      return x <= last || x === 0 ? share * 100 : null;
    });
  });
  return [seconds, ...columns];
}

/** Draws (or updates) the curves: share in percent against seconds. */
function drawCurve(chart, curves) {
  const box = $('#curve');
  if (!box || typeof uPlot === 'undefined') return chart;
  for (const { key } of SERIES) box.dataset[`${key}Points`] = String((curves[key] ?? []).length);
  box.dataset.points = String((curves.accepted ?? []).length);
  const data = alignCurves(curves);
  if (chart) {
    chart.setData(data);
    return chart;
  }
  const width = Math.max(280, box.clientWidth || 600);
  // eslint-disable-next-line no-undef
  return new uPlot({
    width,
    height: 260,
    scales: { x: { time: false, range: (u, min, max) => [0, Math.max(max, 10)] }, y: { range: [0, 100] } },
    axes: [{ label: 'seconds since send' }, { label: '% of audience', values: (u, ticks) => ticks.map((t) => `${t}%`) }],
    series: [{ label: 's' }, ...SERIES.map(({ label, stroke, fill }) => ({ label, stroke, width: 2, fill, spanGaps: false }))],
    legend: { show: true },
    hooks: { draw: [drawGuides] },
  }, data, box);
}

/** The 90% line and, when in view, the two-minute line. */
function drawGuides(u) {
  const ctx = u.ctx;
  ctx.save();
  ctx.setLineDash([6, 4]);
  ctx.lineWidth = 1;
  ctx.strokeStyle = '#c62828';
  const y = u.valToPos(90, 'y', true);
  ctx.beginPath();
  ctx.moveTo(u.bbox.left, y);
  ctx.lineTo(u.bbox.left + u.bbox.width, y);
  ctx.stroke();
  ctx.fillStyle = '#c62828';
  ctx.font = `${Math.round(12 * devicePixelRatio)}px system-ui, sans-serif`;
  ctx.textAlign = 'right';
  ctx.fillText('90%', u.bbox.left + u.bbox.width - 4, y - 4);
  if (u.scales.x.max >= TWO_MINUTES) {
    const x = u.valToPos(TWO_MINUTES, 'x', true);
    ctx.beginPath();
    ctx.moveTo(x, u.bbox.top);
    ctx.lineTo(x, u.bbox.top + u.bbox.height);
    ctx.stroke();
    ctx.fillText('2 min', x - 4, u.bbox.top + u.bbox.height - 6);
  } else {
    // The two-minute line is off to the right: say so where it would be.
    ctx.fillText('2 min →', u.bbox.left + u.bbox.width - 4, u.bbox.top + u.bbox.height - 6);
  }
  ctx.restore();
}
