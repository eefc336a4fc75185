// Compose: topics with suggestions and live subscriber counts, the alert's
// text and delivery options, a preview, then send now or schedule. A send
// to more devices than the coordinator's confirm threshold asks the editor
// to type the audience size or a topic first. #/compose?edit=<id> edits a
// scheduled notification (PUT) instead.

import { api, currentSession } from './api.js';
import { $, confirmDialog, el, formatCount, fromTemplate, localToRfc3339, rfc3339ToLocal } from './dom.js';
import { renderPreview } from './preview.js';

const TOPIC = /^[A-Za-z0-9._~-]+(\/[A-Za-z0-9._~-]+)*$/;
const MAX_TOPICS = 20;
const COUNTS_REFRESH_MS = 15000;

export function showCompose(main, editId) {
  main.replaceChildren(fromTemplate('tpl-compose'));
  const topics = [];
  let estimate = null;
  let suggestTimer = null;
  const refreshTimer = setInterval(() => refreshAudience(), COUNTS_REFRESH_MS);
  const error = $('#compose-error');
  const topicInput = $('#topic-input');

  // Fields the console does not edit (set through the API), carried
  // unchanged when a scheduled notification is edited.
  let carried = {};

  function message() {
    const value = (id) => $(id).value.trim() || null;
    const badge = $('#badge').value.trim();
    const fields = {
      ...carried,
      title: value('#title'),
      body: $('#body').value,
      link: value('#link'),
      image_url: value('#image-url'),
      collapse_key: value('#collapse-key'),
      badge: badge === '' ? null : Number(badge),
      category: value('#category'),
      interruption_level: value('#interruption-level'),
      android_channel_id: value('#android-channel'),
    };
    const sound = $('#sound').value;
    if (sound === 'silent') fields.sound = null;
    else if (sound === 'named') fields.sound = value('#sound-name');
    return fields;
  }

  function renderChips() {
    const counts = new Map((estimate?.topics ?? []).map((t) => [t.topic, t.subscribers]));
    $('#topic-list').replaceChildren(...topics.map((topic) => {
      const item = el('li', '', { 'data-topic': topic });
      item.append(el('span', topic, { class: 'topic-name' }));
      item.append(el('span', counts.has(topic) ? formatCount(counts.get(topic)) : '…', { class: 'topic-count' }));
      const remove = el('button', '×', { type: 'button', 'aria-label': `Remove topic ${topic}` });
      remove.addEventListener('click', () => {
        topics.splice(topics.indexOf(topic), 1);
        renderChips();
        refreshAudience();
      });
      item.append(remove);
      return item;
    }));
  }

  async function refreshAudience() {
    const text = $('#audience-estimate');
    if (!text) return;
    if (topics.length === 0) {
      estimate = null;
      text.textContent = 'No topic chosen yet.';
      return;
    }
    try {
      const asked = topics.join(',');
      const answer = await api('GET', `/api/v1/audience?topics=${encodeURIComponent(asked)}`);
      // The topics changed meanwhile, or the editor left the page.
      if (asked !== topics.join(',') || !text.isConnected) return;
      estimate = answer;
      const devices = `${answer.exact ? '' : 'about '}${formatCount(answer.devices)} devices`;
      text.textContent = topics.length > 1
        ? `Audience: ${devices} (${formatCount(answer.subscriptions)} subscriptions; a device following several of these topics gets one alert).`
        : `Audience: ${devices}.`;
      text.dataset.devices = String(answer.devices);
      renderChips();
    } catch (err) {
      text.textContent = `Audience unknown: ${err.message}`;
    }
  }

  function addTopic() {
    const topic = topicInput.value.trim();
    error.textContent = '';
    if (!topic) return;
    if (!TOPIC.test(topic)) {
      error.textContent = `“${topic}” is not a topic name: letters, digits, - _ . ~ and / between parts.`;
      return;
    }
    if (topics.length >= MAX_TOPICS) {
      error.textContent = `A notification goes to at most ${MAX_TOPICS} topics.`;
      return;
    }
    if (!topics.includes(topic)) topics.push(topic);
    topicInput.value = '';
    renderChips();
    refreshAudience();
  }

  async function suggest() {
    const text = topicInput.value.trim();
    try {
      const answer = await api('GET', `/api/v1/topics?q=${encodeURIComponent(text)}&limit=20`);
      $('#topic-suggestions').replaceChildren(...answer.topics.map((topic) => el('option', '', { value: topic })));
    } catch {
      // Suggestions are a help, not a need.
    }
  }

  function updateButton() {
    const scheduled = $('#send-at').value !== '';
    $('#send-button').textContent = editId ? 'Save the scheduled notification' : scheduled ? 'Schedule' : 'Send now';
  }

  async function submit(event) {
    event.preventDefault();
    error.textContent = '';
    const content = message();
    const sendAt = localToRfc3339($('#send-at').value);
    if (topics.length === 0) {
      error.textContent = 'Choose at least one topic.';
      return;
    }
    if (!content.body.trim()) {
      error.textContent = 'Write the body of the alert.';
      return;
    }
    if (editId && !sendAt) {
      error.textContent = 'A scheduled notification needs its time; to send it now, cancel it and send a new one.';
      return;
    }
    const body = {
      topics: [...topics],
      ...Object.fromEntries(Object.entries(content).filter(([k, v]) => v !== null || k === 'sound')),
      priority: $('#priority').value,
      lane: $('#lane').value,
      ttl_seconds: Number($('#ttl').value || 3600),
      dry_run: $('#dry-run').checked,
    };
    if (sendAt) body.send_at = sendAt;
    const devices = estimate?.devices ?? 0;
    const threshold = currentSession()?.confirm_above ?? 100000;
    if (!body.dry_run && devices > threshold) {
      const confirmed = await confirmDialog(
        `This alert goes to ${estimate.exact ? '' : 'about '}${formatCount(devices)} devices.`,
        sendAt ? 'Schedule' : 'Send',
        { label: `Type the audience size (${devices}) or a topic name to confirm`, accepted: [String(devices), ...topics] },
      );
      if (!confirmed) return;
    }
    const button = $('#send-button');
    button.disabled = true;
    try {
      const answer = editId
        ? await api('PUT', `/api/v1/notifications/${editId}`, body)
        : await api('POST', '/api/v1/notifications', body);
      location.hash = `#/n/${answer.id ?? editId}`;
    } catch (err) {
      error.textContent = err.message;
      button.disabled = false;
    }
  }

  async function loadForEdit() {
    $('#compose-heading').textContent = 'Edit a scheduled notification';
    try {
      const status = await api('GET', `/api/v1/notifications/${editId}`);
      if (status.status !== 'scheduled') {
        error.textContent = `This notification is ${status.status}; only a scheduled one can be edited.`;
        $('#send-button').disabled = true;
      }
      const m = status.message ?? {};
      topics.push(...status.topics);
      $('#title').value = m.title ?? '';
      $('#body').value = m.body ?? '';
      $('#link').value = m.link ?? '';
      $('#image-url').value = m.image_url ?? '';
      $('#collapse-key').value = m.collapse_key ?? '';
      $('#badge').value = m.badge ?? '';
      $('#category').value = m.category ?? '';
      $('#interruption-level').value = m.interruption_level === 'active' ? '' : (m.interruption_level ?? '');
      $('#android-channel').value = m.android_channel_id ?? '';
      const named = typeof m.sound === 'string';
      $('#sound').value = !('sound' in m) ? 'default' : named ? 'named' : 'silent';
      $('#sound-name').value = named ? m.sound : '';
      $('#sound-name').disabled = !named;
      for (const field of ['push_type', 'relevance_score', 'localizations']) {
        if (m[field] !== null && m[field] !== undefined) carried[field] = m[field];
      }
      $('#priority').value = m.priority ?? 'high';
      $('#ttl').value = m.ttl_seconds ?? 3600;
      $('#lane').value = status.lane;
      // The console sends to the default app; an edit keeps the app the
      // notification was sent to.
      if (status.app && status.app !== 'default') carried.app = status.app;
      $('#dry-run').checked = status.dry_run;
      $('#send-at').value = rfc3339ToLocal(status.send_at);
      renderChips();
      refreshAudience();
      renderPreview(message());
      updateButton();
    } catch (err) {
      error.textContent = err.message;
    }
  }

  topicInput.addEventListener('keydown', (event) => {
    if (event.key === 'Enter') {
      event.preventDefault();
      addTopic();
    }
  });
  topicInput.addEventListener('input', () => {
    clearTimeout(suggestTimer);
    suggestTimer = setTimeout(suggest, 250);
  });
  $('#topic-add').addEventListener('click', addTopic);
  $('#compose-form').addEventListener('input', () => renderPreview(message()));
  $('#send-at').addEventListener('input', updateButton);
  $('#sound').addEventListener('change', () => {
    $('#sound-name').disabled = $('#sound').value !== 'named';
  });
  $('#compose-form').addEventListener('submit', submit);
  renderPreview(message());
  updateButton();
  suggest();
  if (editId) loadForEdit();

  return () => {
    clearInterval(refreshTimer);
    clearTimeout(suggestTimer);
  };
}
