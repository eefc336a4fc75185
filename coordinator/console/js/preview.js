// The compose page's preview: roughly how the alert shows on an iOS lock
// screen, in an Android notification and in a desktop browser's
// notification (web push), the payload sizes Apple, Google and the
// browsers' push services would get (computed as the dispatcher builds
// them, see clarion_proto::payload) and warnings where text will be cut.

import { $, el } from './dom.js';

export const APNS_LIMIT = 4096;
export const FCM_LIMIT = 4000;
// A web push, after encryption (clarion_proto WEB_MAX_PAYLOAD_BYTES), and
// what RFC 8291's aes128gcm adds to the JSON (WEB_ENCRYPTION_OVERHEAD).
export const WEB_LIMIT = 4096;
const WEB_ENCRYPTION_OVERHEAD = 16 + 4 + 1 + 65 + 1 + 16;
// A notification id as every push carries it (a hyphenated UUID).
const SAMPLE_ID = '00000000-0000-0000-0000-000000000000';
// What the lock screens show before cutting (characters, a phone in portrait).
const IOS_TITLE_CHARS = 40;
const IOS_BODY_CHARS = 178;
const ANDROID_TITLE_CHARS = 39;
const ANDROID_BODY_CHARS = 90;
// A desktop browser's notification (Chrome and Edge on Windows and macOS).
const WEB_TITLE_CHARS = 50;
const WEB_BODY_CHARS = 120;

const bytes = (value) => new TextEncoder().encode(JSON.stringify(value)).length;

function customKeys(message) {
  const keys = {};
  if (message.link) keys.link = message.link;
  if (message.image_url) keys.image_url = message.image_url;
  return keys;
}

export function apnsBytes(message) {
  const alert = message.title ? { title: message.title, body: message.body } : message.body;
  const aps = { alert, sound: 'default', 'mutable-content': message.image_url ? 1 : 0 };
  if (message.collapse_key) aps['thread-id'] = message.collapse_key;
  return bytes({ ...customKeys(message), aps });
}

export function fcmBytes(message) {
  const notification = {};
  if (message.title) notification.title = message.title;
  notification.body = message.body;
  if (message.image_url) notification.image = message.image_url;
  return bytes({ notification, data: customKeys(message) });
}

/** The encrypted size of the service worker's JSON (proto's web_payload). */
export function webBytes(message) {
  const payload = {};
  if (message.title) payload.title = message.title;
  payload.body = message.body;
  if (message.link) payload.link = message.link;
  if (message.image_url) payload.image = message.image_url;
  if (message.data && Object.keys(message.data).length) payload.data = message.data;
  payload.notification_id = SAMPLE_ID;
  return bytes(payload) + WEB_ENCRYPTION_OVERHEAD;
}

/** The host of `link`, empty while it is missing or not a URL yet. */
function hostOf(link) {
  try {
    return link ? new URL(link).host : '';
  } catch {
    return '';
  }
}

function cut(text, chars) {
  const letters = [...text];
  return letters.length > chars ? `${letters.slice(0, chars - 1).join('')}…` : text;
}

function fill(phone, message, titleChars, bodyChars) {
  $('.p-title', phone).textContent = cut(message.title ?? '', titleChars);
  $('.p-body', phone).textContent = cut(message.body || 'Your alert text shows here.', bodyChars);
}

/** What will not fit, in words; empty when everything does. */
export function warnings(message) {
  const found = [];
  const title = [...(message.title ?? '')].length;
  const body = [...message.body].length;
  const apns = apnsBytes(message);
  const fcm = fcmBytes(message);
  const web = webBytes(message);
  if (apns > APNS_LIMIT) found.push(`Too large for Apple: ${apns} of ${APNS_LIMIT} bytes.`);
  if (fcm > FCM_LIMIT) found.push(`Too large for Google: ${fcm} of ${FCM_LIMIT} bytes.`);
  if (web > WEB_LIMIT) found.push(`Too large for browsers: ${web} of ${WEB_LIMIT} bytes once encrypted.`);
  if (title > IOS_TITLE_CHARS) found.push(`The title is cut after about ${IOS_TITLE_CHARS} characters on iPhone (it has ${title}).`);
  if (title > ANDROID_TITLE_CHARS) found.push(`The title is cut after about ${ANDROID_TITLE_CHARS} characters on Android.`);
  if (body > IOS_BODY_CHARS) found.push(`The body shows about ${IOS_BODY_CHARS} characters on an iPhone lock screen (it has ${body}).`);
  if (body > ANDROID_BODY_CHARS) found.push(`Android shows about ${ANDROID_BODY_CHARS} characters until the notification is expanded.`);
  if (title > WEB_TITLE_CHARS) found.push(`The title is cut after about ${WEB_TITLE_CHARS} characters in a desktop browser.`);
  if (body > WEB_BODY_CHARS) found.push(`A desktop browser shows about ${WEB_BODY_CHARS} characters of the body.`);
  return found;
}

/** Redraws the three previews, the warnings and the sizes for `message`. */
export function renderPreview(message) {
  fill($('#preview-ios'), message, IOS_TITLE_CHARS, IOS_BODY_CHARS);
  fill($('#preview-android'), message, ANDROID_TITLE_CHARS, ANDROID_BODY_CHARS);
  fill($('#preview-web'), message, WEB_TITLE_CHARS, WEB_BODY_CHARS);
  // A browser shows the site the push comes from; a click opens the link.
  $('#preview-web .p-link').textContent = hostOf(message.link);
  $('#size-warnings').replaceChildren(...warnings(message).map((text) => el('li', text)));
  $('#payload-size').textContent =
    `Payload: ${apnsBytes(message)} of ${APNS_LIMIT} bytes for Apple, ${fcmBytes(message)} of ${FCM_LIMIT} for Google, ` +
    `${webBytes(message)} of ${WEB_LIMIT} for browsers.`;
}
