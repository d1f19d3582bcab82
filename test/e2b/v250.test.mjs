// e2b 2.50.0, the last SDK on the v1 create and connect paths
// (POST /sandboxes, POST /sandboxes/{id}/connect).
import test from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b-v250'
import { inTine } from './lib.mjs'

test('e2b 2.50: create, run, connect, kill', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000 })
  inTine(sbx.sandboxId)
  assert.equal((await sbx.commands.run('echo v1')).stdout, 'v1\n')
  const same = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await same.commands.run('echo again')).stdout, 'again\n')
  await sbx.kill()
})
