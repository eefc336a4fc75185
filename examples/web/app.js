// The example's page: registers the service worker, subscribes with the
// VAPID public key (served by serve.py as /config.json) and registers the
// subscription with Clarion: PUT /api/v1/registrations/{id}, platform web,
// id = base64url(SHA-256(endpoint)). serve.py passes that one route on to
// the coordinator with the API key, as a site's own backend would.
"use strict";

const log = (line) => {
  document.getElementById("log").textContent += line + "\n";
};

function base64url(bytes) {
  let text = "";
  for (const byte of new Uint8Array(bytes)) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function fromBase64url(text) {
  const padded = text.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((text.length + 3) % 4);
  return Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
}

/** The registration id: base64url of the endpoint's SHA-256 (43 characters). */
async function registrationId(endpoint) {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(endpoint));
  return base64url(digest);
}

async function subscribe() {
  const topics = document.getElementById("topics").value.split(",").map((t) => t.trim()).filter(Boolean);
  if (!("serviceWorker" in navigator) || !("PushManager" in window)) {
    log("this browser has no service workers or Push API");
    return;
  }
  if ((await Notification.requestPermission()) !== "granted") {
    log("notifications not allowed");
    return;
  }
  const config = await (await fetch("config.json")).json();
  const worker = await navigator.serviceWorker.register("sw.js");
  await navigator.serviceWorker.ready;
  const subscription = await worker.pushManager.subscribe({
    userVisibleOnly: true,
    applicationServerKey: fromBase64url(config.vapidPublicKey),
  });
  const id = await registrationId(subscription.endpoint);
  const response = await fetch(`api/v1/registrations/${id}`, {
    method: "PUT",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ platform: "web", subscription: subscription.toJSON(), topics }),
  });
  log(`PUT /api/v1/registrations/${id}: ${response.status}`);
  log(await response.text());
}

document.getElementById("subscribe").addEventListener("click", () => {
  subscribe().catch((err) => log(`failed: ${err}`));
});
