// tine as an MCP server, through the real @modelcontextprotocol/sdk
// client: over streamable HTTP at /v1/mcp (the E2B key) and over stdio
// (tine mcp).
import test from 'node:test'
import assert from 'node:assert/strict'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { inTine, notInTine } from './lib.mjs'

async function session(client) {
  const { tools } = await client.listTools()
  const names = tools.map((t) => t.name)
  for (const want of ['create_sandbox', 'destroy_sandbox', 'run_command', 'run_code', 'read_file', 'write_file', 'snapshot', 'fork', 'screenshot', 'desktop_action']) {
    assert.ok(names.includes(want), `tool ${want} missing from ${names}`)
  }
  const created = await client.callTool({ name: 'create_sandbox', arguments: {} })
  const id = created.structuredContent.id
  inTine(id)
  try {
    const run = await client.callTool({ name: 'run_command', arguments: { id, command: 'echo from mcp; exit 2' } })
    assert.equal(run.structuredContent.exit_code, 2)
    assert.equal(run.structuredContent.stdout, 'from mcp\n')
    assert.equal(run.isError, true)
    await client.callTool({ name: 'write_file', arguments: { id, path: '/tmp/m/x.txt', content: 'written' } })
    const read = await client.callTool({ name: 'read_file', arguments: { id, path: '/tmp/m/x.txt' } })
    assert.equal(read.content[0].text, 'written')
    const res = await client.readResource({ uri: `tine://sandboxes/${id}/files/tmp/m/x.txt` })
    assert.equal(res.contents[0].text, 'written')
    // Code in a session: state persists between calls, errors carry
    // their traceback.
    const first = await client.callTool({ name: 'run_code', arguments: { id, code: 'n = 20\nprint("hi")' } })
    const sid = first.structuredContent.session_id
    assert.equal(first.structuredContent.stdout, 'hi\n')
    const second = await client.callTool({ name: 'run_code', arguments: { id, session_id: sid, code: 'n + 22' } })
    assert.equal(second.structuredContent.text, '42')
    assert.equal(second.structuredContent.execution_count, 2)
    const bad = await client.callTool({ name: 'run_code', arguments: { id, session_id: sid, code: 'undefined_name' } })
    assert.equal(bad.isError, true)
    assert.match(bad.structuredContent.error, /^NameError/)
    assert.match(bad.content[0].text, /<cell 3>/)
  } finally {
    await client.callTool({ name: 'destroy_sandbox', arguments: { id } })
  }
  notInTine(id)
}

test('MCP over streamable HTTP, behind the key', async () => {
  const url = new URL('/v1/mcp', process.env.E2B_API_URL)
  const denied = new Client({ name: 'tine-test', version: '1' })
  await assert.rejects(denied.connect(new StreamableHTTPClientTransport(url)))
  const client = new Client({ name: 'tine-test', version: '1' })
  await client.connect(new StreamableHTTPClientTransport(url, { requestInit: { headers: { 'X-API-KEY': process.env.E2B_API_KEY } } }))
  try {
    await session(client)
  } finally {
    await client.close()
  }
})

test('MCP over stdio (tine mcp)', async () => {
  const client = new Client({ name: 'tine-test', version: '1' })
  await client.connect(new StdioClientTransport({
    command: process.env.TINE_BIN, args: ['mcp'], env: { TINE_SOCKET: process.env.TINE_SOCKET, PATH: process.env.PATH },
  }))
  // Closed on a failure too: a `tine mcp` left running would keep the
  // test process alive until the harness kills it.
  try {
    await session(client)
  } finally {
    await client.close()
  }
})

// The desktop part needs Xvfb, openbox and xterm; the harness says so.
const desktops = process.env.TINE_TEST_DESKTOPS === '1'

test('MCP: snapshot, fork, and a desktop screenshot and action (streamable HTTP)', async () => {
  const client = new Client({ name: 'tine-test', version: '1' })
  await client.connect(new StreamableHTTPClientTransport(new URL('/v1/mcp', process.env.E2B_API_URL), { requestInit: { headers: { 'X-API-KEY': process.env.E2B_API_KEY } } }))
  const call = async (name, args) => {
    const r = await client.callTool({ name, arguments: args })
    assert.ok(!r.isError, `${name}: ${JSON.stringify(r.content)}`)
    return r
  }
  const id = (await call('create_sandbox', {})).structuredContent.id
  await call('write_file', { id, path: '/home/mcp/state.txt', content: 'golden' })
  const snap = (await call('snapshot', { id, name: 'mcp-golden' })).structuredContent.id
  const forks = (await call('fork', { snapshot_id: snap, count: 2 })).structuredContent.ids
  assert.equal(forks.length, 2)
  for (const f of forks) {
    inTine(f)
    assert.equal((await call('read_file', { id: f, path: '/home/mcp/state.txt' })).content[0].text, 'golden')
    await call('destroy_sandbox', { id: f })
  }
  await call('destroy_sandbox', { id })
  if (!desktops) {
    await client.close()
    return
  }

  const desk = (await call('create_desktop', { width: 640, height: 480, apps: [['xterm']] })).structuredContent.id
  inTine(desk)
  try {
    const shot = await call('screenshot', { id: desk })
    const img = shot.content.find((c) => c.type === 'image')
    assert.equal(img.mimeType, 'image/png')
    assert.deepEqual([...Buffer.from(img.data, 'base64').subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47])
    await call('desktop_action', { id: desk, action: 'click', x: 100, y: 100 })
    await call('desktop_action', { id: desk, action: 'type', text: 'echo hi' })
    const bad = await client.callTool({ name: 'desktop_action', arguments: { id: desk, action: 'dance' } })
    assert.equal(bad.isError, true)
  } finally {
    await call('destroy_sandbox', { id: desk })
  }
  notInTine(desk)
  await client.close()
})
