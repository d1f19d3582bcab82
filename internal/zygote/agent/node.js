// tine's Node worker, embedded in the tine binary. Node cannot fork, so a
// function keeps a few of these pre-started: each is exec'd by a child of
// the sandbox's Python zygote after that child walled itself in (its own
// request cgroup, private /tmp, Landlock, capabilities, seccomp), loads the
// entry once, says it is ready ("R" on fd 3), then serves exactly one
// request: on stdin, "j" (JSON) or "r" (raw bytes) and the payload, to
// EOF; the reply on fd 3: an 8-byte length and JSON. A failed load is "E",
// a length and the error.
"use strict";
const fs = require("fs");
const now = () => Number(process.hrtime.bigint()); // CLOCK_MONOTONIC, ns

// errorOf describes an exception; its stack keeps the user's frames only
// (not this script's, "[eval]", nor Node's own).
function errorOf(e) {
  const err = e instanceof Error ? e : new Error(String(e));
  const lines = (err.stack || String(e)).split("\n");
  const frames = lines.slice(1).filter((l) => !l.includes("[eval]") && !l.includes("node:internal"));
  const m = frames.length ? /:(\d+)(?::\d+)?\)?$/.exec(frames[0]) : null;
  return { type: err.name || "Error", message: err.message, traceback: [lines[0], ...frames].join("\n") + "\n", line: m ? Number(m[1]) : undefined };
}

// send writes tag (if any), the body's length in the host's byte order
// (the daemon reads it so) and the JSON body.
function send(tag, obj) {
  const body = Buffer.from(JSON.stringify(obj));
  const len = Buffer.alloc(8);
  if (require("os").endianness() === "LE") len.writeBigUInt64LE(BigInt(body.length));
  else len.writeBigUInt64BE(BigInt(body.length));
  fs.writeSync(3, Buffer.concat([Buffer.from(tag), len, body]));
}

const cfg = JSON.parse(process.argv[process.argv.length - 1]);
let handler;
try {
  for (const m of cfg.preload || []) require(m);
  const mod = require(cfg.entry);
  handler = mod[cfg.handler];
  if (typeof handler !== "function") {
    throw new TypeError(`${cfg.entry} exports no function "${cfg.handler}" (the spec's handler)`);
  }
} catch (e) {
  send("E", { status: "error", error: errorOf(e) });
  process.exit(1);
}
fs.writeSync(3, "R");

const t = {};
let body;
try {
  body = fs.readFileSync(0);
} catch (e) {
  process.exit(70);
}
if (body.length === 0) process.exit(70); // discarded before any request came
t.isolated = now();
(async () => {
  const rep = { t };
  try {
    const payload = body.subarray(1);
    const event = body[0] === 0x72 /* r */ ? payload : JSON.parse(payload.length ? payload.toString() : "null");
    const result = await handler(event);
    if (Buffer.isBuffer(result) || result instanceof Uint8Array) {
      rep.result_base64 = Buffer.from(result).toString("base64");
    } else {
      rep.result = result === undefined ? null : result;
      JSON.stringify(rep.result);
    }
    rep.status = "ok";
  } catch (e) {
    rep.status = "error";
    rep.error = errorOf(e);
    delete rep.result;
  }
  t.ran = now();
  // stdout/stderr end before the reply (see the Python agent).
  await new Promise((r) => process.stdout.write("", r));
  fs.closeSync(1);
  fs.closeSync(2);
  send("", rep);
  process.exit(0);
})();
