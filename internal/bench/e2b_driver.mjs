// tine bench e2b's driver: the real `e2b` SDK, loaded from the directory
// in E2B_SDK_ENTRY, answering one timed step per line on stdin, so the Go
// side interleaves it with tine's own client. "tti": Sandbox.create, then
// commands.run('true') answered (then kill, untimed). "run": one
// commands.run('true') on a sandbox kept for it. "code": one
// runCode('1 + 1') of @e2b/code-interpreter (E2B_CI_ENTRY) on a sandbox
// kept for it (its default context: a tine session). Each answer is a
// JSON line {ms} or {error}.
import { createInterface } from 'node:readline'
const { Sandbox } = await import(process.env.E2B_SDK_ENTRY)

let kept, keptCI
const steps = {
  async code() {
    const { Sandbox: CISandbox } = await import(process.env.E2B_CI_ENTRY)
    keptCI ??= await CISandbox.create()
    const t0 = performance.now()
    const ex = await keptCI.runCode('1 + 1')
    if (ex.text !== '2') throw new Error(`runCode answered ${JSON.stringify(ex)}`)
    return performance.now() - t0
  },
  async tti() {
    const t0 = performance.now()
    const sbx = await Sandbox.create()
    await sbx.commands.run('true')
    const ms = performance.now() - t0
    await sbx.kill()
    return ms
  },
  async run() {
    kept ??= await Sandbox.create()
    const t0 = performance.now()
    await kept.commands.run('true')
    return performance.now() - t0
  },
}

for await (const line of createInterface({ input: process.stdin })) {
  try {
    process.stdout.write(JSON.stringify({ ms: await steps[line.trim()]() }) + '\n')
  } catch (e) {
    process.stdout.write(JSON.stringify({ error: String(e?.message ?? e) }) + '\n')
  }
}
if (kept) await kept.kill()
if (keptCI) await keptCI.kill()
