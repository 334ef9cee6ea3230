"""scripts/install.sh for real: a virtual environment made from the system's
/usr/bin/python3 (externally managed on Debian 12 and Ubuntu 24.04), Reveal installed into
it, a `reveal` link that runs, and a link that belongs to another installation left alone.

Takes a few minutes (the dependencies are installed into a new environment); skipped where
there is no /usr/bin/python3 or no way to reach the package index.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = Path("/usr/bin/python3")


def _index_reachable() -> bool:
    url = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"
    host = urlparse(url).hostname or "pypi.org"
    try:
        with socket.create_connection((host, 443), timeout=5):
            return True
    except OSError:
        return False


def _clone(dest: Path) -> Path:
    """The working tree as a fresh clone has it (tracked and new files, nothing ignored)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, check=False)
    if listed.returncode != 0:
        shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "__pycache__", "*.so", "runs", "demo-report*"))
        return dest
    for name in listed.stdout.decode().split("\0"):
        source = REPO / name
        if name and source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _install(clone: Path, venv: Path, bin_dir: Path, *options: str,
             timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": str(SYSTEM_PYTHON), "REVEAL_VENV": str(venv),
           "REVEAL_BIN_DIR": str(bin_dir)}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(["bash", str(clone / "scripts" / "install.sh"), "--no-torch",
                           *options], capture_output=True, text=True, env=env, cwd=clone,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, str]:
    if not SYSTEM_PYTHON.is_file():
        pytest.skip("no /usr/bin/python3 here")
    version = subprocess.run([str(SYSTEM_PYTHON), "-c",
                              "import sys; print(sys.version_info >= (3, 11))"],
                             capture_output=True, text=True, check=False).stdout.strip()
    if version != "True":
        pytest.skip("/usr/bin/python3 is older than 3.11")
    if shutil.which("git") is None or not _index_reachable():
        pytest.skip("no network access to the package index")
    root = tmp_path_factory.mktemp("install")
    clone = _clone(root / "clone")
    venv, bin_dir = root / "env", root / "bin"
    done = _install(clone, venv, bin_dir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return clone, venv, bin_dir, done.stdout


def test_installs_into_a_venv_of_the_system_python(installed) -> None:  # type: ignore[no-untyped-def]
    clone, venv, bin_dir, printed = installed
    config = (venv / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in config
    version = subprocess.run([str(venv / "bin" / "reveal"), "--version"],
                             capture_output=True, text=True, check=False)
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("reveal ")
    # it runs this clone's code, with the C extension built next to its sources
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import reveal, reveal.collect._procread as p; "
                            "print(reveal.__file__); print(p.__file__)"],
                           capture_output=True, text=True, check=False)
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(clone / "src" / "reveal"))
               for line in where.stdout.splitlines())
    # the link on PATH, and the closing lines say where it went and how to run it
    link = bin_dir / "reveal"
    assert link.is_symlink() and link.resolve() == (venv / "bin" / "reveal").resolve()
    linked = subprocess.run([str(link), "--version"], capture_output=True, text=True,
                            check=False)
    assert linked.stdout == version.stdout
    assert f"installed in {venv}" in printed and f"linked {link}" in printed


def test_leaves_another_installations_reveal_alone(installed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    clone, venv, bin_dir, _ = installed
    other = tmp_path / "other-clone" / ".venv" / "bin" / "reveal"
    other.parent.mkdir(parents=True)
    other.write_text("#!/bin/sh\necho other\n")
    other.chmod(0o755)
    link = bin_dir / "reveal"
    link.unlink()
    link.symlink_to(other)

    again = _install(clone, venv, bin_dir, timeout=900)  # installed already: quick
    refusals = [line for line in again.stderr.splitlines() if str(link) in line]
    assert again.returncode == 1, again.stdout + again.stderr
    assert len(refusals) == 1 and "--force" in refusals[0], again.stderr
    assert link.resolve() == other.resolve()

    forced = _install(clone, venv, bin_dir, "--force", timeout=900)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert link.resolve() == (venv / "bin" / "reveal").resolve()


def test_refuses_an_interpreter_too_old_or_missing(tmp_path: Path) -> None:
    """Checked before anything is installed: one line, exit 1."""
    env = {**os.environ, "PYTHON": str(tmp_path / "no-such-python"),
           "REVEAL_VENV": str(tmp_path / "env")}
    done = subprocess.run(["bash", str(REPO / "scripts" / "install.sh"), "--no-link"],
                          capture_output=True, text=True, env=env, check=False, timeout=600)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("install: error: no Python")
    assert not (tmp_path / "env").exists()
