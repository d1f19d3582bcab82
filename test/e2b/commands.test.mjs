// commands and pty through the real `e2b` SDK, served by tine's envd.
import test, { before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError } from 'e2b'
import { inTine, eventually } from './lib.mjs'

let sbx
before(async () => {
  sbx = await Sandbox.create()
  inTine(sbx.sandboxId)
})
after(async () => sbx && (await sbx.kill()))

test('foreground: output, exit code 0, bash -l -c semantics', async () => {
  const r = await sbx.commands.run('echo out; echo err >&2; echo "${0##*/}"')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out\nbash\n')
  assert.equal(r.stderr, 'err\n')
})

test('a non-zero exit throws CommandExitError with the code and output', async () => {
  await assert.rejects(sbx.commands.run('echo partial; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError, String(e))
    assert.equal(e.exitCode, 3)
    assert.equal(e.stdout, 'partial\n')
    return true
  })
})

test('streaming callbacks get the output as it is written', async () => {
  const seen = []
  const r = await sbx.commands.run('for i in 1 2 3; do echo o$i; echo e$i >&2; done', {
    onStdout: (d) => seen.push(['out', d]),
    onStderr: (d) => seen.push(['err', d]),
  })
  assert.equal(seen.filter(([k]) => k === 'out').map(([, d]) => d).join(''), 'o1\no2\no3\n')
  assert.equal(seen.filter(([k]) => k === 'err').map(([, d]) => d).join(''), 'e1\ne2\ne3\n')
  assert.equal(r.stdout, 'o1\no2\no3\n')
})

test('the default working directory is E2B\'s home, kept by pause and fork', async () => {
  assert.equal((await sbx.commands.run('pwd; echo $HOME')).stdout, '/home/user\n/home/user\n')
  await sbx.files.write('relative.txt', 'here')
  assert.equal(await sbx.files.read('/home/user/relative.txt'), 'here')
})

test('envs and cwd', async () => {
  const r = await sbx.commands.run('echo "$A $B"; pwd', { envs: { A: 'x', B: 'y z' }, cwd: '/tmp' })
  assert.equal(r.stdout, 'x y z\n/tmp\n')
})

test('background: list, connect, stdin, kill', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true })
  assert.ok(h.pid > 0)
  const listed = await sbx.commands.list()
  assert.ok(listed.some((p) => p.pid === h.pid && p.args.includes('cat')), JSON.stringify(listed))
  let echoed = ''
  const other = await sbx.commands.connect(h.pid, { onStdout: (d) => (echoed += d) })
  await sbx.commands.sendStdin(h.pid, 'typed in\n')
  await sbx.commands.closeStdin(h.pid)
  const r = await other.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(echoed, 'typed in\n')

  const sleeper = await sbx.commands.run('sleep 600', { background: true })
  assert.equal(await sleeper.kill(), true)
  await assert.rejects(sleeper.wait(), CommandExitError)
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === sleeper.pid))
  assert.equal(await sbx.commands.kill(sleeper.pid), false) // not found any more
})

test('a pty: a real terminal, input, resize', async () => {
  let out = ''
  const dec = new TextDecoder()
  const pty = await sbx.pty.create({ cols: 100, rows: 30, onData: (d) => (out += dec.decode(d)) })
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('tty; stty size\n'))
  // Resize only once the shell answered at the first size.
  await eventually('the first stty size', () => /30 100/.test(out))
  await sbx.pty.resize(pty.pid, { cols: 120, rows: 40 })
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; exit 0\n'))
  await pty.wait()
  assert.match(out, /\/dev\/pts\/\d+/)
  assert.match(out, /30 100/)
  assert.match(out, /40 120/)
})

test('a server in the sandbox is reached through its port (E2b-Sandbox-Port)', async () => {
  await sbx.files.write('/home/user/site/index.html', 'served from the sandbox')
  const server = await sbx.commands.run('python3 -m http.server 8000 --bind 127.0.0.1', { background: true, cwd: '/home/user/site' })
  const get = (port) => fetch(new URL('/index.html', process.env.E2B_SANDBOX_URL), {
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(port) },
  })
  await eventually('the server answers', async () => (await get(8000)).status === 200)
  assert.equal(await (await get(8000)).text(), 'served from the sandbox')
  // Nothing listens on port 8001 in the sandbox: 502.
  assert.equal((await get(8001)).status, 502)
  await server.kill()
})
