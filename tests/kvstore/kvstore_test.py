#!/usr/bin/env python3
"""`turbokv serve --kv-store`: replicas sharing compressed KV blocks through
Redis (and HAProxy), end to end. Each check starts redis-server (and haproxy,
through scripts/cluster.sh) itself on free 127.0.0.1 ports in a temporary
directory, and stops them. Nothing is timed.

Usage: kvstore_test.py replicas|corrupt|restart|haproxy
Env: TKV_BIN (the turbokv binary), TKV_SHARED_DIR (../shared). A missing
redis-server or haproxy skips the check ("SKIPPED:"), and fails under CI.
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("TKV_BIN", os.path.join(SRC, "build", "turbokv"))
SHARED = os.environ.get("TKV_SHARED_DIR", os.path.join(SRC, "..", "shared"))
MODEL = os.path.join(SHARED, "models", "ref-5m", "ref-5m-f32.gguf")
TEXT = os.path.join(SHARED, "models", "families", "wikitext-2-test-60k-lf.txt")
BLOCK = 32        # tokens per KV block in these checks
DOC_TOKENS = 400  # a long document for ref-5m's 512-token context
PASSWORD = "tkv-test-" + str(random.randrange(1 << 30))


def in_ci():
    v = os.environ.get("CI", "")
    return v not in ("", "0", "false")


def need(binary):
    if shutil.which(binary):
        return
    if in_ci():
        sys.exit(f"FAIL: {binary} is missing (scripts/install-deps.sh installs it)")
    print(f"SKIPPED: {binary} is missing (apt-get install -y {binary})")
    sys.exit(0)


def fail(msg):
    print("FAIL: " + msg, flush=True)
    raise SystemExit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


# ---- a minimal Redis client (RESP), for the test's own reads and corruptions
class Resp:
    def __init__(self, port, password=PASSWORD):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.f = self.s.makefile("rb")
        if password:
            self.cmd("AUTH", password)

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)
        return self.read()

    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if t == b"*":
            return [self.read() for _ in range(int(rest))]
        raise RuntimeError("bad reply %r" % line)

    def close(self):
        self.s.close()


class Redis:
    def __init__(self, tmp, port=None):
        self.port = port or free_port()
        self.dir = os.path.join(tmp, "redis")
        os.makedirs(self.dir, exist_ok=True)
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--requirepass", PASSWORD, "--maxmemory", "256mb",
             "--maxmemory-policy", "allkeys-lru"],
            stdout=open(os.path.join(self.dir, "log"), "ab"), stderr=subprocess.STDOUT)
        STARTED.append(self.proc)
        for _ in range(100):
            try:
                r = Resp(self.port)
                r.cmd("PING")
                r.close()
                return
            except OSError:
                time.sleep(0.05)
        fail("redis-server did not start")

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def url(self):
        return f"redis://:{PASSWORD}@127.0.0.1:{self.port}"

    def client(self):
        return Resp(self.port)


STARTED = []  # every process a check started: killed at the end whatever happened


class Server:
    """turbokv serve on a free port (--port 0, read back from its log)."""

    def __init__(self, tmp, name, store=None, extra=()):
        self.log_path = os.path.join(tmp, name + ".log")
        args = [BIN, "serve", "-m", MODEL, "--port", "0", "-np", "2", "-c", "512", "-b", "64",
                "--block-size", str(BLOCK), "--kv-budget", "24MiB", "-t", "1"] + list(extra)
        if store:
            args += ["--kv-store", store]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(self.log_path, "wb"))
        STARTED.append(self.proc)
        self.port = None
        for _ in range(600):
            if self.proc.poll() is not None:
                if "built without hiredis" in self.log() and not in_ci():
                    print("SKIPPED: turbokv was built without hiredis (libhiredis-dev)")
                    raise SystemExit(0)
                fail(f"{name} exited {self.proc.returncode}: {self.log()}")
            m = re.search(r"^listening on http://127\.0\.0\.1:(\d+)", self.log(), re.M)
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.05)
        check(self.port, f"{name} did not start: {self.log()}")

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                rc = self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                fail("turbokv serve did not stop within 15 s of SIGTERM")
            check(rc == 0, f"turbokv serve exited {rc} after SIGTERM: {self.log()[-2000:]}")

    def metrics(self):
        return metrics(self.url())


def http(url, body=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read().decode()


def metrics(base):
    out = {}
    for line in http(base + "/metrics")[1].splitlines():
        if line and not line.startswith("#"):
            k, v = line.split()
            out[k.replace("turbokv_", "")] = float(v)
    return out


def complete(base, prompt, n=12):
    st, body = http(base + "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0})
    check(st == 200, f"status {st}: {body}")
    j = json.loads(body)
    check(j["choices"][0]["finish_reason"] in ("length", "stop"), body)
    return j["choices"][0]["text"], j["usage"]["prompt_tokens"]


def doc(seed, n=DOC_TOKENS):
    rnd = random.Random(seed)
    return [1] + [rnd.randrange(3, 4096) for _ in range(n - 1)]


def wait_written(server, blocks, what):
    for _ in range(200):
        if server.metrics().get("kv_store_blocks_written_total", 0) >= blocks:
            return
        time.sleep(0.05)
    fail(f"{what}: fewer than {blocks} blocks written: {server.metrics()}")


def policy_file(tmp):
    """A calibrated policy for ref-5m (turbokv calibrate, small)."""
    out = os.path.join(tmp, "ref5m.tkvp")
    r = subprocess.run([BIN, "calibrate", "-m", MODEL, "-f", TEXT, "-c", "64", "--tokens", "256", "--bits", "2.5",
                        "-t", "2", "-o", out], capture_output=True, text=True)
    check(r.returncode == 0, "calibrate failed: " + r.stderr[-2000:])
    return out


FORMATS = {"tq4": ["-ctk", "tq4", "-ctv", "tq4"], "f16": ["-ctk", "f16", "-ctv", "f16"]}


# ---- the checks
def check_replicas(tmp):
    """B answers what A evaluated from the store (>= prompt - one block), with
    a cold server's greedy text, for tq4, f16 and a calibrated policy."""
    redis = Redis(tmp)
    fmts = dict(FORMATS)
    fmts["policy"] = ["--kv-policy", policy_file(tmp)]
    try:
        for name, flags in fmts.items():
            prompt = doc({"tq4": 1, "f16": 2, "policy": 3}[name])
            cold = Server(tmp, "cold-" + name, None, flags)
            a = Server(tmp, "a-" + name, redis.url(), flags)
            b = Server(tmp, "b-" + name, redis.url(), flags)
            want, P = complete(cold.url(), prompt)
            got_a, _ = complete(a.url(), prompt)
            check(got_a == want, f"{name}: A's text {got_a!r} differs from a cold server's {want!r}")
            full = (P - 1) // BLOCK
            wait_written(a, full, name)
            got_b, _ = complete(b.url(), prompt)
            m = b.metrics()
            hit = m["kv_store_hit_tokens_total"]
            print(f"{name}: prompt {P} tokens, B took {hit:.0f} from the store "
                  f"({m['kv_store_bytes_read_total'] / max(hit, 1):.0f} bytes/token read), "
                  f"evaluated {m['prompt_tokens_evaluated_total']:.0f}", flush=True)
            check(hit >= P - BLOCK, f"{name}: B took {hit} tokens from the store, want >= {P - BLOCK}: {m}\n{b.log()}")
            check(m["prompt_tokens_evaluated_total"] <= P - hit, f"{name}: B evaluated the stored tokens again: {m}")
            check(got_b == want, f"{name}: B's text {got_b!r} differs from a cold server's {want!r}")
            check(m["kv_store_invalid_values_total"] == 0, f"{name}: invalid values: {m}")
            health = json.loads(http(b.url() + "/health")[1])
            check(health.get("kv_store") == "connected", f"/health: {health}")
            for s in (cold, a, b):
                s.stop()
            redis.client().cmd("FLUSHALL")
    finally:
        redis.stop()


