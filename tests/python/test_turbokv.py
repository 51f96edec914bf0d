"""The turbokv Python module against the CLI on the same data (kv-stats JSON,
decoded rows, greedy generation, perplexity, tokens, codebooks), against
float64 NumPy (attention), and its argument checks. Run by `make test`
(ctest's Python.pytest) with PYTHONPATH at the module just built."""
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import turbokv

BINARY = os.environ.get("TKV_BINARY", "turbokv")
SHARED = os.environ.get("TKV_SHARED_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
SOURCE = os.environ.get("TKV_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(SHARED, "models/ref-5m/ref-5m-f16.gguf")
KEYS = os.path.join(SHARED, "data/kv/qwen3.5-0.8b/layer3_keys.bin")
VALUES = os.path.join(SHARED, "data/kv/qwen3.5-0.8b/layer3_values.bin")
WIKI = os.path.join(SHARED, "data/text/wikitext-2-raw-test.txt")


def need(*paths):
    """Skips naming the missing paths; fails instead under CI or TKV_REQUIRE_SHARED=1
    (as tests/shared_data.h does for the C++ tests)."""
    missing = [p for p in paths if not os.path.exists(p)]
    if not missing:
        return
    ci = os.environ.get("CI", "")
    if (ci and ci not in ("0", "false")) or os.environ.get("TKV_REQUIRE_SHARED") == "1":
        pytest.fail("missing shared data (required): " + ", ".join(missing))
    pytest.skip("missing shared data: " + ", ".join(missing))


def cli(*args, **kw):
    r = subprocess.run([BINARY, *args], capture_output=True, timeout=300, **kw)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


def write_kv_file(path, x):
    """The KV vector file (docs/FORMATS.md): five u32 (magic, layer, heads, tokens, d), f32 [head][token][d]."""
    h, t, d = x.shape
    with open(path, "wb") as f:
        f.write(np.array([0x544B5651, 0, h, t, d], dtype="<u4").tobytes())
        f.write(np.ascontiguousarray(x, dtype="<f4").tobytes())


def read_kv_file(path):
    hdr = np.fromfile(path, dtype="<u4", count=5)
    assert hdr[0] == 0x544B5651
    return np.fromfile(path, dtype="<f4", offset=20).reshape(hdr[2], hdr[3], hdr[4])


@pytest.fixture(scope="module")
def rng():
    seed = int.from_bytes(os.urandom(4), "little")
    print("seed", seed)
    return np.random.default_rng(seed)


@pytest.fixture(scope="module")
def model():
    need(MODEL)
    return turbokv.Model(MODEL, cache="tq4", ctx=256, threads=2)


# ------------------------------------------------------------------ codecs

@pytest.mark.parametrize("fmt", ["tq4", "q8_0", "tq3.5-ip", "q4_0r", "f16"])
def test_decoded_rows_equal_the_cli_roundtrip(tmp_path, rng, fmt):
    x = (rng.standard_normal((2, 37, 72)) * 3).astype(np.float32)
    src, out = tmp_path / "x.bin", tmp_path / "y.bin"
    write_kv_file(src, x)
    cli("kv-stats", "--kv", str(src), "--roundtrip", fmt, "-o", str(out))
    want = read_kv_file(out)
    c = turbokv.Codec(fmt, d=72)
    for h in range(2):
        codes = c.quantize(x[h])
        assert codes.shape == (37, c.row_bytes) and codes.dtype == np.uint8
        assert np.array_equal(c.dequantize(codes), want[h]), f"{fmt} head {h}"


def test_codec_properties_and_determinism(rng):
    c = turbokv.Codec("tq4", d=128)
    assert (c.format, c.d, c.row_bytes) == ("tq4", 128, 66)
    assert c.bits_per_value == pytest.approx(4.125)
    x = rng.standard_normal((10, 128)).astype(np.float32)
    assert np.array_equal(c.quantize(x), turbokv.Codec("tq4", d=128).quantize(x))
    other_seed = turbokv.Codec("tq4", d=128, seed=7).quantize(x)
    assert not np.array_equal(c.quantize(x), other_seed), "the seed picks the rotation"
    assert c.quantize(np.zeros((0, 128), np.float32)).shape == (0, 66)
    # Into a caller's arrays (no new array per call), checked like inputs.
    out = np.zeros((10, 66), np.uint8)
    assert c.quantize(x, out=out) is not None and np.array_equal(out, c.quantize(x))
    back = np.zeros((10, 128), np.float32)
    c.dequantize(out, out=back)
    assert np.array_equal(back, c.dequantize(out))
    with pytest.raises(ValueError, match=r"out must be a C-contiguous uint8\[10, 66\]"):
        c.quantize(x, out=np.zeros((9, 66), np.uint8))
    # Large outputs (on huge pages) hold the same bytes.
    big = rng.standard_normal((70000, 128)).astype(np.float32)
    assert np.array_equal(c.quantize(big)[-3:], c.quantize(big[-3:]))


def test_bad_arrays_raise_errors_that_say_what_was_expected(rng):
    c = turbokv.Codec("tq4", d=128)
    x = rng.standard_normal((8, 128)).astype(np.float32)
    with pytest.raises(TypeError, match=r"float32\[n, 128\].*got float64\[8, 128\]"):
        c.quantize(x.astype(np.float64))
    with pytest.raises(ValueError, match=r"float32\[n, 128\].*got float32\[8, 64\]"):
        c.quantize(x[:, :64].copy())
    with pytest.raises(ValueError, match="non-contiguous"):
        c.quantize(np.asfortranarray(x))
    with pytest.raises(ValueError, match=r"got float32\[1024\]"):
        c.quantize(x.reshape(-1))
    with pytest.raises(TypeError, match="must be a C-contiguous"):
        c.quantize(x.tolist())
    bad = x.copy()
    bad[5, 9] = np.inf
    with pytest.raises(ValueError, match="row 5 element 9"):
        c.quantize(bad)
    with pytest.raises(ValueError, match=r"uint8\[n, 66\]"):
        c.dequantize(np.zeros((3, 65), np.uint8))
    with pytest.raises(ValueError, match="tq9"):
        turbokv.Codec("tq9", d=128)
    with pytest.raises(ValueError, match="bits"):
        turbokv.codebook(128, 9)
    with pytest.raises(OSError, match="/nonexistent/m.gguf"):
        turbokv.Model("/nonexistent/m.gguf")


def test_codebook_equals_the_cli():
    got = json.loads(cli("codebook", "--d", "128", "--min-bits", "3", "--max-bits", "3", "--json", "--centroids"))[0]
    cb = turbokv.codebook(128, 3)
    c = cb["centroids"]
    assert len(c) == 8 and np.all(np.diff(c) > 0) and np.allclose(c, -c[::-1])
    assert np.array_equal(c[4:], np.array(got["positive_centroids"]))
    assert cb["mse_vector"] == pytest.approx(got["mse_per_vector"], rel=1e-12)
    assert len(cb["boundaries"]) == 7


def test_attention_on_codes_equals_float64_on_decoded_rows(rng):
    d, n_kv, hkv, hq, n_q = 64, 41, 2, 4, 3
    kc, vc = turbokv.Codec("tq4", d=d), turbokv.Codec("q8_0", d=d)
    k = rng.standard_normal((n_kv, hkv, d)).astype(np.float32)
    v = rng.standard_normal((n_kv, hkv, d)).astype(np.float32)
    q = rng.standard_normal((n_q, hq, d)).astype(np.float32)
    kb = kc.quantize(k.reshape(-1, d)).reshape(n_kv, hkv, -1)
    vb = vc.quantize(v.reshape(-1, d)).reshape(n_kv, hkv, -1)
    out = turbokv.attention(q, kb, vb, kc, vc, causal_offset=n_kv - n_q, keys="exact")
    kd = kc.dequantize(kb.reshape(-1, kc.row_bytes)).reshape(n_kv, hkv, d).astype(np.float64)
    vd = vc.dequantize(vb.reshape(-1, vc.row_bytes)).reshape(n_kv, hkv, d).astype(np.float64)
    want = np.zeros((n_q, hq, d))
    for i in range(n_q):
        for h in range(hq):
            seen = n_kv - n_q + i + 1
            s = kd[:seen, h // (hq // hkv)] @ q[i, h].astype(np.float64) / np.sqrt(d)
            w = np.exp(s - s.max())
            want[i, h] = (w / w.sum()) @ vd[:seen, h // (hq // hkv)]
    assert np.max(np.abs(out - want)) < 2e-5 * max(1.0, np.max(np.abs(want)))
    # int8 scoring (the default where the CPU has it): its error is a small
    # fraction of the codec's (tests/attention/score_int8_test.cpp bounds it);
    # here, against the exact path, well under the tq4 codec's own error.
    for keys in ("int8", "default"):
        approx = turbokv.attention(q, kb, vb, kc, vc, causal_offset=n_kv - n_q, keys=keys)
        assert np.max(np.abs(approx - want)) < 0.05 * max(1.0, np.max(np.abs(want))), keys
    with pytest.raises(ValueError, match="keys must be"):
        turbokv.attention(q, kb, vb, kc, vc, keys="fast")
    with pytest.raises(ValueError, match="v_codes must be"):
        turbokv.attention(q, kb, vb[:5], kc, vc)


def test_calibrated_codec_codes_rows_centred_on_its_mean(rng):
    d, n = 64, 2000
    scales = np.geomspace(3.0, 0.01, d)
    basis, _ = np.linalg.qr(rng.standard_normal((d, d)))
    x = ((rng.standard_normal((n, d)) * scales) @ basis.T + 5.0).astype(np.float32)
    c = turbokv.calibrate(x, "tqc4")
    assert c.row_bytes == turbokv.Codec("tq4", d=d).row_bytes, "tqc4 has tq4's size"
    assert np.allclose(c.mean, x.astype(np.float64).mean(axis=0), atol=1e-4)
    xc = np.ascontiguousarray(x - c.mean)
    err_cal = np.sum((c.dequantize(c.quantize(xc)) - xc) ** 2)
    tq = turbokv.Codec("tq4", d=d)
    err_tq = np.sum((tq.dequantize(tq.quantize(xc)) - xc) ** 2)
    assert err_cal < 0.5 * err_tq, (err_cal, err_tq)
    with pytest.raises(ValueError, match="not a calibrated format"):
        turbokv.calibrate(x, "tq4")


# ----------------------------------------------------------------- kv-stats

def test_kv_stats_equals_the_cli_json():
    need(KEYS, VALUES)
    formats = "q8_0,q4_0,tq3,tq4-ip"
    keys, values = read_kv_file(KEYS), read_kv_file(VALUES)
    got = turbokv.kv_stats(keys, formats=formats.split(","), source=KEYS)["keys"]
    want = json.loads(cli("kv-stats", "--kv", KEYS, "--formats", formats, "--json"))
    assert got == want
    got_v = turbokv.kv_stats(keys, values, formats=formats, source=VALUES)["values"]
    assert got_v == json.loads(cli("kv-stats", "--kv", VALUES, "--formats", formats, "--json"))
    cal = turbokv.kv_stats(keys, formats="tq3,tqc3", calibrated=True, source=KEYS)["keys"]
    assert cal == json.loads(cli("kv-stats", "--kv", KEYS, "--formats", "tq3,tqc3", "--calibrated", "--json"))
    plain = turbokv.kv_stats(keys[0], formats="tq4", mean_center=False)["keys"]
    assert [r["mean_centered"] for r in plain] == [False] and plain[0]["heads"] == 1


def test_kv_quality_example_prints_a_table(tmp_path, rng):
    k = (rng.standard_normal((2, 80, 64)) + 2.0).astype(np.float16)
    np.save(tmp_path / "k.npy", k)
    np.save(tmp_path / "v.npy", k[:, :, ::-1])
    env = dict(os.environ)
    r = subprocess.run([sys.executable, os.path.join(SOURCE, "examples/kv_quality.py"), str(tmp_path / "k.npy"),
                        str(tmp_path / "v.npy"), "--formats", "q8_0,tq3"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(l.startswith("q8_0") and "8.500" in l for l in lines), r.stdout
    assert sum(l.startswith("tq3 ") for l in lines) == 2, "one row per format in each of the K and V tables"
    np.save(tmp_path / "bad.npy", np.zeros(5))
    r = subprocess.run([sys.executable, os.path.join(SOURCE, "examples/kv_quality.py"), str(tmp_path / "bad.npy")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0 and "expected [heads, tokens, head_dim]" in r.stderr


# ------------------------------------------------------------------- models

def test_greedy_generation_equals_the_cli(model):
    prompt = "Once upon a time"
    text = model.generate(prompt, n=40, temperature=0)
    out = cli("run", "-m", MODEL, "-p", prompt, "-n", "40", "--temp", "0", "-c", "256", "-t", "2",
              "--no-display-prompt").decode()
    assert text + "\n" == out
    assert model.tokens[: len(model.tokenize(prompt))] == model.tokenize(prompt)


def test_tokenize_equals_the_cli(model):
    text = "Hello world, the quick brown fox. 12345 ok!"
    out = cli("tokenize", "-m", MODEL, "-p", text).decode()
    ids = [int(t) for t in out.replace(",", " ").replace("[", " ").replace("]", " ").split() if t.lstrip("-").isdigit()]
    assert model.tokenize(text) == ids
    assert model.detokenize(model.tokenize(text, bos=False)) == text


def test_perplexity_equals_the_cli(model, tmp_path):
    need(WIKI)
    with open(WIKI, encoding="utf-8") as f:
        text = f.read(60000)
    got = model.perplexity(text, n_ctx=128, chunks=3)
    sample = tmp_path / "wiki.txt"
    sample.write_text(text, encoding="utf-8")
    cli("perplexity", "-m", MODEL, "-f", str(sample), "-c", "128", "--chunks", "3", "-t", "2", "-ctk", "tq4",
        "-ctv", "tq4", "--json-out", str(tmp_path / "p.json"))
    want = json.loads((tmp_path / "p.json").read_text().splitlines()[-1])
    assert got["chunks"] == want["chunks"] == 3
    assert got["ppl"] == want["ppl"]
    assert got["ppl_err"] == want["ppl_err"]


def test_generate_callback_stop_and_errors(model):
    seen = []
    text = model.generate("The cat", n=20, temperature=0, callback=lambda t, s: seen.append((t, s)) or len(seen) == 5)
    assert len(seen) == 5 and text == "".join(s for _, s in seen)

    def boom(t, s):
        raise KeyError("from the callback")
    with pytest.raises(KeyError, match="from the callback"):
        model.generate("The cat", n=5, callback=boom)
    with pytest.raises(ValueError, match="top_p"):
        model.generate("x", n=1, top_p=3.0)
    # Sampling is reproducible with a seed.
    a = model.generate("The cat", n=15, temperature=1.0, seed=3)
    assert a == model.generate("The cat", n=15, temperature=1.0, seed=3)


def test_save_load_and_eval(model, tmp_path):
    model.generate("A long time ago in a small town there lived", n=70, temperature=0)
    held = model.tokens
    path = str(tmp_path / "ctx.tkvc")
    model.save(path)
    nxt = model.eval([42])
    other = turbokv.Model(MODEL, cache="tq4", ctx=256, threads=2)
    other.load(path)
    assert other.tokens == held and other.logits is None
    assert np.array_equal(other.eval([42]), nxt)
    wrong = turbokv.Model(MODEL, cache="q8_0", ctx=256, threads=2)
    with pytest.raises(ValueError, match="tq4"):
        wrong.load(path)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.eval([1, model.info["n_vocab"]])


def test_long_calls_release_the_gil(model):
    """With forced switching off (a huge switch interval), another thread runs
    only while the main thread gives the GIL up itself: during a call that
    releases it, and never during one that holds it (bytes.count, the
    control: it shows the method can fail)."""
    need(WIKI)
    with open(WIKI, encoding="utf-8") as f:
        text = f.read(30000)
    count, stop = [0], [False]

    def spin():
        while not stop[0]:
            count[0] += 1
            time.sleep(0)  # gives the GIL back to the main thread
    old = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    t = threading.Thread(target=spin)
    t.start()
    try:
        big = bytes(100_000_000)
        before = count[0]
        big.count(b"\x01")
        held = count[0] - before
        before = count[0]
        model.perplexity(text, n_ctx=128, chunks=2)
        released = count[0] - before
    finally:
        stop[0] = True
        t.join()
        sys.setswitchinterval(old)
    assert held == 0, held
    assert released >= 20, released


def test_calibrate_writes_a_policy_models_use(model, tmp_path):
    need(WIKI)
    with open(WIKI, encoding="utf-8") as f:
        text = f.read(20000)
    lines = []
    path = str(tmp_path / "m.tkvp")
    model.calibrate(text, path, tokens=256, n_ctx=64, progress=lambda line: lines.append(line))
    assert len(lines) == 5 and "fitted bases" in lines[-1]
    cal = turbokv.Model(MODEL, policy=path, ctx=128, threads=2)
    assert cal.info["k_bits_per_value"] == pytest.approx(4.25)
    assert len(cal.generate("Once", n=8, temperature=0)) > 0
    with pytest.raises(RuntimeError, match="stopped"):
        model.calibrate(text, str(tmp_path / "x.tkvp"), tokens=256, n_ctx=64, progress=lambda line: True)
    assert not (tmp_path / "x.tkvp").exists()
    with pytest.raises(ValueError, match="calibrated on another model|model"):
        turbokv.Model(MODEL.replace("f16", "f32"), policy=path)


def test_model_config_and_weights_for_your_own_forward(model):
    """Model.config (tkv_model_config_json), Model.tensors and Model.tensor
    (tkv_model_tensor_info, _tensor_f32): the shapes are row-major (GGUF
    dims reversed) and an f16 file's weights decode to its f16 values."""
    c = model.config
    assert c["arch"] == "llama" and c["n_layer"] == model.info["n_layer"] and c["n_embd"] % c["n_head"] == 0
    assert c["rope_base"] > 0 and 0 < c["eps"] < 1e-3 and isinstance(c["rope_neox"], bool)
    t = model.tensors
    typ, shape = t["blk.0.attn_q.weight"]
    assert typ == "F16" and shape == (c["n_head"] * c["head_dim"], c["n_embd"])
    w = model.tensor("blk.0.attn_q.weight")
    assert w.dtype == np.float32 and w.shape == shape and np.all(np.isfinite(w))
    assert np.array_equal(w.astype(np.float16).astype(np.float32), w), "f16 weights decode exactly"
    assert model.tensor("token_embd.weight").shape == (c["n_vocab"], c["n_embd"])
    with pytest.raises(KeyError, match="no tensor named 'nope'"):
        model.tensor("nope")


def test_rotate_checks_its_arguments(rng):
    x = rng.standard_normal((3, 64)).astype(np.float32)
    assert np.allclose(turbokv.rotate(turbokv.rotate(x, seed=5), seed=5, inverse=True), x, atol=1e-5)
    with pytest.raises(ValueError, match=r"head_dim must be in \[2, 4096\], got 1"):
        turbokv.rotate(np.zeros((2, 1), np.float32))
    with pytest.raises(TypeError, match=r"float32\[n, d\].*got float64"):
        turbokv.rotate(x.astype(np.float64))
    assert turbokv.rotate(np.zeros((0, 64), np.float32)).shape == (0, 64)


INDUCTION = os.path.join(SHARED, "models/induction/induction.gguf")


def induction_run(keys):
    """scripts/induction.py at 4096 tokens (32 needles, one-token decode at each
    query) with TKV_KEYS=keys: {format: (accuracy %, median margin, min margin)}."""
    env = dict(os.environ, TKV_KEYS=keys, TKV_SHARED_DIR=SHARED)
    out = subprocess.run([sys.executable, os.path.join(SOURCE, "scripts/induction.py"), "4096", "f32,tq4,tq3"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    res = {}
    for line in out.stdout.splitlines():  # "ctx 4096 tq4: 100.0% median margin 16.52 min 16.12"
        w = line.split()
        res[w[2].rstrip(":")] = (float(w[3].rstrip("%")), float(w[6]), float(w[8]))
    return res


def test_long_context_retrieval_on_int8_keys_equals_the_exact_path():
    """The induction model (../shared/models/induction: exact retrieval by an
    induction head, its README's figures): every needle found, the f32 cache at
    the README's 17.50-nat margin, and the integer path's margins those of the
    exact path on the same codes (a 3 % error in the centroid bytes' scale
    moves tq4's median by 0.26 nats and tq3's by 0.36)."""
    need(INDUCTION)
    fast, exact = induction_run("int8"), induction_run("exact")
    assert set(fast) == {"f32", "tq4", "tq3"}, fast
    assert abs(fast["f32"][1] - 17.50) < 0.01 and fast["f32"][0] == 100.0, fast
    for f in ("tq4", "tq3"):
        assert fast[f][0] == 100.0 and exact[f][0] == 100.0, (f, fast, exact)
        assert abs(fast[f][1] - exact[f][1]) < 0.05, (f, fast[f], exact[f])
        assert abs(fast[f][2] - exact[f][2]) < 0.1, (f, fast[f], exact[f])
