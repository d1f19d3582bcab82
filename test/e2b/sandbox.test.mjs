// The control plane through the real `e2b` SDK: create, info, list and
// its pages, timeout and expiry, kill, pause and resume, fork, snapshots,
// metrics, and the errors the SDK reads from the body's code.
import test from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, NotFoundError, SandboxNotFoundError } from 'e2b'
import { inTine, notInTine, tineIds, eventually } from './lib.mjs'

test('create reaches tine, getInfo and isRunning describe it, kill removes it', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'sandbox' }, envs: { GREETING: 'hi' } })
  inTine(sbx.sandboxId)
  assert.match(sbx.sandboxId, /^[a-z0-9]+$/)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, 'base')
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, { suite: 'sandbox' })
  assert.ok(info.endAt > info.startedAt)
  assert.equal((await sbx.commands.run('echo $GREETING')).stdout, 'hi\n')
  assert.equal(await sbx.isRunning(), true)
  await sbx.kill()
  notInTine(sbx.sandboxId)
  assert.equal(await sbx.isRunning(), false)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false) // the body's code 404
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
  await assert.rejects(Sandbox.connect(sbx.sandboxId), NotFoundError)
})

test('an unknown template is a clear error', async () => {
  await assert.rejects(Sandbox.create('no-such-template'), /template "no-such-template" not found/)
})

test('list filters by metadata and pages with X-Next-Token', async () => {
  const tag = `t${Date.now()}`
  const a = await Sandbox.create({ metadata: { tag } })
  const b = await Sandbox.create({ metadata: { tag } })
  try {
    inTine(a.sandboxId)
    inTine(b.sandboxId)
    const pager = Sandbox.list({ query: { metadata: { tag } }, limit: 1 })
    const seen = []
    while (pager.hasNext) seen.push(...(await pager.nextItems()).map((s) => s.sandboxId))
    assert.deepEqual(seen.sort(), [a.sandboxId, b.sandboxId].sort())
  } finally {
    await a.kill()
    await b.kill()
  }
})

test('setTimeout moves the end; an expired sandbox is killed', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 300_000 })
  inTine(sbx.sandboxId)
  const before = (await sbx.getInfo()).endAt
  await sbx.setTimeout(1000)
  const after = (await sbx.getInfo()).endAt
  assert.ok(after < before, `endAt ${after.toISOString()} not earlier than ${before.toISOString()}`)
  await eventually('the sandbox expires', () => !tineIds().includes(sbx.sandboxId))
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
})

test('pause keeps the files, connect resumes under the same id', async () => {
  const sbx = await Sandbox.create()
  inTine(sbx.sandboxId)
  await sbx.files.write('/home/user/kept.txt', 'before pause', { metadata: { kept: 'yes' } })
  assert.equal(await sbx.pause(), true)
  notInTine(sbx.sandboxId) // no processes, no budget while paused
  assert.equal((await sbx.getInfo()).state, 'paused')
  assert.equal(await Sandbox.pause(sbx.sandboxId), false) // 409: already paused
  const before = new Set(tineIds())
  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal(again.sandboxId, sbx.sandboxId)
  assert.equal(tineIds().filter((id) => !before.has(id)).length, 1, 'resume made one new tine sandbox')
  assert.equal((await again.getInfo()).state, 'running')
  assert.equal(await again.files.read('/home/user/kept.txt'), 'before pause')
  assert.deepEqual((await again.files.getInfo('/home/user/kept.txt')).metadata, { kept: 'yes' })
  await again.kill()
})

test('fork copies the files into new sandboxes; the source runs on', async () => {
  const sbx = await Sandbox.create()
  try {
    await sbx.files.write('/home/user/lineage.txt', 'from the source')
    const forks = await sbx.fork({ count: 2 })
    assert.equal(forks.length, 2)
    for (const f of forks) {
      assert.ok(f instanceof Sandbox, String(f))
      inTine(f.sandboxId)
      assert.notEqual(f.sandboxId, sbx.sandboxId)
      assert.equal(await f.files.read('/home/user/lineage.txt'), 'from the source')
      await f.files.write('/home/user/lineage.txt', 'changed in a fork')
    }
    assert.equal(await sbx.files.read('/home/user/lineage.txt'), 'from the source')
    for (const f of forks) await f.kill()
  } finally {
    await sbx.kill()
  }
})

test('a snapshot is a template: create from it, list it, delete it', async () => {
  const sbx = await Sandbox.create()
  await sbx.files.write('/home/user/golden.txt', 'golden')
  const snap = await sbx.createSnapshot({ name: `golden-${Date.now()}` })
  assert.ok(snap.snapshotId)
  const listed = await sbx.listSnapshots().nextItems()
  assert.ok(listed.some((s) => s.snapshotId === snap.snapshotId), JSON.stringify(listed))
  const child = await Sandbox.create(snap.snapshotId)
  inTine(child.sandboxId)
  assert.equal(await child.files.read('/home/user/golden.txt'), 'golden')
  await child.kill()
  await sbx.kill()
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
})

test('metrics come from the cgroup and the sandbox root', async () => {
  const sbx = await Sandbox.create()
  try {
    await sbx.commands.run('head -c 4000000 /dev/zero > /tmp/fill')
    const [m] = await sbx.getMetrics()
    assert.ok(m.memUsed > 0, `memUsed ${m.memUsed}`)
    assert.ok(m.memTotal >= m.memUsed)
    assert.ok(m.cpuCount >= 1)
    assert.ok(m.diskUsed >= 4000000, `diskUsed ${m.diskUsed}`)
    assert.ok(m.diskTotal > m.diskUsed)
  } finally {
    await sbx.kill()
  }
})
