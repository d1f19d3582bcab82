// files through the real `e2b` SDK: write, read, list, exists, makeDir,
// rename, remove, getInfo, watchDir, and signed upload/download URLs.
import test, { before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, FileType, FilesystemEventType, NotFoundError } from 'e2b'
import { inTine, eventually } from './lib.mjs'

let sbx
before(async () => {
  sbx = await Sandbox.create()
  inTine(sbx.sandboxId)
})
after(async () => sbx && (await sbx.kill()))

test('write then read text and bytes; parents are created', async () => {
  const info = await sbx.files.write('/tmp/a/b/c.txt', 'hello files')
  assert.equal(info.path, '/tmp/a/b/c.txt')
  assert.equal(await sbx.files.read('/tmp/a/b/c.txt'), 'hello files')
  const bytes = new Uint8Array([0, 1, 2, 255])
  await sbx.files.write('/tmp/a/bin', bytes.buffer)
  assert.deepEqual(new Uint8Array(await sbx.files.read('/tmp/a/bin', { format: 'bytes' })), bytes)
  // The file is the sandbox's: a command sees it.
  assert.equal((await sbx.commands.run('cat /tmp/a/b/c.txt')).stdout, 'hello files')
})

test('several files in one write', async () => {
  await sbx.files.write([
    { path: '/tmp/multi/one', data: '1' },
    { path: '/tmp/multi/two', data: '2' },
  ])
  assert.equal((await sbx.commands.run('cat /tmp/multi/one /tmp/multi/two')).stdout, '12')
})

test('list, exists, makeDir, rename, getInfo, remove', async () => {
  assert.equal(await sbx.files.makeDir('/tmp/d'), true)
  assert.equal(await sbx.files.makeDir('/tmp/d'), false) // already there
  await sbx.files.write('/tmp/d/f', 'x')
  const ls = await sbx.files.list('/tmp/d')
  assert.deepEqual(ls.map((e) => [e.name, e.type, e.size]), [['f', FileType.FILE, 1]])
  const info = await sbx.files.getInfo('/tmp/d')
  assert.equal(info.type, FileType.DIR)
  await sbx.files.rename('/tmp/d/f', '/tmp/d/g')
  assert.equal(await sbx.files.exists('/tmp/d/f'), false)
  assert.equal(await sbx.files.exists('/tmp/d/g'), true)
  await sbx.files.remove('/tmp/d')
  assert.equal(await sbx.files.exists('/tmp/d'), false)
  await assert.rejects(sbx.files.read('/tmp/d/g'), NotFoundError)
})

test('watchDir reports creates and writes', async () => {
  await sbx.files.makeDir('/tmp/w')
  const events = []
  const h = await sbx.files.watchDir('/tmp/w', (e) => events.push(e))
  await sbx.files.write('/tmp/w/new.txt', 'x')
  await sbx.commands.run('echo more >> /tmp/w/new.txt; rm /tmp/w/new.txt')
  await eventually('create, write and remove events', () =>
    [FilesystemEventType.CREATE, FilesystemEventType.WRITE, FilesystemEventType.REMOVE].every((t) =>
      events.some((e) => e.type === t && e.name === 'new.txt')))
  await h.stop()
})

test('file metadata (envd 0.6.2) and entries in watch events (0.6.3)', async () => {
  const info = await sbx.files.write('/home/user/meta.txt', 'x', { metadata: { stage: 'raw' } })
  assert.deepEqual(info.metadata, { stage: 'raw' })
  assert.deepEqual((await sbx.files.getInfo('/home/user/meta.txt')).metadata, { stage: 'raw' })
  // Kept as the file's own extended attribute, which the sandbox sees.
  assert.equal((await sbx.commands.run('getfattr --only-values -n user.e2b.stage /home/user/meta.txt 2>/dev/null || python3 -c "import os; print(os.getxattr(\'/home/user/meta.txt\', \'user.e2b.stage\').decode(), end=\'\')"')).stdout, 'raw')

  await sbx.files.makeDir('/home/user/we')
  const events = []
  const h = await sbx.files.watchDir('/home/user/we', (e) => events.push(e), { includeEntry: true })
  await sbx.files.write('/home/user/we/e.txt', 'four')
  await eventually('a write event with its entry', () => events.some((e) => e.name === 'e.txt' && e.entry?.size === 4))
  await h.stop()
})

test('signed URLs work without the SDK headers', async () => {
  const up = await sbx.uploadUrl('/tmp/signed.txt')
  const form = new FormData()
  form.append('file', new Blob(['via a signed url']), 'signed.txt')
  const r = await fetch(up, { method: 'POST', body: form })
  assert.equal(r.status, 200, await r.clone().text())
  const down = await sbx.downloadUrl('/tmp/signed.txt')
  assert.equal(await (await fetch(down)).text(), 'via a signed url')
  // The signature is checked: a changed path is refused.
  const forged = new URL(down)
  forged.searchParams.set('path', '/etc/shadow')
  assert.equal((await fetch(forged)).status, 401)
})
