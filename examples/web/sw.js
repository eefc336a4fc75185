// The example's service worker: shows each Clarion web push as an alert
// (alert.js reads the payload) and opens its link when it is clicked.
"use strict";

importScripts("alert.js");

self.addEventListener("push", (event) => {
  if (!event.data) return;
  let payload;
  try {
    payload = event.data.json();
  } catch (err) {
    console.warn("a push that is not JSON", err);
    return;
  }
  const { title, options } = alertOf(payload);
  event.waitUntil(self.registration.showNotification(title, options));
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const link = event.notification.data && event.notification.data.link;
  if (link) event.waitUntil(self.clients.openWindow(link));
});
