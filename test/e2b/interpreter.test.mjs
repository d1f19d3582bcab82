// The code interpreter (port 49999) through the real `@e2b/code-interpreter`
// SDK: runCode keeping state, streamed output, errors with tracebacks, a
// matplotlib PNG, per-cell envs, and contexts (create, list, restart,
// remove), on tine's code-interpreter sessions. Each test proves first that
// the sandbox is tine's, and that its contexts are tine sessions by asking
// the daemon's own API for them.
import test from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { Sandbox, NotFoundError } from '@e2b/code-interpreter'
import { Sandbox as Sandbox270 } from 'code-interpreter-v270'
import { inTine } from './lib.mjs'

// tineSessions lists the sandbox's sessions from tine's own API (the
// daemon's socket, not the E2B listener).
function tineSessions(id) {
  return new Promise((resolve, reject) => {
    const req = http.get({ socketPath: process.env.TINE_SOCKET, path: `/v1/sandboxes/${id}/sessions` }, (res) => {
      let body = ''
      res.on('data', (c) => (body += c))
      res.on('end', () => {
        if (res.statusCode !== 200) reject(new Error(`sessions of ${id}: ${res.statusCode} ${body}`))
        else resolve(JSON.parse(body).sessions)
      })
    })
    req.on('error', reject)
  })
}

test('runCode keeps state, streams output and counts executions, in a tine session', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    inTine(sbx.sandboxId)
    assert.equal((await sbx.getInfo()).templateId, 'code-interpreter-v1')
    const first = await sbx.runCode('x = 41\nprint("out"); import sys; print("err", file=sys.stderr)')
    // Output comes in the chunks it was written in (print writes the
    // text and the newline apart, which may or may not be read together).
    assert.equal(first.logs.stdout.join(''), 'out\n')
    assert.equal(first.logs.stderr.join(''), 'err\n')
    assert.equal(first.error, undefined)
    const sessions = await tineSessions(sbx.sandboxId)
    assert.equal(sessions.length, 1, 'the default context is one tine session')
    assert.equal(sessions[0].execution_count, 1)

    const seen = []
    const second = await sbx.runCode('for i in range(3): print(i)\nx + 1', {
      onStdout: (m) => seen.push(m.line),
    })
    assert.equal(second.text, '42')
    assert.equal(second.results[0].isMainResult, true)
    assert.equal(second.executionCount, 2)
    assert.equal(seen.join(''), '0\n1\n2\n')
    assert.equal((await tineSessions(sbx.sandboxId))[0].execution_count, 2)
  } finally {
    await sbx.kill()
  }
})

test('errors come back with name, value and traceback; the context survives', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    inTine(sbx.sandboxId)
    let seen
    const ex = await sbx.runCode('y = 1\ndef f():\n    return 1 / 0\nf()', { onError: (e) => (seen = e) })
    assert.equal(ex.error.name, 'ZeroDivisionError')
    assert.equal(ex.error.value, 'division by zero')
    assert.match(ex.error.traceback, /line 3, in f/)
    assert.match(ex.error.traceback, /return 1 \/ 0/)
    assert.equal(seen.name, 'ZeroDivisionError')
    assert.equal((await sbx.runCode('y')).text, '1')
    const syntax = await sbx.runCode('def (:')
    assert.equal(syntax.error.name, 'SyntaxError')
  } finally {
    await sbx.kill()
  }
})

test('a matplotlib figure is a PNG result; envs hold for one cell', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    inTine(sbx.sandboxId)
    const ex = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.show()')
    assert.equal(ex.error, undefined, ex.error && ex.error.traceback)
    const png = ex.results.find((r) => r.png)
    assert.ok(png, `no PNG among ${JSON.stringify(ex.results.map((r) => r.formats()))}`)
    const bytes = Buffer.from(png.png, 'base64')
    assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
    assert.ok(png.formats().includes('png'))

    const withEnv = await sbx.runCode('import os\nos.environ["ONLY_HERE"]', { envs: { ONLY_HERE: 'yes' } })
    assert.equal(withEnv.text, "'yes'")
    const after = await sbx.runCode('import os\nos.environ.get("ONLY_HERE")')
    assert.equal(after.text, undefined, 'the variable outlived its cell')
  } finally {
    await sbx.kill()
  }
})

test('contexts: create with a cwd, list, keep their own state, restart, remove', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    inTine(sbx.sandboxId)
    await sbx.runCode('where = "default"')
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    assert.equal(ctx.language, 'python')
    assert.equal(ctx.cwd, '/tmp')
    const ids = (await tineSessions(sbx.sandboxId)).map((s) => s.id)
    assert.ok(ids.includes(ctx.id), `context ${ctx.id} is not a tine session (${ids})`)

    assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: ctx })).text, "'/tmp'")
    const missing = await sbx.runCode('where', { context: ctx })
    assert.equal(missing.error.name, 'NameError', 'contexts share state')
    assert.equal((await sbx.runCode('where')).text, "'default'")

    const listed = await sbx.listCodeContexts()
    assert.deepEqual(listed.map((c) => c.id).sort(), ids.sort())

    await sbx.runCode('z = 5', { context: ctx })
    await sbx.restartCodeContext(ctx)
    assert.equal((await sbx.runCode('z', { context: ctx })).error.name, 'NameError', 'restart kept state')

    await sbx.removeCodeContext(ctx.id)
    assert.ok(!(await tineSessions(sbx.sandboxId)).some((s) => s.id === ctx.id))
    // A short request timeout: the SDK leaves its request timer running
    // when the request fails, which would hold node's event loop for its
    // default minute.
    const short = { requestTimeoutMs: 5000 }
    await assert.rejects(sbx.runCode('1', { context: ctx, ...short }), NotFoundError)
    await assert.rejects(sbx.createCodeContext({ language: 'r' }), /400/)
    await assert.rejects(sbx.runCode('1', { language: 'r', ...short }), /400/)
  } finally {
    await sbx.kill()
  }
})

test('@e2b/code-interpreter 2.7.0 (the first to honour E2B_SANDBOX_URL) keeps state too', async () => {
  const sbx = await Sandbox270.create({ timeoutMs: 60_000 })
  try {
    inTine(sbx.sandboxId)
    await sbx.runCode('n = 6')
    assert.equal((await sbx.runCode('n * 7')).text, '42')
  } finally {
    await sbx.kill()
  }
})
