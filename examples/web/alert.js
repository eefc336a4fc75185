// The alert a browser shows for a Clarion web push: the one place that
// reads the payload the web dispatcher sends (proto's `web_payload`), so
// the service worker (sw.js) and the check (check.mjs, against
// fixtures/*.json) read it the same way.
//
// Two forms arrive:
// - the default JSON, for this service worker:
//   {title?, body, link?, image?, data?, notification_id}
// - the Declarative Web Push form (`"web": {"declarative": true}` on the
//   send), which Safari 18.4+ shows without any service worker and other
//   browsers hand to it: {web_push: 8030, notification: {title, body?,
//   navigate, image?, tag?, data: {..., notification_id}}}
"use strict";

const DECLARATIVE_WEB_PUSH = 8030;

/** `{title, options}` for `registration.showNotification(title, options)`. */
function alertOf(payload) {
  if (payload && payload.web_push === DECLARATIVE_WEB_PUSH) {
    const n = payload.notification || {};
    const data = withoutEmpty(Object.assign({}, n.data, { link: n.navigate }));
    return {
      title: n.title,
      options: withoutEmpty({ body: n.body, image: n.image, tag: n.tag, data }),
    };
  }
  const data = withoutEmpty(
    Object.assign({}, payload.data, { link: payload.link, notification_id: payload.notification_id }),
  );
  // Without a title the body stands in as the title, as the declarative
  // form does.
  const title = payload.title || payload.body;
  const body = payload.title ? payload.body : undefined;
  return { title, options: withoutEmpty({ body, image: payload.image, data }) };
}

/** `fields` without its undefined members (showNotification's options). */
function withoutEmpty(fields) {
  for (const key of Object.keys(fields)) {
    if (fields[key] === undefined) delete fields[key];
  }
  return fields;
}

if (typeof module !== "undefined") {
  module.exports = { alertOf, DECLARATIVE_WEB_PUSH };
}
