"""`python3 -m braid --version`, and the package as `meson install` lays it out."""

import glob
import os
import subprocess
import sys

import pytest

from conftest import import_braid

braid = import_braid()


def test_version_prints_version_and_features():
    out = subprocess.run([sys.executable, "-m", "braid", "--version"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    first, second = out.splitlines()
    assert first.startswith(f"braid {braid.__version__} (Python ") and braid.__version__.count(".") == 2
    assert second.startswith("features: io_uring ") and ", cuda " in second, out
    assert set(braid.features()) == {"io_uring", "ib", "cuda", "torch"}


def test_meson_install_gives_an_importable_package(tmp_path):
    build = os.environ.get("BRAID_BUILD_ROOT")
    if not build:
        pytest.skip("BRAID_BUILD_ROOT is not set (meson test sets it): no build tree to install from")
    subprocess.run(["meson", "install", "-C", build, "--no-rebuild", "--destdir", str(tmp_path),
                    "--tags", "python-runtime"], capture_output=True, text=True, timeout=120, check=True)
    inits = glob.glob(f"{tmp_path}/**/braid/__init__.py", recursive=True)
    assert len(inits) == 1, inits
    site = os.path.dirname(os.path.dirname(inits[0]))
    assert glob.glob(f"{site}/braid/_core*.so") and os.path.isfile(f"{site}/braid/__main__.py")
    # libbraid comes from the build tree: this test installs the Python package alone.
    env = dict(os.environ, PYTHONPATH=site, LD_LIBRARY_PATH=build)
    code = ("import braid, numpy, tempfile; d = tempfile.mkdtemp(); "
            "c = braid.init(url=f'file://{d}/r', rank=0, size=1); a = numpy.ones(3); c.all_reduce(a); "
            "print(braid.__file__, a.sum())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    path, total = out.stdout.split()
    assert path.startswith(str(tmp_path)) and float(total) == 3.0, out.stdout
