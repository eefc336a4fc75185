// The npm `web-push` library (the reference implementation of RFC 8030 /
// 8291 / 8292) driving the mock web push service for `clarion-bench
// webpush`: `count` pushes at most `concurrency` in flight, over keep-alive
// HTTPS connections, stopped early at `deadline_s`. Reads its plan as JSON
// on standard input; writes one JSON line with what it did (the CPU
// figures are this process's, from process.cpuUsage()).
//
// The mock's CA is trusted through NODE_EXTRA_CA_CERTS, set by the bench.

import { createPrivateKey } from "node:crypto";
import { Agent } from "node:https";
import { readFileSync } from "node:fs";
import webpush from "web-push";

const plan = JSON.parse(readFileSync(0, "utf8"));
const jwk = createPrivateKey(readFileSync(plan.vapid_private_key_file, "utf8")).export({ format: "jwk" });
const fromB64 = (s) => Buffer.from(s, "base64url");
const vapidDetails = {
  subject: plan.vapid_subject,
  publicKey: Buffer.concat([Buffer.from([4]), fromB64(jwk.x), fromB64(jwk.y)]).toString("base64url"),
  privateKey: jwk.d,
};
const agent = new Agent({ keepAlive: true, maxSockets: plan.concurrency });
const options = {
  vapidDetails,
  TTL: 3600,
  urgency: "high",
  contentEncoding: "aes128gcm",
  agent,
  timeout: 10000,
};
const payload = JSON.stringify(plan.payload);
const deadline = Date.now() + plan.deadline_s * 1000;

let next = 0;
let accepted = 0;
let failed = 0;
let firstError = null;

async function worker() {
  while (next < plan.count && Date.now() < deadline) {
    const subscription = plan.subscriptions[next % plan.subscriptions.length];
    next += 1;
    try {
      const response = await webpush.sendNotification(subscription, payload, options);
      if (response.statusCode === 201 || response.statusCode === 202) accepted += 1;
      else failed += 1;
    } catch (error) {
      failed += 1;
      if (firstError === null) firstError = String(error.statusCode ?? "") + " " + String(error.body ?? error.message);
    }
  }
}

const cpuBefore = process.cpuUsage();
const started = process.hrtime.bigint();
await Promise.all(Array.from({ length: plan.concurrency }, worker));
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
const cpu = process.cpuUsage(cpuBefore);
agent.destroy();
process.stdout.write(
  JSON.stringify({
    concurrency: plan.concurrency,
    requests: next,
    accepted,
    failed,
    seconds,
    user_s: cpu.user / 1e6,
    system_s: cpu.system / 1e6,
    first_error: firstError,
  }) + "\n",
);
