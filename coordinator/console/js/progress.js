// A notification's live progress: status, per-platform counts, the
// delivery curve (uPlot) with the 90% and two-minute lines, t50/t90/t99,
// the 90in2 verdict, cleanup, a trace link and Cancel. Polls the status
// and the curve every second (ETags make an unchanged answer a 304).

import { api, currentSession } from './api.js';
import { $, confirmDialog, el, formatCount, formatMs, formatTime, formatVerdict, fromTemplate, setText, toast } from './dom.js';

const POLL_MS = 1000;
const FINISHED = ['complete', 'failed', 'cancelled'];
const TWO_MINUTES = 120;
// How a platform's name reads in the table; any other shows as named.
const PLATFORM_LABELS = { ios: 'iOS', android: 'Android' };

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
      if (FINISHED.includes(status.status)) return; // nothing will change
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

/** Draws (or updates) the curve: share in percent against seconds. */
function drawCurve(chart, curve) {
  const box = $('#curve');
  if (!box || typeof uPlot === 'undefined') return chart;
  const seconds = [0, ...curve.map(([s]) => s)];
  const percent = [0, ...curve.map(([, share]) => share * 100)];
  box.dataset.points = String(curve.length);
  const data = [seconds, percent];
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
    axes: [{ label: 'seconds since send' }, { label: '% accepted', values: (u, ticks) => ticks.map((t) => `${t}%`) }],
    series: [{ label: 's' }, { label: 'accepted', stroke: '#1565c0', width: 2, fill: 'rgba(21,101,192,0.1)' }],
    legend: { show: false },
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
