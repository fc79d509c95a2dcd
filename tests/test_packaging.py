"""A normal install works from any folder: the wheel carries every preset, and an installed
llmsim finds them through importlib.resources, not through a source checkout.

The wheel is built from a copy of the repository (setuptools writes ``build/`` and
``*.egg-info`` beside the sources) with the setuptools the ``test`` extra installs, unpacked
into a folder that stands for ``site-packages``, and run from another folder with that folder
first on ``sys.path``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import sim
from sim.config.presets import TABLES, preset_names

tomllib = pytest.importorskip("tomllib")

REPO = Path(sim.__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
DATA_FOLDERS = ("workloads", "topologies")


def _package_folder(package: str) -> Path:
    """Where a listed package's files are in the checkout, by ``package-dir``'s mapping."""
    mapping = PYPROJECT.get("package-dir", {})
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in mapping:
            return REPO / mapping[prefix] / Path(*parts[i:])
    return REPO / Path(*parts)


def test_every_code_package_is_listed():
    """A new ``sim`` sub-package left out of ``packages`` would be missing from the wheel."""
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "sim").rglob("__init__.py")}
    listed = {p for p in PYPROJECT["packages"] if not p.startswith("sim.data")}
    assert listed == on_disk


def test_every_preset_file_is_packaged():
    """Each file under workloads/ and topologies/ is matched by a package-data pattern of the
    package that maps its folder, so the wheel ships all of them."""
    patterns = PYPROJECT["package-data"]
    shipped = set()
    for package in PYPROJECT["packages"]:
        if package.startswith("sim.data"):
            folder = _package_folder(package)
            for pattern in patterns.get(package, ()):
                shipped |= {p for p in folder.glob(pattern) if p.is_file()}
    on_disk = {p for name in DATA_FOLDERS for p in (REPO / name).rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert on_disk - shipped == set()


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The built wheel, unpacked as an install would lay it out."""
    setuptools = pytest.importorskip("setuptools")
    major = int(setuptools.__version__.split(".")[0])
    if major < 77:
        pytest.fail(f"the test extra installs setuptools>=77 (PEP 639 license); found {setuptools.__version__}")
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__",
                                                            ".pytest_cache", "traces", "benchmarks", "tests", "docs"))
    dist = work / "dist"
    code = ("import sys, setuptools.build_meta as b; "
            "print(b.build_wheel(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-c", code, str(dist)], cwd=src, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    wheel = dist / done.stdout.strip().splitlines()[-1]
    site = work / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


def _installed_llmsim(site: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "sim", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_wheel_carries_presets(installed):
    data = installed / "sim" / "data"
    for name in DATA_FOLDERS:
        tables = set(TABLES) if name == "topologies" else set()  # shipped, but not offered as topologies
        assert {p.stem for p in (data / name).glob("*.yaml")} == set(preset_names(name)) | tables
    assert (data / "workloads" / "validation" / "README.md").is_file()
    assert (data / "workloads" / "inference" / "latency.yaml").is_file()
    assert (data / "topologies" / "hbm-generations.yaml").is_file()
    assert (data / "topologies" / "technology-nodes.yaml").is_file()


def test_installed_runs_presets_from_another_folder(installed, tmp_path):
    """The default workload, a preset by name with a preset topology, a shipped validation case
    by name, a model preset and the technology table: all found in the installed package."""
    probe = subprocess.run([sys.executable, "-c", "import sim.config.presets as p; print(p.preset_root())"],
                           cwd=tmp_path, env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert Path(probe.stdout.strip()) == installed / "sim" / "data"
    out = tmp_path / "r.json"
    for argv in (("run", "--granularity", "chunk", "--json", str(out)),
                 ("run", "tiny", "--topology", "dgx-h100"),
                 ("validate", "megatron-ci", "--jobs", "1"),
                 ("infer", "llama2-7b", "--gpu", "H100-SXM5-80GB", "--tp", "1", "--generate", "2"),
                 ("whatif", "nodes", "tiny", "--nodes", "7"),
                 ("validate-infer",)):
        done = _installed_llmsim(installed, tmp_path, *argv)
        assert done.returncode == 0, (argv, done.stderr[-2000:])
        assert "Traceback" not in done.stderr
    assert json.loads(out.read_text())["workload"] == "gpt3-175b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
