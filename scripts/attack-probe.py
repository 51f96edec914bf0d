#!/usr/bin/env python3
"""Probes `turbokv serve` as an attacker would (issue #31), on 127.0.0.1 only.

Starts the server binary on a free port, runs each attack of the issue in
turn while timing a normal request beside it, and prints one line per attack:
the answer the attacker got, the server's RSS (VmRSS, and VmHWM reset before
each attack through /proc/PID/clear_refs), and the seconds a normal request
took during the attack. Ends with SIGTERM while slow clients and a stream are
open and prints the exit time. Every loop is bounded in count and time.

Usage: scripts/attack-probe.py [MODEL] [-- extra serve flags]
  env: TKV_BIN (default ./build/turbokv), TKV_PROBE_ONLY (e.g. "3,5,7,6": only
       those attacks; 1, 2 and 4 left out of a probe of an unprotected server
       because they hang it or take gigabytes)
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from http_flood import send_until_answered

BIN = os.environ.get("TKV_BIN", "./build/turbokv")
MODEL = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "--" else "../shared/models/ref-5m/ref-5m-f32.gguf"
EXTRA = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []


ONLY = [x for x in os.environ.get("TKV_PROBE_ONLY", "").split(",") if x]


def want(k):
    return not ONLY or k in ONLY


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


PORT = free_port()
srv = subprocess.Popen([BIN, "serve", "-m", MODEL, "--port", str(PORT), "-np", "4", "--kv-budget", "64MiB", "-t", "1"] + EXTRA,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def status_kb(field):
    with open(f"/proc/{srv.pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return -1


def reset_peak():
    with open(f"/proc/{srv.pid}/clear_refs", "w") as f:
        f.write("5")


def dial(timeout=30):
    s = socket.create_connection(("127.0.0.1", PORT), timeout=timeout)
    return s


def http(method, path, body=None, timeout=60, headers=None):
    """One request on its own connection; (status, body text) or (-1, error)."""
    try:
        s = dial(timeout)
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        h = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
        for k, v in (headers or {}).items():
            h += f"{k}: {v}\r\n"
        h += f"Content-Length: {len(data)}\r\n\r\n"
        s.sendall(h.encode() + data)
        out = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
        s.close()
        head, _, rest = out.partition(b"\r\n\r\n")
        return int(head.split()[1]), rest.decode(errors="replace")
    except Exception as e:  # noqa: BLE001 - the probe reports whatever happened
        return -1, repr(e)


def normal():
    t0 = time.time()
    st, _ = http("POST", "/v1/completions", {"prompt": "The city", "max_tokens": 4, "temperature": 0}, timeout=60)
    return st, time.time() - t0


def metric(name):
    st, body = http("GET", "/metrics", timeout=10)
    for line in body.splitlines():
        if line.startswith("turbokv_" + name + " "):
            return float(line.split()[1])
    return -1


def flood(head, piece, max_bytes, seconds=30):
    """Sends head then piece until the server answers or closes; (bytes sent, first answer line, seconds)."""
    s = dial()
    t0 = time.time()
    sent = send_until_answered(s, head, piece, max_bytes, seconds)
    try:
        ans = s.recv(4096).split(b"\r\n")[0].decode(errors="replace")
    except OSError as e:
        ans = repr(e)
    s.close()
    return sent, ans, time.time() - t0


def report(name, answer, normal_result, extra=""):
    st, sec = normal_result
    print(f"{name}: attacker got {answer}; RSS {status_kb('VmRSS:') / 1024:.0f} MiB, peak {status_kb('VmHWM:') / 1024:.0f} MiB;"
          f" normal request during it: HTTP {st} in {sec:.2f} s{extra}", flush=True)


def during(attack):
    """Runs attack() in a thread, a normal request 0.3 s in; (attack result, normal result)."""
    res = {}
    t = threading.Thread(target=lambda: res.setdefault("a", attack()))
    t.start()
    time.sleep(0.3)
    n = normal()
    t.join(120)
    return res.get("a"), n


# Wait for the server.
for _ in range(300):
    if http("GET", "/health", timeout=2)[0] == 200:
        break
    time.sleep(0.1)
print(f"turbokv serve pid {srv.pid} on 127.0.0.1:{PORT}; idle RSS {status_kb('VmRSS:') / 1024:.0f} MiB", flush=True)

# 1. max_tokens near INT_MAX, three ways.
if want("1"):
    reset_peak()
    a, n = during(lambda: [http("POST", p, b, timeout=120)[0] for p, b in [
        ("/v1/completions", {"prompt": "a", "max_tokens": 2147483646}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "n_predict": 2147483647}),
        ("/v1/completions", {"prompt": "a", "max_tokens": 2147483647, "stream": True})]])
    report("1 max_tokens 2147483646 (completion, chat n_predict, streamed)", f"HTTP {a}", n)

# 2. 100 MB chunked upload.
if want("2"):
    reset_peak()
    chunk = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"
    a, n = during(lambda: flood(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", chunk, 100 << 20))
    report("2 100 MB chunked body", f"'{a[1]}' after {a[0] / 1048576:.1f} MiB sent, {a[2]:.2f} s", n)

# 3. 1,000,000 headers (12 MB).
if want("3"):
    reset_peak()
    lines = b"X-Header: 1\r\n" * 4096
    a, n = during(lambda: flood(b"GET /v1/models HTTP/1.1\r\n", lines, 12 << 20))
    report("3 1,000,000 headers", f"'{a[1]}' after {a[0] / 1048576:.2f} MiB sent, {a[2]:.2f} s", n)

# 4. A 16 MB prompt, then four 16 MB deeply nested bodies at once.
if want("4"):
    reset_peak()
    big = {"prompt": "the history of the city " * (16_000_000 // 24)}
    t0 = time.time()
    a, n = during(lambda: http("POST", "/v1/completions", big, timeout=120))
    report("4a 16 MB prompt", f"HTTP {a[0]} in {time.time() - t0:.2f} s ({a[1][:90]})", n)
    reset_peak()
    deep = b'{"prompt":' + b"[" * 8_000_000 + b"1" + b"]" * 8_000_000 + b"}"
    ths, out = [], []
    t0 = time.time()
    for _ in range(4):
        ths.append(threading.Thread(target=lambda: out.append(http("POST", "/v1/completions", deep, timeout=120)[0])))
        ths[-1].start()
    time.sleep(0.3)
    n = normal()
    for t in ths:
        t.join(120)
    time.sleep(0.5)
    report("4b four 16 MB nested JSON bodies", f"HTTP {out} in {time.time() - t0:.2f} s", n)

# 5. 90 slow clients, a byte at a time.
if want("5"):
    reset_peak()
    slow = []
    for _ in range(90):
        s = dial()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\n")
        slow.append(s)
    stop = threading.Event()


    def drip():
        t0 = time.time()
        while not stop.is_set() and time.time() - t0 < 60:
            for s in slow:
                try:
                    s.send(b"X")
                except OSError:
                    pass
            time.sleep(0.5)


    dt = threading.Thread(target=drip)
    dt.start()
    time.sleep(1)
    n = normal()
    t0 = time.time()
    closed = 0
    for s in slow:
        s.settimeout(max(0.1, 40 - (time.time() - t0)))
        try:
            while s.recv(4096):
                pass
            closed += 1
        except socket.timeout:
            pass
        except OSError:
            closed += 1
    stop.set()
    dt.join()
    report("5 90 slow clients", f"{closed}/90 closed by the server {time.time() - t0 + 1:.1f} s after connecting", n)
    for s in slow:
        s.close()

# 7. Four non-streamed unbounded requests dropped after 0.5 s.
if want("7"):
    before = metric("tokens_generated_total")
    drop = []
    for _ in range(4):
        s = dial()
        b = json.dumps({"prompt": "Once upon a time", "max_tokens": -1}).encode()
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nContent-Length: {len(b)}\r\n\r\n".encode() + b)
        drop.append(s)
    time.sleep(0.5)
    for s in drop:
        s.close()
    at_drop = metric("tokens_generated_total")
    time.sleep(3)
    after = metric("tokens_generated_total")
    print(f"7 four max_tokens -1 requests dropped after 0.5 s: {at_drop - before:.0f} tokens before the drop, "
          f"{after - at_drop:.0f} in the 3 s after it; running {metric('requests_running'):.0f}, "
          f"kv_blocks_used {metric('kv_blocks_used'):.0f}, cancelled {metric('requests_cancelled_total'):.0f}", flush=True)

# 6. SIGTERM with 5 slow clients and an open stream.
if want("6"):
    slow = []
    for _ in range(5):
        s = dial()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
        slow.append(s)
    st = dial()
    b = json.dumps({"prompt": "Once upon a time", "stream": True}).encode()
    st.sendall(f"POST /v1/completions HTTP/1.1\r\nContent-Length: {len(b)}\r\n\r\n".encode() + b)
    st.recv(4096)
    t0 = time.time()
    srv.send_signal(signal.SIGTERM)
    try:
        rc = srv.wait(60)
    except subprocess.TimeoutExpired:
        srv.kill()
        rc = "killed after 60 s"
    sec = time.time() - t0
    tail = b""
    st.settimeout(2)
    try:
        while True:
            x = st.recv(65536)
            if not x:
                break
            tail += x
    except OSError:
        pass
    print(f"6 SIGTERM with 5 slow clients and a stream: exit {rc} in {sec:.2f} s; the stream ended with "
          f"{'an error event' if b'shutting down' in tail else 'no error event'}"
          f"{' and [DONE]' if b'[DONE]' in tail else ''}", flush=True)
