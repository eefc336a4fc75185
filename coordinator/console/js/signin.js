// Sign-in: the API key is posted once and exchanged for a session cookie;
// it is never written to any browser storage.

import { api, setSession } from './api.js';
import { $, fromTemplate } from './dom.js';

export function showSignIn(main, next) {
  main.replaceChildren(fromTemplate('tpl-signin'));
  const form = $('#signin-form');
  const error = $('#signin-error');
  $('#api-key').focus();
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.textContent = '';
    const key = $('#api-key');
    try {
      setSession(await api('POST', '/console/session', { api_key: key.value }));
      key.value = '';
      next();
    } catch (err) {
      error.textContent = err.message;
      key.select();
    }
  });
}
