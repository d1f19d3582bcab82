"""Computer-use actions through the SDK against a real daemon: an
Anthropic tool_use input and an OpenAI computer_call at a scale (the
pointer lands at the mapped point, the answer is the tool result), the
recording, and an OSWorld desktop's published API."""

from __future__ import annotations

import asyncio
import json
import shutil
import unittest
import urllib.request

from test_desktops import desktop_daemon, png_size

import tine
from tine.desktop import recommended_scale


class ComputerUseTest(unittest.TestCase):
    def test_anthropic_and_openai(self) -> None:
        d = desktop_daemon()
        with tine.Client(d.socket) as c:
            desk = c.create_desktop(width=800, height=600, apps=[["xterm"]], ttl_seconds=300)
            try:
                with c.aci(desk.id) as s:
                    self.assertEqual(recommended_scale(1920, 1080), [1366, 768])
                    ans = s.anthropic({"action": "mouse_move", "coordinate": [100, 50]}, scale=[400, 300])
                    self.assertEqual(s.cursor(), (200, 100))
                    self.assertEqual(png_size(ans.screenshot.data), (400, 300))
                    block = ans.anthropic_tool_result("toolu_1")
                    self.assertEqual(block["content"][0]["source"]["media_type"], "image/png")
                    pos = s.anthropic({"action": "cursor_position"}, scale=[400, 300])
                    self.assertIsNone(pos.screenshot)
                    self.assertEqual(pos.anthropic_tool_result("toolu_2")["content"], "X=100,Y=50")
                    ans = s.openai({"type": "click", "button": "left", "x": 30, "y": 40}, scale=[400, 300])
                    self.assertEqual(s.cursor(), (60, 80))
                    item = ans.openai_call_output("call_1")
                    self.assertTrue(item["output"]["image_url"].startswith("data:image/png;base64,"))
                    with self.assertRaises(tine.ACIError) as e:
                        s.openai({"type": "teleport"})
                    self.assertEqual(e.exception.code, "unknown_action")
                    with self.assertRaises(tine.ACIError) as e:
                        s.accessibility()
                    self.assertEqual(e.exception.code, "bad_request")
                    if shutil.which("ffmpeg"):
                        s.record_start(fps=5)
                        s.wait(600)
                        mp4 = s.record_stop()
                        self.assertEqual(mp4[4:8], b"ftyp")
            finally:
                c.delete_desktop(desk.id)

    def test_async_session(self) -> None:
        d = desktop_daemon()

        async def run() -> None:
            async with tine.AsyncClient(d.socket) as c:
                desk = await c.create_desktop(width=800, height=600, ttl_seconds=300)
                try:
                    s = await c.aci(desk.id)
                    ans = await s.openai([{"type": "move", "x": 7, "y": 9}, {"type": "screenshot"}])
                    self.assertEqual(await s.cursor(), (7, 9))
                    self.assertEqual(png_size(ans.screenshot.data), (800, 600))
                    pos = await s.anthropic({"action": "cursor_position"})
                    self.assertEqual(pos.output, "X=7,Y=9")
                    await s.close()
                finally:
                    await c.delete_desktop(desk.id)

        asyncio.run(run())

    def test_osworld_desktop(self) -> None:
        d = desktop_daemon()
        with tine.Client(d.socket) as c:
            desk = c.create_desktop({"width": 800, "height": 600, "osworld": True, "ttl_seconds": 300})
            try:
                self.assertTrue(desk.osworld.startswith("127.0.0.1:"), desk.osworld)
                self.assertTrue(desk.cdp.startswith("127.0.0.1:"), desk.cdp)
                with urllib.request.urlopen("http://%s/platform" % desk.osworld, timeout=30) as r:
                    self.assertEqual(r.read(), b"Linux")
                req = urllib.request.Request("http://%s/screen_size" % desk.osworld, method="POST", data=b"")
                with urllib.request.urlopen(req, timeout=30) as r:
                    self.assertEqual(json.load(r), {"width": 800, "height": 600})
            finally:
                c.delete_desktop(desk.id)


if __name__ == "__main__":
    unittest.main()
