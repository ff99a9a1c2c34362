"""Bob's socket holder for the site lab's relay test (stdlib only).

Opens N TCP connections to HOST:PORT and sends nothing on them (with
"speak", a frame's header and its first byte, as if a Hello were on its
way, and no more); each one the other end closes is opened again at once.
Prints "holding N" when all are open, "reopened K" every second, and
exits after SECONDS.
Usage: holder.py HOST PORT N SECONDS [speak]
"""
import selectors
import socket
import sys
import time

host, port, n, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
speak = sys.argv[5:] == ["speak"]
sel = selectors.DefaultSelector()


def open_one():
    s = socket.create_connection((host, port), timeout=5)
    if speak:
        s.sendall(b"\x00\x00\x01\x00{")  # a 256-byte frame begun
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)


for _ in range(n):
    open_one()
print("holding %d" % n, flush=True)
end, reopened, said = time.time() + secs, 0, time.time()
while time.time() < end:
    for key, _ in sel.select(timeout=0.2):
        s = key.fileobj
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if not data:  # closed by the relay (evicted, or its Hello deadline): take the place again
            sel.unregister(s)
            s.close()
            open_one()
            reopened += 1
    if time.time() - said >= 1:
        print("reopened %d" % reopened, flush=True)
        said = time.time()
print("done, reopened %d" % reopened, flush=True)
