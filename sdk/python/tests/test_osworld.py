"""tine.osworld against a real daemon: the VM manager makes an OSWorld
desktop, the provider starts it and gives DesktopEnv its ports, an HTTP
client written from OSWorld's documented interface drives it the way its
PythonController and SetupController do, save_state/revert_to_snapshot
fork the desktop back to the saved files, stop_emulator deletes it."""

from __future__ import annotations

import json
import unittest
import urllib.error
import urllib.parse
import urllib.request
import uuid

from test_desktops import desktop_daemon, png_size

import tine
from tine.osworld import TineProvider, TineVMManager, create_vm_manager_and_provider

PKGS_PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False; {command}"


class Controller:
    """The calls OSWorld's PythonController and SetupController make."""

    def __init__(self, ip: str, port: str) -> None:
        self.base = f"http://{ip}:{port}"

    def post_json(self, path: str, body: dict) -> tuple[int, bytes]:
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def execute_python_command(self, command: str) -> dict:
        code, body = self.post_json("/execute", {"command": ["python", "-c", PKGS_PREFIX.format(command=command)], "shell": False})
        assert code == 200, (code, body)
        return json.loads(body)

    def get_screenshot(self) -> bytes:
        with urllib.request.urlopen(self.base + "/screenshot", timeout=10) as r:
            return r.read()

    def get_terminal_output(self) -> object:
        with urllib.request.urlopen(self.base + "/terminal") as r:
            return json.load(r)["output"]

    def upload(self, path: str, data: bytes) -> bytes:
        boundary = uuid.uuid4().hex
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file_path\"\r\n\r\n{path}\r\n"
                f"--{boundary}\r\nContent-Disposition: form-data; name=\"file_data\"; filename=\"f\"\r\n"
                f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
        req = urllib.request.Request(self.base + "/setup/upload", data=body, method="POST",
                                     headers={"Content-Type": "multipart/form-data; boundary=" + boundary})
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.read()

    def get_file(self, path: str) -> bytes | None:
        req = urllib.request.Request(self.base + "/file", data=urllib.parse.urlencode({"file_path": path}).encode(), method="POST")
        try:
            with urllib.request.urlopen(req) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise


class OSWorldProviderTest(unittest.TestCase):
    def test_provider(self) -> None:
        d = desktop_daemon()
        manager, provider = create_vm_manager_and_provider(socket=d.socket)
        self.assertIsInstance(manager, TineVMManager)
        self.assertIsInstance(provider, TineProvider)
        path = manager.get_vm_path("Ubuntu", None, screen_size=(800, 600))
        try:
            self.assertEqual(manager.list_free_vms(), [path])
            manager.occupy_vm(path, 1234)
            self.assertEqual(manager.list_free_vms(), [])
            provider.start_emulator(path, True, "Ubuntu")
            ip, server, chromium, vnc, vlc = provider.get_ip_address(path).split(":")
            self.assertEqual(ip, "127.0.0.1")
            self.assertTrue(int(server) > 0 and int(chromium) > 0, (server, chromium))
            ctl = Controller(ip, server)
            self.assertIsNone(ctl.get_terminal_output())  # SetupController's liveness probe
            self.assertEqual(png_size(ctl.get_screenshot()), (800, 600))
            res = ctl.execute_python_command("pyautogui.moveTo(40, 50)")
            self.assertEqual((res["status"], res["returncode"]), ("success", 0))
            with urllib.request.urlopen(ctl.base + "/cursor_position") as r:
                self.assertEqual(json.load(r), [40, 50])
            res = ctl.execute_python_command("import platform; print(platform.system())")
            self.assertEqual(res["output"], "Linux\n")

            # OSWorld's VM's session: user, at home.
            res = ctl.execute_python_command("import getpass, os; print(getpass.getuser(), os.path.expanduser('~'))")
            self.assertEqual(res["output"], "user /home/user\n")
            self.assertEqual(ctl.upload("/home/user/saved.txt", b"before"), b"File Uploaded: 6 bytes")
            provider.save_state(path, "init_state")
            ctl.upload("/home/user/later.txt", b"after")
            new = provider.revert_to_snapshot(path, "init_state")
            self.assertNotEqual(new, path)
            with tine.Client(d.socket) as c:
                with self.assertRaises(tine.NotFound):
                    c.desktop(path)
            manager.delete_vm(path)
            manager.add_vm(new)
            path = new
            provider.start_emulator(path, True, "Ubuntu")
            ip, server, *_ = provider.get_ip_address(path).split(":")
            ctl = Controller(ip, server)
            self.assertEqual(ctl.get_file("/home/user/saved.txt"), b"before")
            self.assertIsNone(ctl.get_file("/home/user/later.txt"))
            # The fork keeps the account (its guest finds it in the layers).
            res = ctl.execute_python_command("import getpass; print(getpass.getuser())")
            self.assertEqual(res["output"], "user\n")
            self.assertEqual(ctl.execute_python_command("pyautogui.click(10, 10)")["returncode"], 0)
        finally:
            provider.stop_emulator(path)
        with tine.Client(d.socket) as c:
            with self.assertRaises(tine.NotFound):
                c.desktop(path)


if __name__ == "__main__":
    unittest.main()
