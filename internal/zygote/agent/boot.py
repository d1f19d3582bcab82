# tine's Python zygote bootstrap, the `-c` program: it runs the agent
# (argv[1]) compiled in a child of its own. Compiling the agent's source
# here would leave its parser's and compiler's memory in this process
# (≈ 2 MiB of heap pages freed between live ones, which no trim returns),
# and every request forked from the zygote copies the page tables of that
# memory and tears them down again when it exits.
import marshal
import os
import sys

src = sys.argv.pop(1)
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
