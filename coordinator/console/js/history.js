// History: GET /api/v1/notifications with its filters, newest first, a page
// at a time. Each row opens the notification's progress; a scheduled one
// shows its time and can be edited or cancelled from here.

import { api } from './api.js';
import { $, confirmDialog, el, formatCount, formatMs, formatTime, formatVerdict, fromTemplate, localToRfc3339, toast } from './dom.js';

const PAGE = 50;

export function showHistory(main) {
  main.replaceChildren(fromTemplate('tpl-history'));
  let cursor = null;
  let generation = 0;

  function query() {
    const params = new URLSearchParams({ limit: String(PAGE) });
    const add = (name, value) => { if (value) params.set(name, value); };
    add('q', $('#filter-q').value.trim());
    add('topic', $('#filter-topic').value.trim());
    add('status', $('#filter-status').value);
    add('from', localToRfc3339($('#filter-from').value));
    add('until', localToRfc3339($('#filter-until').value));
    if (cursor) params.set('cursor', cursor);
    return params;
  }

  async function load(fresh) {
    const mine = fresh ? ++generation : generation;
    if (fresh) cursor = null;
    try {
      const page = await api('GET', `/api/v1/notifications?${query()}`);
      if (mine !== generation || !$('#history-table')) return;
      const body = $('#history-table tbody');
      const rows = page.items.map(row);
      if (fresh) body.replaceChildren(...rows); else body.append(...rows);
      cursor = page.next_cursor;
      $('#history-more').hidden = !cursor;
      $('#history-empty').hidden = body.children.length > 0;
    } catch (err) {
      toast(`History: ${err.message}`);
    }
  }

  function row(item) {
    const tr = el('tr', '', { 'data-id': item.id, 'data-status': item.status });
    tr.append(el('td', formatTime(item.created_at)));
    const title = el('td');
    title.append(el('a', item.title || '(no title)', { href: `#/n/${item.id}` }));
    if (item.dry_run) title.append(' ', el('span', 'dry run', { class: 'badge' }));
    tr.append(title);
    tr.append(el('td', item.topics.join(', ')));
    const status = el('td', item.status);
    if (item.status === 'scheduled') status.append(el('div', formatTime(item.send_at), { class: 'send-at muted' }));
    tr.append(status);
    tr.append(el('td', formatCount(item.audience_total)));
    // Of the reachable audience, as the progress page shows it.
    tr.append(el('td', `${item.delivered_percent_of_reachable}%`));
    tr.append(el('td', formatMs(item.t90_ms)));
    tr.append(el('td', formatVerdict(item.ninety_in_two)));
    tr.append(el('td', formatVerdict(item.device_ninety_in_two), { class: 'device-verdict' }));
    tr.append(el('td', item.opened_percent == null ? '–' : `${item.opened_percent}%`, { class: 'open-rate' }));
    const actions = el('td');
    if (item.status === 'scheduled') {
      actions.append(el('a', 'Edit', { href: `#/compose?edit=${item.id}`, class: 'edit-link' }), ' ');
      const cancel = el('button', 'Cancel', { type: 'button', class: 'cancel-button danger', 'aria-label': `Cancel ${item.title || item.id}` });
      cancel.addEventListener('click', () => cancelScheduled(item));
      actions.append(cancel);
    }
    tr.append(actions);
    return tr;
  }

  async function cancelScheduled(item) {
    const confirmed = await confirmDialog(`Cancel the notification scheduled for ${formatTime(item.send_at)}?`, 'Cancel it');
    if (!confirmed) return;
    try {
      await api('POST', `/api/v1/notifications/${item.id}/cancel`);
      toast('Cancelled.');
      load(true);
    } catch (err) {
      toast(`Cancel failed: ${err.message}`);
    }
  }

  $('#history-filters').addEventListener('submit', (event) => {
    event.preventDefault();
    load(true);
  });
  $('#history-more').addEventListener('click', () => load(false));
  load(true);
  return () => { generation += 1; };
}
