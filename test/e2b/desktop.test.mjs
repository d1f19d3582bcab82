// @e2b/desktop, unmodified, on tine's "desktop" template: its create
// starts Xvfb and XFCE through commands.run; screenshot (scrot, then
// files.read), moveMouse and getCursorPosition, leftClick, write and press
// (xdotool), getScreenSize (xrandr). Typing is proven by what a program in
// the sandbox received; the screenshot by its PNG header. Skipped where
// the host lacks the desktop programs (TINE_TEST_E2B_DESKTOP=0; the Go
// harness fails instead when CI promises them).
import test from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/desktop'
import { WebSocket } from 'undici'
import { inTine, eventually } from './lib.mjs'

const skip = process.env.TINE_TEST_E2B_DESKTOP !== '1' && 'the host lacks the desktop programs'

test('desktop: screenshot, mouse, click, write and press on a tine desktop', { skip }, async () => {
  const desk = await Sandbox.create({ timeoutMs: 180_000, resolution: [800, 600] })
  try {
    inTine(desk.sandboxId)
    assert.deepEqual(await desk.getScreenSize(), { width: 800, height: 600 })

    const png = Buffer.from(await desk.screenshot())
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
    assert.equal(png.readUInt32BE(16), 800, 'PNG width')
    assert.equal(png.readUInt32BE(20), 600, 'PNG height')

    await desk.moveMouse(123, 234)
    assert.deepEqual(await desk.getCursorPosition(), { x: 123, y: 234 })

    // A terminal whose shell writes what it reads to a file: the keys the
    // SDK types reach a real program in the sandbox.
    const term = await desk.commands.run(
      "xterm -geometry 60x10+0+0 -e sh -c 'read line; echo \"$line\" > /home/user/typed'",
      { background: true, timeoutMs: 0 },
    )
    await eventually('the terminal is mapped', async () => {
      const r = await desk.commands.run('xdotool search --onlyvisible --class xterm', { timeoutMs: 10_000 }).catch(() => null)
      return r && r.stdout.trim() !== ''
    })
    await desk.leftClick(100, 60)
    await desk.write('hello from e2b', { chunkSize: 5, delayInMs: 10 })
    await desk.press('enter')
    await eventually('the typed line arrives', async () => (await desk.files.exists('/home/user/typed')))
    assert.equal(await desk.files.read('/home/user/typed'), 'hello from e2b\n')
    await term.kill().catch(() => {})

    // The VNC stream: x11vnc and Debian's noVNC (bound at /opt/noVNC),
    // reached on port 6080 through tine's listener; a WebSocket to
    // websockify gets the VNC server's RFB greeting.
    await desk.stream.start()
    const url = new URL(desk.stream.getUrl())
    assert.equal(url.hostname.split('.')[0], `6080-${desk.sandboxId}`)
    const route = { 'E2b-Sandbox-Id': desk.sandboxId, 'E2b-Sandbox-Port': '6080' }
    const page = await fetch(`${process.env.E2B_SANDBOX_URL}/vnc.html`, { headers: route })
    assert.equal(page.status, 200)
    assert.match(await page.text(), /noVNC/)
    const greeting = await new Promise((resolve, reject) => {
      const ws = new WebSocket(`${process.env.E2B_SANDBOX_URL.replace('http', 'ws')}/websockify`, { headers: route, protocols: ['binary'] })
      ws.binaryType = 'arraybuffer'
      ws.onmessage = (m) => { resolve(Buffer.from(m.data).toString()); ws.close() }
      ws.onerror = (e) => reject(new Error(`websocket: ${e.message ?? e.type}`))
    })
    assert.match(greeting, /^RFB 003\.00\d\n/)
    await desk.stream.stop()
  } finally {
    await desk.kill()
  }
})
