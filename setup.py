"""Builds the turbokv Python package with CMake (used by pyproject.toml's
setuptools backend: `pip install --no-build-isolation .`,
`python3 -m build --no-isolation`).

The compiled core turbokv._turbokv and libturbokv.so.1 come from a CMake
build of this checkout (Release, no tests, benchmarks or CUDA) in
build/setuptools/cmake, or in the build directory TKV_CMAKE_BUILD_DIR names
(an existing one is reused as configured: `make` first, then `pip install .`
only copies). The module finds the library beside it (RPATH $ORIGIN). The
version is CMakeLists.txt's project(VERSION), the one place it is written.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# setuptools' own build tree (build/lib..., egg-info): build/setuptools, or
# TKV_SETUPTOOLS_BUILD_BASE (the tests use a fresh one: nothing stale).
BUILD_BASE = os.environ.get("TKV_SETUPTOOLS_BUILD_BASE", "build/setuptools")
os.makedirs(BUILD_BASE, exist_ok=True)  # egg_base must exist


def project_version() -> str:
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"^project\(\s*turbokv\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", text, re.M)
    if not m:
        sys.exit("setup.py: no project(turbokv VERSION x.y.z) in CMakeLists.txt")
    return m.group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        given = os.environ.get("TKV_CMAKE_BUILD_DIR")
        build_dir = Path(given).resolve() if given else ROOT / "build" / "setuptools" / "cmake"
        if not (build_dir / "CMakeCache.txt").exists():
            subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                                   "-DTKV_BUILD_TESTS=OFF", "-DTKV_BUILD_BENCH=OFF",
                                   # The C API, hence the module, does not use the CUDA backend.
                                   "-DTKV_CUDA=OFF",
                                   f"-DPython3_EXECUTABLE={sys.executable}"])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "turbokv_py", "-j", jobs])
        built = glob.glob(str(build_dir / "python" / "turbokv" / "_turbokv*.so"))
        if len(built) != 1:
            sys.exit(f"setup.py: expected one _turbokv*.so in {build_dir}/python/turbokv, found {built}")
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], dest)
        # The C library the module links (soname libturbokv.so.1), beside it.
        shutil.copyfile((build_dir / "libturbokv.so.1").resolve(), dest.parent / "libturbokv.so.1")


setup(
    version=project_version(),
    packages=["turbokv"],
    package_dir={"turbokv": "src/python/turbokv"},
    package_data={"turbokv": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("turbokv._turbokv", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
    zip_safe=False,
)
