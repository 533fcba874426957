"""`pip install astra-sglang` (not editable) must carry the patch registry and the extracted manifests, and
never SGLang's own files; the patches must then resolve without a checkout."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # what an earlier build in this tree left behind: a patch since deleted from patches/ (setuptools keeps build/lib)
    stale = ROOT / "build" / "lib" / "astra_sglang" / "_data" / "patches" / "merge_state" / "retired-v0"
    stale.mkdir(parents=True, exist_ok=True)
    (stale / "manifest.json").write_text("{}")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, cwd=out)
    wheel = next(out.glob("astra_sglang-*.whl"))
    target = out / "site"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(target)
    assert not [n for n in names if "/src/" in n or "/baseline_src/" in n or "/build/" in n], "SGLang files in wheel"
    assert not [n for n in names if "retired-v0" in n], "a file deleted from the tree (left in build/lib) was shipped"
    assert any(n.endswith("agents/prompts/coding.md") for n in names)
    return target


def test_the_wheel_carries_every_committed_file_of_each_op_contract(installed):
    """A patch's first-call check draws its inputs from the op's inputs.py: a wheel without it failed every
    decode_attention patch on the H200 ("build failed: ... inputs.py", 2026-12-04), serving 0 calls."""
    tracked = subprocess.run(["git", "ls-files", "extracted"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    data = installed / "astra_sglang" / "_data"
    missing = [f for f in tracked if not (data / f).is_file()]
    assert tracked and not missing, missing[:10]


def test_wheel_patches_resolve_without_a_checkout(installed, tmp_path):
    code = (
        "import astra_sglang, sys; from pathlib import Path\n"
        "assert Path(astra_sglang.__file__).is_relative_to(Path(sys.argv[1])), astra_sglang.__file__\n"
        "from astra_sglang.patches.registry import patches_root, discover\n"
        "from astra_sglang.patches.kernels import extracted_op_dir\n"
        "from astra_sglang.contract.restore import is_complete\n"
        "root = patches_root(); assert root.is_relative_to(Path(sys.argv[1])), root\n"
        "found = {p.manifest.patch_id: p for p in discover()}\n"
        "assert 'fused-add-rmsnorm-mr-k4' in found, sorted(found)\n"
        "d = extracted_op_dir(found['fused-add-rmsnorm-mr-k4'].manifest)\n"
        "assert is_complete(d, for_build=True) and not d.is_relative_to(Path(sys.argv[1])), d\n"
        "print('ok', d)\n"
    )
    env = {"PYTHONPATH": str(installed), "ASTRA_SGLANG_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", code, str(installed)], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ok" in r.stdout


def test_the_wheel_installs_into_sglangs_environment_with_nothing_more(installed):
    """README's install line (`pip wheel . -w dist/ --no-deps && pip install dist/astra_sglang-*.whl`) into an
    SGLang environment: every unconditional dependency is one SGLang itself requires (rich is an extra's)."""
    import json
    import re
    from importlib.metadata import requires

    wheel = next(installed.parent.glob("astra_sglang-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    deps = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    name = lambda req: re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower().replace("_", "-")  # noqa: E731
    unconditional = {name(d) for d in deps if "extra ==" not in d}
    sglang_needs = {name(r) for r in requires("sglang") or [] if "extra ==" not in r}
    assert unconditional and unconditional <= sglang_needs, unconditional - sglang_needs
    assert any(name(d) == "rich" and 'extra == "agents"' in d for d in deps)
    # Nothing to fetch: pip, offline, finds every requirement already in this (SGLang) environment.
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--quiet", "--report", "-",
                        str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    # (an environment that already holds this version, as a dev venv does, lists nothing at all)
    assert {i["metadata"]["name"] for i in json.loads(r.stdout)["install"]} <= {"astra-sglang"}


def test_the_device_rig_refuses_a_wheel_that_is_not_the_tree(installed, tmp_path):
    """device.sh installs a hand-built wheel: one built before a packaging fix cost a whole e2e call on the H200
    (2026-12-04). check_wheel.py must pass a fresh wheel and refuse one that lacks or changes a packaged file."""
    check = [sys.executable, str(ROOT / "scripts" / "h200_server" / "check_wheel.py")]
    fresh = next(installed.parent.glob("astra_sglang-*.whl"))
    assert subprocess.run([*check, str(fresh), str(ROOT)], capture_output=True).returncode == 0

    def variant(name: str, drop: str, change: str) -> Path:
        out = tmp_path / name / fresh.name
        out.parent.mkdir()
        with zipfile.ZipFile(fresh) as src, zipfile.ZipFile(out, "w") as dst:
            for item in src.infolist():
                if item.filename == drop:
                    continue
                data = src.read(item)
                dst.writestr(item, data + b"\n# edited\n" if item.filename == change else data)
        return out

    lacking = variant("lacking", "astra_sglang/_data/extracted/decode_attention/inputs.py", "")
    changed = variant("changed", "", "astra_sglang/patches/runtime.py")
    for wheel, word in ((lacking, "missing: astra_sglang/_data/extracted/decode_attention/inputs.py"),
                        (changed, "changed: astra_sglang/patches/runtime.py")):
        r = subprocess.run([*check, str(wheel), str(ROOT)], capture_output=True, text=True)
        assert r.returncode == 1 and word in r.stdout and "rebuild" in r.stdout, r.stdout


def test_a_wheel_whose_patches_are_not_served_is_not_refused_for_them(installed, tmp_path):
    """H100, 2026-12-05: `ship_check.sh RECORD=1` recorded the GPU into a patch manifest on the device, and the
    wheel check then refused the wheel for that one file, though the servers read ASTRA_SGLANG_PATCHES_DIR."""
    import os

    check = [sys.executable, str(ROOT / "scripts" / "h200_server" / "check_wheel.py")]
    fresh = next(installed.parent.glob("astra_sglang-*.whl"))
    edited = tmp_path / fresh.name
    manifest = next(n for n in zipfile.ZipFile(fresh).namelist()
                    if n.startswith("astra_sglang/_data/patches/") and n.endswith("/manifest.json"))
    with zipfile.ZipFile(fresh) as src, zipfile.ZipFile(edited, "w") as dst:
        for item in src.infolist():
            dst.writestr(item, src.read(item) + (b" " if item.filename == manifest else b""))
    env = {k: v for k, v in os.environ.items() if k != "ASTRA_SGLANG_PATCHES_DIR"}
    r = subprocess.run([*check, str(edited), str(ROOT)], capture_output=True, text=True, env=env)
    assert r.returncode == 1 and f"changed: {manifest}" in r.stdout      # the wheel's patches would be served
    r = subprocess.run([*check, str(edited), str(ROOT)], capture_output=True, text=True,
                       env={**env, "ASTRA_SGLANG_PATCHES_DIR": str(ROOT / "patches")})
    assert r.returncode == 0, r.stdout                                    # they are not: the folder's are

