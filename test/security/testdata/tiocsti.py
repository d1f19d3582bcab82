# Runs `tine run` with a fresh pseudo-terminal as its stdin and lets the
# sandboxed command try to type into it with TIOCSTI: what it types would
# be read by whatever host program reads that terminal next (a shell).
#
# argv: tine, "ctty" (the terminal is the controlling terminal of tine's
# session, as in an interactive shell) or "none" (nobody's), then tine run
# flags. Prints "control ..." (root on the host types a byte into the
# terminal and reads it back: the check below can see typed bytes), the
# command's own lines, and "typed ..." with what the host side read after
# the run.
import fcntl, os, pty, select, subprocess, sys, termios, tty

tine, mode, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
inner = r'''
import fcntl, os, termios
print("isatty", os.isatty(0), flush=True)
try:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0); print("sctty ok", flush=True)
except OSError as e:
    print("sctty", e.strerror, flush=True)
n = 0
for c in b"id > /tmp/pwned\n":
    try:
        fcntl.ioctl(0, termios.TIOCSTI, bytes([c])); n += 1
    except OSError as e:
        print("tiocsti", e.strerror, flush=True); break
print("injected", n, flush=True)
'''
master, slave = pty.openpty()
tty.setraw(slave)
fcntl.ioctl(slave, termios.TIOCSTI, b"C")
ready, _, _ = select.select([slave], [], [], 5)
print("control", os.read(slave, 16) if ready else b"", flush=True)


def session():
    os.setsid()
    if mode == "ctty":
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)


p = subprocess.run([tine, "run", "--in-process"] + flags + ["--", "/usr/bin/python3", "-c", inner],
                   stdin=slave, capture_output=True, preexec_fn=session, timeout=60)
sys.stdout.write(p.stdout.decode() + p.stderr.decode())
ready, _, _ = select.select([slave], [], [], 0)  # TIOCSTI queues synchronously
print("typed", os.read(slave, 64) if ready else b"", flush=True)
