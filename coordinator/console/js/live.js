// Live Activities: #/live starts one from a template (a football match, an
// election night, live text) with its lock-screen preview; #/live/<id>
// follows it (channels, start pushes accepted, each update and each
// channel's answer), pushes updates (score, result, text), ends and
// deletes it. An update keeps its id until the coordinator took it, so a
// retry after a lost answer is a replay, not a second broadcast.

import { api } from './api.js';
import { $, confirmDialog, el, formatCount, formatTime, fromTemplate, setText, toast } from './dom.js';
import { TEMPLATES, readState, templateOf } from './live_templates.js';

const REFRESH_MS = 2000;
// The attributes and first content state of activities started here (GET
// does not return them), for the preview and the fields; nothing secret.
const ATTRIBUTES_KEY = (id) => `clarion.live.${id}`;

/** Draws the lock-screen preview of `template` with `attributes` and `state`. */
function drawPreview(root, template, attributes, state, alert) {
  const shown = template.preview(attributes ?? {}, state ?? {});
  setText('.la-title', shown.title, root);
  setText('.la-line', shown.line, root);
  setText('.la-caption', shown.caption, root);
  const banner = $('.la-alert', root);
  banner.hidden = !alert?.title;
  if (alert?.title) banner.textContent = `${alert.title} — ${alert.body ?? ''}`;
}

/** A random UUID (v4); crypto.randomUUID needs a secure context, which a
 * console on plain HTTP beyond localhost is not. */
function newUuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function parseObject(text, name) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Error(`${name} is not JSON`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error(`${name} must be a JSON object`);
  return value;
}

export function showLiveStart(main) {
  main.replaceChildren(fromTemplate('tpl-live-start'));
  const select = $('#la-template');
  select.replaceChildren(...Object.entries(TEMPLATES).map(([key, t]) => el('option', t.label, { value: key })));
  const error = $('#la-error');

  function fill() {
    const t = TEMPLATES[select.value];
    $('#la-name').value = t.name;
    $('#la-type').value = t.attributes_type;
    $('#la-topic').value = t.topic;
    $('#la-attributes').value = JSON.stringify(t.attributes, null, 2);
    $('#la-state').value = JSON.stringify(t.content_state, null, 2);
    $('#la-alert-title').value = t.alert?.title ?? '';
    $('#la-alert-body').value = t.alert?.body ?? '';
    refresh();
  }

  function request() {
    const title = $('#la-alert-title').value.trim();
    return {
      name: $('#la-name').value.trim(),
      attributes_type: $('#la-type').value.trim(),
      topics: $('#la-topic').value.split(',').map((t) => t.trim()).filter(Boolean),
      attributes: parseObject($('#la-attributes').value, 'Attributes'),
      content_state: parseObject($('#la-state').value, 'Content state'),
      storage_policy: $('#la-storage').value,
      alert: title ? { title, body: $('#la-alert-body').value.trim() } : undefined,
    };
  }

  function refresh() {
    try {
      const asked = request();
      error.textContent = '';
      drawPreview($('#la-preview'), templateOf(asked.attributes_type), asked.attributes, asked.content_state, asked.alert);
    } catch (err) {
      error.textContent = err.message;
    }
  }

  select.addEventListener('change', fill);
  $('#la-start-form').addEventListener('input', refresh);
  $('#la-start-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    error.textContent = '';
    try {
      const asked = request();
      const created = await api('POST', '/api/v1/live-activities', asked);
      sessionStorage.setItem(ATTRIBUTES_KEY(created.id),
        JSON.stringify({ attributes: asked.attributes, content_state: asked.content_state }));
      location.hash = `#/live/${created.id}`;
    } catch (err) {
      error.textContent = err.message;
    }
  });
  $('#la-open-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const id = $('#la-open-id').value.trim();
    if (/^[0-9a-fA-F-]{36}$/.test(id)) location.hash = `#/live/${id}`;
    else error.textContent = 'An activity id is a UUID';
  });
  fill();
  return () => {};
}

