"""The package as researchers install it: one version (CMakeLists.txt's
project(VERSION)) in the module, the library and the wheel; `pip install
--no-build-isolation .` and `python3 -m build --no-isolation` on this
checkout (reusing the CMake build the tests run on: TKV_BUILD_DIR) give a
package that imports and works from elsewhere, its library beside it; type
stubs name every public name and help() states shapes, dtypes and units."""
import ast
import os
import pydoc
import re
import subprocess
import sys
import zipfile

import pytest

from conftest import require_module

import turbokv

SOURCE = os.environ.get("TKV_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("TKV_BUILD_DIR", os.path.join(SOURCE, "build"))
PKG = os.path.join(SOURCE, "src", "python", "turbokv")


def cmake_version():
    text = open(os.path.join(SOURCE, "CMakeLists.txt")).read()
    return re.search(r"^project\(\s*turbokv\s+VERSION\s+([0-9.]+)", text, re.M).group(1)


def test_one_version_from_cmakelists():
    v = cmake_version()
    assert turbokv.__version__ == v
    header = open(os.path.join(SOURCE, "include", "turbokv.h")).read()
    parts = [re.search(rf"#define TKV_VERSION_{p} (\d+)", header).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    assert ".".join(parts) == v


def run_py(code, path, cwd):
    env = {k: val for k, val in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = path
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


CHECK = """
import numpy as np, turbokv, turbokv.torch
c = turbokv.Codec("tq4", d=128)
x = np.ones((2, 128), np.float32)
assert c.quantize(x).shape == (2, 66)
lib = [l.split()[-1] for l in open("/proc/self/maps") if "libturbokv.so" in l][0]
print(turbokv.__version__, turbokv.__file__, lib)
"""


def check_installed(where, tmp_path):
    out = run_py(CHECK, str(where), str(tmp_path)).split()
    assert out[0] == cmake_version()
    assert out[1].startswith(str(where)), out
    assert out[2].startswith(str(where)), f"the library beside the module, not {out[2]}"


def test_pip_install_builds_and_installs_the_package(tmp_path):
    require_module("pip", "python3-pip")
    env = dict(os.environ, TKV_CMAKE_BUILD_DIR=BUILD, PIP_NO_INDEX="1",
               TKV_SETUPTOOLS_BUILD_BASE=str(tmp_path / "setuptools"))
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                        "--target", str(target), SOURCE], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    for f in ("__init__.py", "torch.py", "__init__.pyi", "torch.pyi", "py.typed", "libturbokv.so.1"):
        assert (target / "turbokv" / f).exists(), f
    check_installed(target, tmp_path)
    dist = list(target.glob("turbokv-*.dist-info"))
    assert [d.name for d in dist] == [f"turbokv-{cmake_version()}.dist-info"]


def test_python_build_makes_a_wheel(tmp_path):
    require_module("build", "python3-build")
    env = dict(os.environ, TKV_CMAKE_BUILD_DIR=BUILD, TKV_SETUPTOOLS_BUILD_BASE=str(tmp_path / "setuptools"))
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(tmp_path / "dist"),
                        SOURCE], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    wheels = list((tmp_path / "dist").glob("*.whl"))
    assert len(wheels) == 1 and wheels[0].name.startswith(f"turbokv-{cmake_version()}-cp3"), wheels
    with zipfile.ZipFile(wheels[0]) as z:
        names = z.namelist()
        z.extractall(tmp_path / "wheel")
    assert any(re.fullmatch(r"turbokv/_turbokv\.cpython-.*\.so", n) for n in names), names
    assert "turbokv/libturbokv.so.1" in names and "turbokv/py.typed" in names
    check_installed(tmp_path / "wheel", tmp_path)


# ------------------------------------------------------ stubs and docstrings

def public_names():
    import turbokv.torch as tt
    names = {("turbokv", n) for n in turbokv.__all__ if n not in ("__version__", "DEFAULT_SEED")}
    names |= {("turbokv.torch", n) for n in tt.__all__}
    return names


def stub_names(path):
    tree = ast.parse(open(path).read())
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            members = {m.name for m in node.body if isinstance(m, ast.FunctionDef)} if isinstance(
                node, ast.ClassDef) else set()
            out[node.name] = members
    return out


def test_stubs_cover_every_public_name():
    stubs = {"turbokv": stub_names(os.path.join(PKG, "__init__.pyi")),
             "turbokv.torch": stub_names(os.path.join(PKG, "torch.pyi"))}
    import turbokv.torch as tt
    mods = {"turbokv": turbokv, "turbokv.torch": tt}
    for mod, name in sorted(public_names()):
        assert name in stubs[mod], f"{mod}.{name} has no stub"
        obj = getattr(mods[mod], name)
        if isinstance(obj, type):
            public = {m for m in dir(obj) if not m.startswith("_") and callable(getattr(obj, m, None))}
            assert public <= stubs[mod][name] | {"__init__"}, f"{mod}.{name}: no stubs for {public - stubs[mod][name]}"


@pytest.mark.parametrize("name,needles", [
    ("Codec", ["float32[n, d]", "uint8[n, row_bytes]", "bits per value", "row_bytes"]),
    ("attention", ["float32[n_q, n_q_heads, d]", "uint8[n_kv, n_kv_heads", "causal_offset", "1/sqrt(d)"]),
    ("kv_stats", ["float32[heads, tokens, d]", "queries"]),
    ("rotate", ["float32[n, d]", "Hadamard"]),
    ("calibrate", ["float32[n, d]", "tqcB"]),
    ("codebook", ["float64[2**bits]", "mse_coord"]),
    ("Model", ["GGUF", "tensor", "float32", "bits per stored value"]),
])
def test_help_states_shapes_dtypes_and_units(name, needles):
    text = pydoc.render_doc(getattr(turbokv, name), renderer=pydoc.plaintext)
    for n in needles:
        assert n in text, f"help(turbokv.{name}) does not say {n!r}"


def test_help_of_the_torch_cache():
    import turbokv.torch as tt
    text = pydoc.render_doc(tt.CompressedKVCache, renderer=pydoc.plaintext)
    for n in ["[n, n_kv_heads, head_dim]", "[1, n_kv_heads, n, head_dim]", "Bytes", "bits per K/V value",
              "capacity: tokens", "causal"]:
        assert n in text, n
    for mod, name in public_names():
        obj = getattr(tt if mod == "turbokv.torch" else turbokv, name)
        assert obj.__doc__ and len(obj.__doc__) > 40, f"{mod}.{name} has no docstring"
        if isinstance(obj, type):
            for m in dir(obj):
                if not m.startswith("_") and callable(getattr(obj, m)):
                    assert getattr(obj, m).__doc__, f"{mod}.{name}.{m} has no docstring"