def check_corrupt(tmp):
    """Values damaged in Redis are ignored (counted); outputs unchanged."""
    redis = Redis(tmp)
    try:
        prompt = doc(7)
        cold = Server(tmp, "cold", None)
        want, P = complete(cold.url(), prompt)
        cold.stop()
        a = Server(tmp, "a", redis.url() + "/0")
        check(complete(a.url(), prompt)[0] == want, "A's text differs from a cold server's")
        wait_written(a, (P - 1) // BLOCK, "A")
        a.stop()
        # Another format's blocks (f16) under another prefix, for the swap.
        o = Server(tmp, "other", redis.url(), ["-ctk", "f16", "-ctv", "f16", "--kv-store-prefix", "other"])
        complete(o.url(), prompt)
        wait_written(o, (P - 1) // BLOCK, "other")
        o.stop()
        r = redis.client()
        keys = sorted(k for k in r.cmd("KEYS", "turbokv:kv:*"))
        other = sorted(k for k in r.cmd("KEYS", "other:kv:*"))
        check(len(keys) >= (P - 1) // BLOCK and other, f"keys: {len(keys)} and {len(other)}")
        orig = {k: r.cmd("GET", k) for k in keys}
        other_vals = [r.cmd("GET", k) for k in other]
        rnd = random.Random(5)

        def flip(v):
            i = rnd.randrange(len(v))
            return v[:i] + bytes([v[i] ^ 0x40]) + v[i + 1:]

        kinds = {
            "flipped byte": lambda k, v: flip(v),
            "flipped header byte": lambda k, v: v[:20] + bytes([v[20] ^ 1]) + v[21:],
            "truncated": lambda k, v: v[: len(v) // 2],
            "another format's block": lambda k, v: other_vals[keys.index(k) % len(other_vals)],
            "another block of this model": lambda k, v: orig[keys[(keys.index(k) + 1) % len(keys)]],
            "garbage": lambda k, v: bytes(rnd.randrange(256) for _ in range(64)),
            "empty": lambda k, v: b"",
        }
        index = {k: int.from_bytes(orig[k][16:20], "little") for k in keys}  # block index (FORMATS.md §4h)
        kinds["flipped byte in block 5 only"] = lambda k, v: flip(v) if index[k] == 5 else v
        for kind, damage in kinds.items():
            for k in keys:
                r.cmd("SET", k, damage(k, orig[k]))
            b = Server(tmp, "b", redis.url(), ["--kv-store-prefix", "turbokv"])
            got, _ = complete(b.url(), prompt)
            m = b.metrics()
            print(f"{kind}: invalid {m['kv_store_invalid_values_total']:.0f}, "
                  f"store tokens {m['kv_store_hit_tokens_total']:.0f}", flush=True)
            check(got == want, f"{kind}: text {got!r} differs from a cold server's {want!r}")
            # Blocks before the first damaged one are used, none after it.
            used = 5 * BLOCK if kind.endswith("block 5 only") else 0
            check(m["kv_store_hit_tokens_total"] == used, f"{kind}: {m['kv_store_hit_tokens_total']} tokens from the "
                  f"store, want {used}: {m}")
            if kind != "empty":
                check(m["kv_store_invalid_values_total"] >= 1, f"{kind}: not counted as invalid: {m}")
            b.stop()
        # Undamaged again: used.
        for k in keys:
            r.cmd("SET", k, orig[k])
        b = Server(tmp, "b", redis.url())
        got, _ = complete(b.url(), prompt)
        check(got == want and b.metrics()["kv_store_hit_tokens_total"] >= P - BLOCK, "the restored values are not used")
        b.stop()
    finally:
        redis.stop()


def check_restart(tmp):
    """Faults: a store unreachable, silent (the lookup deadline), behind a wrong
    password; architectures that cannot be stored refused; Redis killed
    mid-run and restarted: no request fails, hits resume."""
    redis = Redis(tmp)
    try:
        docs = [doc(100 + i) for i in range(6)]
        cold = Server(tmp, "cold", None)
        want = [complete(cold.url(), d)[0] for d in docs]
        cold.stop()
        # A store unreachable from the start: served without it.
        nowhere = Server(tmp, "nowhere", f"redis://:{PASSWORD}@127.0.0.1:{free_port()}")
        check(complete(nowhere.url(), docs[0])[0] == want[0], "the text differs with an unreachable store")
        health = json.loads(http(nowhere.url() + "/health")[1])
        check(health.get("kv_store", "").startswith("disconnected"), f"/health with no store: {health}")
        check(nowhere.metrics()["kv_store_errors_total"] >= 1, "an unreachable store is not counted as errors")
        nowhere.stop()
        # A store that accepts connections and never answers: each lookup
        # ends at its deadline and the prompt is evaluated.
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        mute = Server(tmp, "mute", f"redis://127.0.0.1:{silent.getsockname()[1]}", ["--kv-store-deadline", "300"])
        check(complete(mute.url(), docs[0])[0] == want[0], "the text differs with a store that never answers")
        m = mute.metrics()
        check(m["kv_store_errors_total"] >= 1 and m["kv_store_hit_tokens_total"] == 0, f"a silent store: {m}")
        mute.stop()
        silent.close()
        # A wrong password: the same.
        wrong = Server(tmp, "wrong", f"redis://:not-{PASSWORD}@127.0.0.1:{redis.port}")
        check(complete(wrong.url(), docs[0])[0] == want[0], "the text differs with a wrong password")
        check(wrong.metrics()["kv_store_hit_tokens_total"] == 0, "a wrong password read blocks")
        wrong.stop()
        # Window rings and recurrent state cannot be stored exactly: refused.
        for arch, why in (("gemma3", "sliding-window"), ("qwen35", "recurrent")):
            r = subprocess.run([BIN, "serve", "-m", os.path.join(SHARED, "models", "families", arch + ".gguf"),
                                "--port", "0", "--kv-budget", "16MiB", "-c", "256", "--kv-store", redis.url()],
                               capture_output=True, text=True, timeout=60)
            check(r.returncode != 0 and why in r.stderr and "--kv-store" in r.stderr,
                  f"{arch} with --kv-store: rc {r.returncode}, {r.stderr[-500:]}")
        a = Server(tmp, "a", redis.url())
        b = Server(tmp, "b", redis.url())
        errors, done = [], [0]
        stop = threading.Event()

        def client(i):
            k = i
            while not stop.is_set():
                s = (a, b)[k % 2]
                d = k % 3  # documents 0-2 during the outage
                try:
                    got, _ = complete(s.url(), docs[d] + [5 + k % 7], n=4)
                except Exception as e:  # noqa: BLE001 - any failure counts
                    errors.append(repr(e))
                done[0] += 1
                k += 1

        threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        redis.kill()
        killed_at = done[0]
        time.sleep(2.0)
        health = json.loads(http(a.url() + "/health")[1])
        check(health.get("kv_store", "").startswith("disconnected"), f"/health while Redis is down: {health}")
        down = done[0] - killed_at
        redis.start()
        time.sleep(1.5)
        stop.set()
        for t in threads:
            t.join()
        print(f"requests: {done[0]} ({down} while Redis was down), errors {len(errors)}", flush=True)
        check(not errors, f"requests failed: {errors[:3]}")
        check(down > 0, "no request ran while Redis was down")
        # Hits resume: a new document evaluated on A is taken from the store by B.
        for d in (3, 4):
            check(complete(a.url(), docs[d])[0] == want[d], "A's text differs after the restart")
        wait_written_total = a.metrics()["kv_store_blocks_written_total"]
        check(wait_written_total > 0, "A wrote nothing after the restart")
        time.sleep(0.5)
        before = b.metrics()["kv_store_hit_tokens_total"]
        got = complete(b.url(), docs[3])[0]
        after = b.metrics()
        check(got == want[3], "B's text differs after the restart")
        check(after["kv_store_hit_tokens_total"] - before >= DOC_TOKENS - BLOCK,
              f"no store hits after Redis came back: {after}")
        check(after["kv_store_errors_total"] >= 1, "the outage was not counted as errors")
        health = json.loads(http(b.url() + "/health")[1])
        check(health.get("kv_store") == "connected", f"/health after the restart: {health}")
        for s in (a, b):
            s.stop()
    finally:
        redis.stop()


def check_haproxy(tmp):
    """scripts/cluster.sh 2: 32 clients x 20 requests over 4 shared long
    documents through HAProxy: no errors; hit ratio reported; peak RSS of each
    replica bounded."""
    env = dict(os.environ, TKV_BIN=BIN, TKV_CLUSTER_DIR=tmp)
    info_path = os.path.join(tmp, "cluster.json")
    proc = subprocess.Popen([os.path.join(SRC, "scripts", "cluster.sh"), "2", "-m", MODEL, "-np", "4", "-c", "512",
                             "-b", "64", "--block-size", str(BLOCK), "--kv-budget", "24MiB", "-t", "1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    STARTED.append(proc)  # (stopped with SIGTERM at the end if still running: it stops its children)
    lines = []
    info = None
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("cluster: ready"):
                info = json.load(open(info_path))
                break
        check(info, "cluster.sh did not start: " + "".join(lines[-30:]))
        base = info["url"]
        docs = [doc(200 + i, 440) for i in range(4)]
        errors, texts = [], {}
        lock = threading.Lock()
        # Each document once, one after another: round robin leaves each on
        # one replica, whose blocks the other then reads from the store (32
        # clients at once would otherwise evaluate all four on both).
        for d in docs:
            complete(base, d, n=1)
        for _ in range(200):
            if sum(metrics(r)["kv_store_blocks_written_total"] for r in info["replicas"]) >= 4 * (len(docs[0]) - 1) // BLOCK:
                break
            time.sleep(0.05)

        def client(i):
            rnd = random.Random(i)
            for j in range(20):
                d = rnd.randrange(4)
                q = [3 + (i * 20 + j) % 50]  # a short question after the shared document
                try:
                    got, _ = complete(base, docs[d] + q, n=4)
                    with lock:
                        texts.setdefault((d, q[0]), set()).add(got)
                except Exception as e:  # noqa: BLE001
                    with lock:
                        errors.append(repr(e))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        prompt = local = store = evaluated = 0
        for r in info["replicas"]:
            m = metrics(r)
            prompt += m["prompt_tokens_total"]
            local += m["prefix_cache_hit_tokens_total"]
            store += m["kv_store_hit_tokens_total"]
            evaluated += m["prompt_tokens_evaluated_total"]
        rss = []
        for pid in info["pids"]:
            with open(f"/proc/{pid}/status") as f:
                hwm = re.search(r"VmHWM:\s+(\d+) kB", f.read())
            rss.append(int(hwm.group(1)) // 1024)
        print(f"640 requests, errors {len(errors)}; prompt tokens {prompt:.0f}: local prefix cache {local / prompt:.1%}, "
              f"store {store / prompt:.1%}, evaluated {evaluated / prompt:.1%}; peak RSS per replica {rss} MiB", flush=True)
        check(not errors, f"{len(errors)} requests failed: {errors[:3]}")
        check(all(len(v) == 1 for v in texts.values()), "one prompt got different greedy texts")
        check(store > 0, "no prompt token came from the store")
        check(max(rss) < 400, f"peak RSS {rss} MiB (bound 400)")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                out, _ = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                fail("cluster.sh did not stop within 30 s")
            lines.append(out or "")
    check(proc.returncode == 0, "cluster.sh stop failed: " + "".join(lines[-20:]))


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    checks = {"replicas": check_replicas, "corrupt": check_corrupt, "restart": check_restart, "haproxy": check_haproxy}
    if which not in checks:
        sys.exit(__doc__)
    need("redis-server")
    if which == "haproxy":
        need("haproxy")
    check(os.access(BIN, os.X_OK), f"no {BIN}: build it first")
    if not os.path.exists(MODEL):
        if in_ci():
            fail(f"missing {MODEL}")
        print(f"SKIPPED: missing {MODEL}")
        return
    tmp = tempfile.mkdtemp(prefix="tkv-kvstore-")
    try:
        checks[which](tmp)
        print(f"PASS: {which}")
    finally:
        for p in STARTED:  # a failed check leaves nothing running
            if p.poll() is None:
                p.send_signal(signal.SIGTERM if p.args[0].endswith("cluster.sh") else signal.SIGKILL)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
