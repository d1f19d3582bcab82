// Shared by the test programs: they reach tine only through the E2B
// environment variables the harness sets (E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY), and prove that each call reached tine by asking the daemon
// itself, through `tine ps` (TINE_BIN, TINE_SOCKET).
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY', 'TINE_BIN', 'TINE_SOCKET']) {
  assert.ok(process.env[v], `${v} is not set: run these programs through go test ./test/e2b/`)
}

// tineIds lists the ids of the sandboxes tine's daemon runs now.
export function tineIds() {
  const out = execFileSync(process.env.TINE_BIN, ['ps'], { encoding: 'utf8' })
  return out.trim().split('\n').slice(1).map((line) => line.split(/\s+/)[0])
}

// inTine asserts that tine runs a sandbox with this id (an E2B sandbox's
// id is its tine sandbox's until a pause).
export function inTine(id) {
  assert.ok(tineIds().includes(id), `sandbox ${id} is not in tine ps: the call did not reach tine`)
}

export function notInTine(id) {
  assert.ok(!tineIds().includes(id), `sandbox ${id} is still in tine ps`)
}

// eventually polls cond until it holds (the sandbox's own events, not a
// clock, end the wait; the bound only keeps a broken test from hanging).
export async function eventually(what, cond, ms = 30000) {
  const end = Date.now() + ms
  for (;;) {
    if (await cond()) return
    if (Date.now() > end) assert.fail(`never happened: ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}