export function showLive(main, id) {
  main.replaceChildren(fromTemplate('tpl-live'));
  const path = `/api/v1/live-activities/${id}`;
  let activity = null;
  let template = TEMPLATES.text;
  let pendingId = null;
  let stopped = false;
  const error = $('#la-error');
  const started = JSON.parse(sessionStorage.getItem(ATTRIBUTES_KEY(id)) ?? 'null');

  function latestState() {
    const last = activity?.updates?.at(-1);
    return last?.payload?.aps?.['content-state'] ?? null;
  }

  function drawFields() {
    const state = latestState() ?? started?.content_state ?? template.content_state;
    $('#la-fields').replaceChildren(...template.fields.flatMap((f) => {
      const input = el('input', '', { id: `la-field-${f.key}`, type: f.type, 'data-key': f.key });
      if (f.type === 'number') input.setAttribute('min', '0');
      input.value = state?.[f.key] ?? '';
      return [el('label', f.label, { for: input.id }), input];
    }));
  }

  function asked() {
    return readState(template, (key) => $(`#la-field-${key}`).value);
  }

  function alertOf() {
    const title = $('#la-alert-title').value.trim();
    return title ? { title, body: $('#la-alert-body').value.trim() } : undefined;
  }

  function preview() {
    if (activity === null) return;
    drawPreview($('#la-preview'), template, started?.attributes ?? template.attributes, asked(), alertOf());
  }

  function render() {
    setText('#la-heading', activity.name);
    setText('#la-status', activity.status);
    setText('#la-meta', `${activity.attributes_type} · ${activity.topics.join(', ')} · started ${formatTime(activity.created_at)}`);
    setText('#la-accepted', formatCount(activity.start.accepted));
    $('#la-channels').replaceChildren(...activity.channels.map((c) =>
      el('li', `${c.environment}: ${c.state}${c.channel_id ? ` (${c.channel_id})` : ''}${c.reason ? ` — ${c.reason}` : ''}`)));
    $('#la-updates tbody').replaceChildren(...activity.updates.slice().reverse().map((u) => {
      const row = el('tr', '', { 'data-update': u.id });
      row.append(el('td', formatTime(u.created_at)), el('td', u.event),
        el('td', JSON.stringify(u.payload?.aps?.['content-state'] ?? {})),
        el('td', u.broadcasts.map((b) => `${b.environment}: ${b.outcome ?? 'pending'}`).join(', ')));
      return row;
    }));
    const open = activity.status === 'live' || activity.status === 'starting';
    for (const button of ['#la-push', '#la-end']) $(button).disabled = !open;
    $('#la-delete').disabled = activity.status === 'deleted';
  }

  async function load() {
    try {
      const first = activity === null;
      activity = await api('GET', path);
      if (first) {
        template = templateOf(activity.attributes_type);
        drawFields();
        preview();
      }
      render();
    } catch (err) {
      error.textContent = err.message;
    }
  }

  async function push(event) {
    error.textContent = '';
    pendingId ??= newUuid();
    try {
      await api('POST', `${path}/updates`, { id: pendingId, event, content_state: asked(), alert: alertOf() });
      pendingId = null;
      toast(event === 'end' ? 'Ended: the final state goes to every phone' : 'Update sent to every phone on the channel');
      await load();
    } catch (err) {
      error.textContent = err.message;
    }
  }

  $('#la-update-form').addEventListener('input', preview);
  $('#la-update-form').addEventListener('submit', (e) => {
    e.preventDefault();
    push('update');
  });
  $('#la-end').addEventListener('click', async () => {
    if (await confirmDialog('End this Live Activity? Phones show the final state; no update can follow.', 'End it')) push('end');
  });
  $('#la-delete').addEventListener('click', async () => {
    if (!(await confirmDialog('Delete this Live Activity and its broadcast channels at Apple?', 'Delete'))) return;
    try {
      await api('DELETE', path);
      await load();
    } catch (err) {
      error.textContent = err.message;
    }
  });
  load();
  const timer = setInterval(() => {
    if (!stopped) load();
  }, REFRESH_MS);
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}
