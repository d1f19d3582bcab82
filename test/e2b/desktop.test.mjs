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
  } finally {
    await desk.kill()
  }
})
