// The compose page's preview: roughly how the alert shows on an iOS lock
// screen and in an Android notification, the payload sizes Apple and
// Google would get (computed as the dispatcher builds them, see
// clarion_proto::payload) and warnings where text will be cut.

import { $, el } from './dom.js';

export const APNS_LIMIT = 4096;
export const FCM_LIMIT = 4000;
// What the lock screens show before cutting (characters, a phone in portrait).
const IOS_TITLE_CHARS = 40;
const IOS_BODY_CHARS = 178;
const ANDROID_TITLE_CHARS = 39;
const ANDROID_BODY_CHARS = 90;

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
  if (apns > APNS_LIMIT) found.push(`Too large for Apple: ${apns} of ${APNS_LIMIT} bytes.`);
  if (fcm > FCM_LIMIT) found.push(`Too large for Google: ${fcm} of ${FCM_LIMIT} bytes.`);
  if (title > IOS_TITLE_CHARS) found.push(`The title is cut after about ${IOS_TITLE_CHARS} characters on iPhone (it has ${title}).`);
  if (title > ANDROID_TITLE_CHARS) found.push(`The title is cut after about ${ANDROID_TITLE_CHARS} characters on Android.`);
  if (body > IOS_BODY_CHARS) found.push(`The body shows about ${IOS_BODY_CHARS} characters on an iPhone lock screen (it has ${body}).`);
  if (body > ANDROID_BODY_CHARS) found.push(`Android shows about ${ANDROID_BODY_CHARS} characters until the notification is expanded.`);
  return found;
}

/** Redraws both previews, the warnings and the sizes for `message`. */
export function renderPreview(message) {
  fill($('#preview-ios'), message, IOS_TITLE_CHARS, IOS_BODY_CHARS);
  fill($('#preview-android'), message, ANDROID_TITLE_CHARS, ANDROID_BODY_CHARS);
  $('#size-warnings').replaceChildren(...warnings(message).map((text) => el('li', text)));
  $('#payload-size').textContent =
    `Payload: ${apnsBytes(message)} of ${APNS_LIMIT} bytes for Apple, ${fcmBytes(message)} of ${FCM_LIMIT} for Google.`;
}
