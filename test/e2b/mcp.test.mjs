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
  for (const want of ['create_sandbox', 'destroy_sandbox', 'run_command', 'read_file', 'write_file', 'snapshot', 'fork', 'screenshot', 'desktop_action']) {
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
  await session(client)
  await client.close()
})

test('MCP over stdio (tine mcp)', async () => {
  const client = new Client({ name: 'tine-test', version: '1' })
  await client.connect(new StdioClientTransport({
    command: process.env.TINE_BIN, args: ['mcp'], env: { TINE_SOCKET: process.env.TINE_SOCKET, PATH: process.env.PATH },
  }))
  await session(client)
  await client.close()
})
