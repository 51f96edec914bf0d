#!/usr/bin/env python3
"""An attacker beside scripts/load-test.sh (TKV_ATTACK=1): until it is
stopped (SIGTERM) or MAX_SECONDS pass, keeps 40 slow clients sending a byte
at a time (replaced when the server closes them at its deadline), uploads
chunked bodies of up to 64 MiB and sends header floods of 20,000 lines, one
after another. 127.0.0.1 only. Prints what it did on exit; exits 1 if any
flood was not refused with a 4xx.
Usage: scripts/attacker.py PORT [MAX_SECONDS]
"""
import signal
import socket
import sys
import time

from http_flood import send_until_answered

PORT = int(sys.argv[1])
MAX_SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 600
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)


def flood(head, piece, max_bytes):
    """True when the server answered 4xx before max_bytes were sent."""
    try:
        s = socket.create_connection(("127.0.0.1", PORT), timeout=10)
    except OSError:
        return False
    send_until_answered(s, head, piece, max_bytes, 10)
    try:
        ok = s.recv(12).startswith(b"HTTP/1.1 4")
    except OSError:
        ok = False
    s.close()
    return ok


slow, floods, refused, replaced = [], 0, 0, 0
chunk = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"
headers = b"X-Flood: 1\r\n" * 2000
t0 = time.time()
while not stop and time.time() - t0 < MAX_SECONDS:
    while len(slow) < 40:
        try:
            s = socket.create_connection(("127.0.0.1", PORT), timeout=5)
        except OSError:
            break
        s.sendall(b"POST /v1/completions HTTP/1.1\r\n")
        s.setblocking(False)
        slow.append(s)
    for s in list(slow):
        try:
            s.send(b"X")
            if s.recv(256) == b"":
                raise OSError
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            slow.remove(s)
            replaced += 1
    refused += flood(b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", chunk, 64 << 20)
    refused += flood(b"GET /v1/models HTTP/1.1\r\n" , headers, 16 << 20)
    floods += 2
    time.sleep(0.2)
for s in slow:
    s.close()
print(f"attacker: {floods} floods, {refused} refused with 4xx; 40 slow clients, {replaced} closed by the server and replaced")
sys.exit(0 if refused == floods else 1)
