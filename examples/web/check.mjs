// Checks that the example reads what the web dispatcher sends: alert.js
// turns each fixture (fixtures/payload.json, fixtures/declarative.json: the
// payloads of fixtures/notification.json, which proto's tests hold equal to
// what the dispatcher encrypts) into the alert a reader should see.
// Run by scripts/check-web-example: `node examples/web/check.mjs`.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { alertOf } = require("./alert.js");
const fixture = (name) => JSON.parse(readFileSync(new URL(`fixtures/${name}`, import.meta.url), "utf8"));
const id = "00000000-0000-0000-0000-000000000000";

assert.deepEqual(alertOf(fixture("payload.json")), {
  title: "Breaking",
  options: {
    body: "It happened",
    image: "https://news.example/1.jpg",
    data: { section: "world", link: "https://news.example/1", notification_id: id },
  },
});

assert.deepEqual(alertOf(fixture("declarative.json")), {
  title: "Breaking",
  options: {
    body: "It happened",
    image: "https://news.example/1.jpg",
    tag: "breaking",
    data: { section: "world", link: "https://news.example/1", notification_id: id },
  },
});

// Without a title the body stands in, in both forms.
assert.deepEqual(alertOf({ body: "Polls closed", notification_id: id }), {
  title: "Polls closed",
  options: { data: { notification_id: id } },
});

console.log("examples/web: the service worker reads both payload forms");
