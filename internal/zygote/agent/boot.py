# tine's Python zygote agent, its bootstrap: the `-c` program (what the
# zygote's command line shows). It runs the agent, whose source is the
# first message on its control socket (stdin), compiled in a child of its
# own. Every request forked from the zygote
# copies the page tables of the zygote's memory and tears them down again
# when it exits, so the agent's source does not go through it: compiled
# here, the parser's and compiler's memory stays (≈ 1.4 MiB of heap pages
# freed between live ones, which no trim returns), and as an argument the
# interpreter keeps copies of it (≈ 0.8 MiB: argv decoded, the config's
# copies, sys.argv).
import marshal
import os

src = os.read(0, 1 << 20)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.close(r)
        data = memoryview(marshal.dumps(compile(src, "<string>", "exec")))
        while data:
            data = data[os.write(w, data):]
    finally:
        os._exit(0)
os.close(w)
parts = []
while True:
    part = os.read(r, 1 << 20)
    if not part:
        break
    parts.append(part)
os.close(r)
os.waitpid(pid, 0)
code = marshal.loads(b"".join(parts))
del src, r, w, pid, parts, part
exec(code)
