// The console's entry point: finds the session, then shows the view the
// location's hash names — #/compose, #/n/<id> (a notification's progress),
// #/history, #/live (start a Live Activity), #/live/<id> (follow and
// update one) — or the sign-in form.

import { api, currentSession, setSession } from './api.js';
import { $, toast } from './dom.js';
import { showSignIn } from './signin.js';
import { showCompose } from './compose.js';
import { showProgress } from './progress.js';
import { showHistory } from './history.js';
import { showLive, showLiveStart } from './live.js';

const main = $('#main');
// What the view on screen must stop (timers) before the next one shows.
let stopView = () => {};

function parseHash() {
  const [path, query = ''] = location.hash.replace(/^#/, '').split('?');
  return { path: path || '/compose', params: new URLSearchParams(query) };
}

function route() {
  stopView();
  stopView = () => {};
  const signedIn = currentSession() !== null;
  $('#nav').hidden = !signedIn;
  if (!signedIn) {
    showSignIn(main, () => {
      showNav();
      route();
    });
    return;
  }
  const { path, params } = parseHash();
  const progress = path.match(/^\/n\/([0-9a-fA-F-]{36})$/);
  const live = path.match(/^\/live\/([0-9a-fA-F-]{36})$/);
  if (progress) {
    stopView = showProgress(main, progress[1]);
  } else if (live) {
    stopView = showLive(main, live[1]);
  } else if (path === '/live') {
    stopView = showLiveStart(main);
  } else if (path === '/history') {
    stopView = showHistory(main);
  } else {
    stopView = showCompose(main, params.get('edit'));
  }
  main.focus({ preventScroll: true });
}

function showNav() {
  const session = currentSession();
  $('#signed-in-as').textContent = session ? `Signed in as ${session.key_name}` : '';
  $('#nav').hidden = !session;
}

async function start() {
  try {
    setSession(await api('GET', '/console/session'));
  } catch {
    setSession(null);
  }
  showNav();
  route();
}

$('#signout-button').addEventListener('click', async () => {
  try {
    await api('DELETE', '/console/session');
  } catch (err) {
    toast(`Sign-out: ${err.message}`);
  }
  setSession(null);
  showNav();
  route();
});

window.addEventListener('hashchange', route);
window.addEventListener('clarion:signed-out', () => {
  showNav();
  route();
});
start();
