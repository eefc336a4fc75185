// Small DOM helpers. Every text a user or the API supplies goes in with
// textContent (never innerHTML), so a title like <img onerror=…> stays text.

/** The first element matching `selector` under `root` (or the document). */
export function $(selector, root = document) {
  return root.querySelector(selector);
}

/** A fresh copy of a <template>'s content. */
export function fromTemplate(id) {
  return document.getElementById(id).content.cloneNode(true);
}

/** An element with `text` as its text content and the given attributes. */
export function el(tag, text = '', attributes = {}) {
  const element = document.createElement(tag);
  if (text !== '') element.textContent = text;
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, value);
  return element;
}

/** Sets an element's text; '—' for null or undefined. */
export function setText(selector, value, root = document) {
  const element = $(selector, root);
  if (element) element.textContent = value ?? '—';
}

export function formatCount(n) {
  return n == null ? '—' : Number(n).toLocaleString('en-GB');
}

export function formatMs(ms) {
  if (ms == null) return '—';
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

export function formatTime(iso) {
  if (!iso) return '—';
  return new Date(iso).toLocaleString('en-GB', { dateStyle: 'medium', timeStyle: 'medium' });
}

export function formatVerdict(value) {
  if (value === true) return 'yes';
  if (value === false) return 'no';
  return 'open';
}

/** A datetime-local value (local time) as RFC 3339, or null when empty. */
export function localToRfc3339(value) {
  if (!value) return null;
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? null : date.toISOString();
}

/** RFC 3339 as a datetime-local value in local time, to the second. */
export function rfc3339ToLocal(iso) {
  if (!iso) return '';
  const date = new Date(iso);
  const pad = (n) => String(n).padStart(2, '0');
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}` +
    `T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

/** Shows a short message in the live region. */
export function toast(message) {
  const element = $('#toast');
  element.textContent = message;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { element.textContent = ''; }, 6000);
}

/**
 * Asks for a confirmation in the console's dialog. With `typed`, the editor
 * must type one of `typed.accepted` (e.g. the audience size or a topic).
 * Resolves to true when confirmed.
 */
export function confirmDialog(message, okLabel, typed = null) {
  const dialog = $('#confirm-dialog');
  const input = $('#confirm-input');
  const ok = $('#confirm-ok');
  $('#confirm-message').textContent = message;
  ok.textContent = okLabel;
  $('#confirm-typing').hidden = !typed;
  input.value = '';
  if (typed) $('#confirm-input-label').textContent = typed.label;
  const matches = () => !typed || typed.accepted.includes(input.value.trim().replace(/[,\s]/g, ''));
  ok.disabled = !matches();
  input.oninput = () => { ok.disabled = !matches(); };
  return new Promise((resolve) => {
    $('#confirm-cancel').onclick = () => dialog.close('cancel');
    dialog.onclose = () => resolve(dialog.returnValue === 'ok' && matches());
    dialog.returnValue = '';
    dialog.showModal();
    (typed ? input : ok).focus();
  });
}
