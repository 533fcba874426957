"""An OS sandbox for the candidate's worker: what candidate code can reach cannot change the verdict.

The process split (docs/harness.md) keeps the judge's memory away from the candidate, but until this module the
worker ran as the same user with everything that user may do: it could rewrite the files the judge reads next
(the op folder's original and reference, their ``__pycache__``, the Triton cache the judge loads the original's
compiled launcher from: code the judge then runs), signal or trace the judge and the evaluate parent, renice
them, and start any program. The worker's trusted code installs two kernel mechanisms before any candidate code
is imported (``worker/__main__.py``, before torch starts its first thread), and both bind every process the
worker starts too:

- Landlock (``install_landlock``): the worker may write only under its own scratch folder (its ``TMPDIR``,
  Triton cache, CUDA and torch caches: ``worker_env``, made by the judge per evaluation), a few ``/dev`` files
  (the GPU's device files, ``/dev/null``..., ``/dev/shm``), and any extra path a test names
  (``ASTRA_SGLANG_SANDBOX_WRITABLE``). It may execute only the Python interpreter and the toolchain Triton
  needs at a kernel's first launch (its bundled ``ptxas``/``cuobjdump``, ``CUDA_HOME/bin``, the C compiler and
  assembler/linker it builds its launcher stubs with, ``ldconfig`` when it looks for libcuda): a Triton JIT
  compile calls ``ptxas`` for every new specialisation, possibly late in a run, so those cannot be forbidden,
  but nothing written by the worker is executable and no shell is. Reading stays broad (Python, torch, the
  candidate, the op folder). Where the kernel has them: TCP bind/connect denied (ABI 4) and signals or
  abstract unix sockets to processes outside the sandbox denied (ABI 6).
- seccomp-bpf (``install_seccomp``): ``ptrace``, ``process_vm_readv/writev``, signals to any process but the
  worker itself (``kill``/``tgkill``/``tkill``/``rt_sigqueueinfo`` compared with the worker's pid at install
  time; 0 and negative pids are process groups: denied; ``pidfd_send_signal`` denied), scheduling another
  process (``setpriority``, ``sched_set*``, ``prlimit64``, ``ioprio_set`` on a pid other than 0 or its own),
  leaving its process group (``setsid``, ``setpgid``: the judge stops and kills the worker by its group), and
  calls no kernel candidate has any use for (mount and namespaces, ``bpf``, ``perf_event_open``, keyrings,
  modules, ``userfaultfd``, ``io_uring``, setting the clock). Each returns EPERM, so a candidate sees an
  error, not a dead worker. Threads, ``fork`` and ``exec`` stay allowed (exec is Landlock's). It also gives up
  every capability.
- read-only mounts (``install_readonly_mounts``), where Landlock is off (a GPU: it stops CUDA's start) and the
  worker is root (the H200): without capabilities a uid-0 process still writes every file root owns, so the
  worker sees every file system read-only in a mount namespace of its own, but its scratch folder and its
  device files.

What is in force is said, never assumed: ``install`` returns the level ("landlock+seccomp", "seccomp only:
...", "none: <why>"), the worker sends it to the judge before any candidate import (``protocol.Hello``), and
the verdict records it (``EvalResult.sandbox``). ``ASTRA_SGLANG_SANDBOX=0`` switches it off for debugging
(``landlock`` or ``seccomp``: that layer alone).
"""

from __future__ import annotations

import ctypes
import errno
import glob
import importlib.util
import os
import platform
import shutil
import struct
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

SANDBOX_ENV = "ASTRA_SGLANG_SANDBOX"  # "1": landlock and seccomp; "0": none; layer names joined by "+";
# unset: landlock and seccomp on a CPU, seccomp and the read-only mounts on a GPU (wanted_layers)
SECRET_ENV = "ASTRA_SGLANG_HELDOUT_SECRET"  # the held-out secret given inline: never passed to a judge or worker
SCRATCH_ENV = "ASTRA_SGLANG_SANDBOX_SCRATCH"  # the worker's own writable folder, made by the judge
WRITABLE_ENV = "ASTRA_SGLANG_SANDBOX_WRITABLE"  # more writable paths (os.pathsep): tests' marker files
DEVICE_ENV = "ASTRA_SGLANG_SANDBOX_DEVICE"  # the worker's device, set by the judge: the default layers follow it
# Landlock breaks CUDA's initialisation on the H200 (cudaGetDeviceCount: error 304, 2026-12-05, with or without
# the secret's read rules; seccomp alone runs), so a GPU worker gets seccomp and the mounts unless it is asked for
GPU_LANDLOCK_OFF = "off on a GPU by default (it makes CUDA's initialisation fail, error 304 on the H200)"

# ----------------------------------------------------------------------------------------- the worker's env


def secret_path() -> Path:
    """Where the held-out secret lives (``~/.config/astra-sglang/heldout.key``): the parent reads it to draw the
    held-out cases; the worker's Landlock rules hide its folder, so a candidate cannot compute the held-out set
    and be right exactly there (issue 22)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "astra-sglang" / "heldout.key"


def make_scratch() -> Path:
    """A fresh folder for one judge's workers (theirs alone: the judge reads nothing from it), removed by the
    judge when it is done. Per evaluation, not per user: a cache shared between candidates would let one
    candidate plant code that another candidate's worker then runs."""
    return Path(tempfile.mkdtemp(prefix="astra-worker-"))


def worker_env(scratch: Path, device: str = "cpu") -> dict[str, str]:
    """The environment the judge gives its worker: every cache and temporary folder inside ``scratch``.

    Without it the worker shares the judge's Triton cache (``~/.triton/cache``: the judge loads the original's
    compiled kernel and launcher stub from it, a stub is a shared object it runs) and ``/tmp``; inside the
    sandbox those writes would fail instead. A fresh Triton cache costs the worker one C compile of Triton's
    driver stub and one per launcher signature on the GPU (gcc, about a second each)."""
    dirs = {"TMPDIR": "tmp", "TRITON_CACHE_DIR": "triton/cache", "TRITON_DUMP_DIR": "triton/dump",
            "TRITON_OVERRIDE_DIR": "triton/override", "TRITON_HOME": "triton", "TORCH_EXTENSIONS_DIR":
            "torch_extensions", "TORCHINDUCTOR_CACHE_DIR": "inductor", "PYTORCH_KERNEL_CACHE_PATH": "torch_kernels",
            "CUDA_CACHE_PATH": "nv"}
    env = {SCRATCH_ENV: str(scratch), DEVICE_ENV: device, "PYTHONDONTWRITEBYTECODE": "1"}
    for var, rel in dirs.items():
        path = scratch / rel
        path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
    libcuda = os.environ.get("TRITON_LIBCUDA_PATH") or libcuda_dir()
    if libcuda:
        env["TRITON_LIBCUDA_PATH"] = libcuda
    return env


def libcuda_dir() -> str | None:
    """Where libcuda.so.1 is, found as Triton finds it (``/sbin/ldconfig -p``) but here, outside the sandbox.
    Triton runs that at its first launch in the worker; where ``/sbin/ldconfig`` is a shell script (Ubuntu's
    wrapper of ``ldconfig.real``) the sandbox refuses it and every launch would fail, so the worker is told the
    answer (``TRITON_LIBCUDA_PATH``, which Triton reads first). None without a libcuda (a CPU host)."""
    import subprocess

    try:
        out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = [line.split()[-1] for line in out.splitlines() if "libcuda.so.1" in line]
    return os.path.dirname(found[0]) if found else None


# ------------------------------------------------------------------------------------------------ Landlock

_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446  # x86_64, arm64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK = 1 << 8, 1 << 9, 1 << 10, 1 << 11
FS_MAKE_SYM, FS_REFER, FS_TRUNCATE = 1 << 12, 1 << 13, 1 << 14  # REFER: ABI 2, TRUNCATE: ABI 3
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE  # what a rule on a file (not a folder) may hold

# /dev files a worker writes: the GPU's (globbed at install), the usual character devices, /dev/shm. Not all of
# /dev: the GPU host runs the harness as root, and a root worker could open a disk's block device for writing.
_DEV_WRITABLE = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx",
                 "/dev/shm", "/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/*")


_LOADERS = ("/lib64/ld-linux*.so*", "/lib/ld-linux*.so*", "/lib/*-linux-gnu/ld-linux*.so*", "/usr/lib64/ld-linux*.so*",
            "/lib/ld-musl-*.so*")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _no_new_privs(libc: ctypes.CDLL) -> bool:
    """``PR_SET_NO_NEW_PRIVS``: required by both Landlock and seccomp for an unprivileged process, and a set-uid
    program the worker starts gains nothing."""
    one, zero = ctypes.c_ulong(1), ctypes.c_ulong(0)
    return int(libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), one, zero, zero, zero)) == 0


def _err(what: str) -> str:
    e = ctypes.get_errno()
    return f"{what}: {errno.errorcode.get(e, str(e))}"


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (not Linux, an older kernel, Landlock not among
    the kernel's LSMs, or a container's seccomp profile that refuses the call)."""
    if sys.platform != "linux":
        return 0
    try:
        r = _libc().syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                            ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(r), 0)


@dataclass
class Policy:
    """What the worker may write and execute (Landlock; reading is not restricted). Paths that do not exist
    are left out when the rules are made."""

    writable: list[Path] = field(default_factory=list)
    executable: list[Path] = field(default_factory=list)
    dev: list[Path] = field(default_factory=list)
    hidden: list[Path] = field(default_factory=list)  # folders whose files the worker may not read (the secret's)


def _real(paths: Iterable[str | Path | None]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if not p:
            continue
        r = Path(os.path.realpath(p))
        if r.exists() and r not in out:
            out.append(r)
    return out


def _compiler_own(cc: Path) -> list[Path]:
    """A compiler installed under its own prefix (the H100 image's gcc is /opt/gcc/bin/gcc) keeps cc1 and
    collect2 in <prefix>/libexec/gcc and <prefix>/lib/gcc, not /usr; and a compiler that is a script needs its
    interpreter. Without them the Landlock probe on the H100 died at the compiler, "Permission denied:
    '/opt/gcc/bin/gcc'" (2026-12-05), before it could say whether CUDA starts inside Landlock."""
    out: list[Path] = []
    real = Path(os.path.realpath(cc))
    prefix = real.parent.parent
    if prefix != Path("/usr") and prefix != Path("/"):
        out += [prefix / "libexec" / "gcc", prefix / "lib" / "gcc", prefix / "lib64" / "gcc"]
        # its own bin folder: the H100 image's gcc is a script that execs /opt/gcc/bin/gcc-real ("Permission
        # denied" there inside Landlock until this folder was allowed, 2026-12-05). A shared prefix's bin
        # (/usr/local/bin holds every program installed there) gives only the programs named after the compiler
        if prefix == Path("/usr/local"):
            out += sorted(p for p in real.parent.glob(glob.escape(real.name) + "?*") if p.is_file())
        else:
            out.append(real.parent)
        # binutils built into the same prefix: gcc runs <prefix>/<target triplet>/bin/as and ld before PATH's
        out += [Path(p) for p in sorted(glob.glob(str(prefix / "*-linux*" / "bin")))]
    try:
        with open(real, "rb") as f:
            head = f.read(256)
    except OSError:
        return out
    if head.startswith(b"#!"):
        words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
        if words:
            out.append(Path(words[0]))
            if Path(words[0]).name == "env" and len(words) > 1 and shutil.which(words[1]):
                out.append(Path(str(shutil.which(words[1]))))
    return out


def _toolchain() -> list[Path]:
    """What the worker may execute besides the interpreter: what Triton runs on the GPU at a kernel's first
    launch (its bundled ptxas/cuobjdump/nvdisasm or the ``TRITON_*_PATH`` ones, ``/sbin/ldconfig -p`` to find
    libcuda, the C compiler that builds its driver and launcher stubs with cc1/as/collect2/ld) and
    ``CUDA_HOME/bin`` (nvcc --version, part of a CUDA candidate's cache key). Found without importing Triton:
    the worker has not imported anything heavy yet."""
    found: list[str | Path | None] = []
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.submodule_search_locations:
        found.append(Path(list(spec.submodule_search_locations)[0]) / "backends" / "nvidia" / "bin")
    found += [os.environ.get(f"TRITON_{t}_PATH") for t in ("PTXAS", "PTXAS_BLACKWELL", "CUOBJDUMP", "NVDISASM")]
    from astra_sglang.loader.toolchain import cuda_home  # stdlib only: where the loader's nvcc comes from

    found.append(cuda_home() / "bin")
    cc = [os.environ.get("CC"), shutil.which("gcc"), shutil.which("clang"), shutil.which("cc")]
    found += cc
    if any(cc):  # gcc's own programs (cc1, collect2, lto-wrapper) and the binutils it calls
        found += ["/usr/lib/gcc", "/usr/libexec/gcc"]
        found += [shutil.which(t) for t in ("as", "ld", "ld.bfd", "ld.gold", "ld.lld")]
        found += [p for c in cc if c for p in _compiler_own(Path(c))]
    # the dynamic loader: the kernel opens it for execution with every dynamically linked program. Running it
    # directly (``ld.so /bin/sh``) runs any readable program: still inside this sandbox, which it inherits
    found += [p for pattern in _LOADERS for p in sorted(glob.glob(pattern))]
    try:
        with open("/sbin/ldconfig", "rb") as f:
            if f.read(4) == b"\x7fELF":  # a program, not a shell script (which would need /bin/sh)
                found.append("/sbin/ldconfig")
    except OSError:
        pass
    return _real(found)


def default_policy(env: Mapping[str, str]) -> Policy:
    """The worker's policy from the environment the judge gave it (``worker_env``)."""
    writable = [env[SCRATCH_ENV]] if env.get(SCRATCH_ENV) else []
    writable += [p for p in env.get(WRITABLE_ENV, "").split(os.pathsep) if p]
    dev = [p for pattern in _DEV_WRITABLE for p in sorted(glob.glob(pattern))]
    # its own threads' files: naming another thread (pthread_setname_np, as the CUDA driver names the threads it
    # starts) writes /proc/self/task/<tid>/comm; refused, it fails with EACCES (measured here). Only this
    # process's: a pid the worker starts later is another folder
    dev += [f"/proc/{os.getpid()}/task"]
    return Policy(writable=_real(writable), executable=_real([sys.executable]) + _toolchain(), dev=_real(dev),
                  hidden=_real([secret_path().parent]))


def readable_except(hidden: Path) -> list[Path]:
    """Where reading stays allowed when ``hidden`` (a folder) may not be read: beneath every entry of each of its
    ancestors except the next one on the way down to it. Landlock only grants, so "all but one folder" is the
    siblings of its path; a file created later right inside an ancestor (``/``, ``$HOME``) is not readable then,
    which no worker needs."""
    out: list[Path] = []
    hidden = Path(os.path.realpath(hidden))
    parts = hidden.parts
    for depth in range(1, len(parts)):
        here, next_name = Path(*parts[:depth]), parts[depth]
        try:
            names = sorted(os.listdir(here))
        except OSError:
            continue
        for name in names:
            if name == next_name:
                continue
            # a rule follows a symlink to its target: one that leads back up the path (pytest's
            # ``pytest-current``, a home linked elsewhere) or into the folder would grant it whole
            target = Path(os.path.realpath(here / name))
            if target == hidden or hidden.is_relative_to(target) or target.is_relative_to(hidden):
                continue
            out.append(here / name)
    return out


def install_landlock(policy: Policy) -> str | None:
    """Restrict this process (and what it starts) to ``policy``'s writes and executions. None when in force,
    else why not (nothing was restricted then). Binds only the calling thread and its later children: call it
    while the process has one thread (``worker/__main__.py`` does, before torch is imported)."""
    abi = landlock_abi()
    if abi < 1:
        return "Landlock not available on this kernel"
    libc = _libc()
    fs = (FS_EXECUTE | FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_CHAR | FS_MAKE_DIR | FS_MAKE_REG
          | FS_MAKE_SOCK | FS_MAKE_FIFO | FS_MAKE_BLOCK | FS_MAKE_SYM)
    fs |= (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0)
    fs |= FS_READ_FILE if policy.hidden else 0  # reading is restricted only to hide a folder (one, the secret's)
    attr = _RulesetAttr(fs, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = int(libc.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
                               ctypes.c_uint32(0)))
    if ruleset < 0:
        return _err("landlock_create_ruleset")
    try:
        write = fs & ~FS_EXECUTE & ~FS_READ_FILE
        rules = [(p, write) for p in policy.writable] + [(p, write) for p in policy.dev]
        rules += [(p, FS_EXECUTE) for p in policy.executable]
        if fs & FS_READ_FILE:
            rules += [(p, FS_READ_FILE) for p in readable_except(policy.hidden[0])]
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # gone meanwhile: nothing to allow
            try:
                allowed = access & (_FILE_RIGHTS if not os.path.isdir(path) else ~0) & fs
                rule = _PathBeneathAttr(allowed, fd)
                if libc.syscall(ctypes.c_long(_SYS_LANDLOCK_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    return _err(f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        if not _no_new_privs(libc):
            return _err("prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return _err("landlock_restrict_self")
    finally:
        os.close(ruleset)
    return None


# ---------------------------------------------------------------------------------------- read-only mounts

_CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1 << 10, 1 << 11, 1 << 12, 1 << 14, 1 << 18, 1 << 21
_KEPT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
               "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
# /proc stays writable (the CUDA driver names its threads through /proc/self/task), except what a root process
# without capabilities could still change for the whole machine through it (the list container runtimes mount
# read-only): sysctls (e.g. vm.drop_caches), the magic SysRq key, IRQ affinity, bus and fs settings
PROC_READONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")


@dataclass(frozen=True)
class Mount:
    point: str
    options: frozenset[str]


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounts(pid: int | str = "self") -> list[Mount]:
    """The mounts ``pid`` sees (``/proc/<pid>/mountinfo``), in the kernel's order, with their per-mount options;
    [] where ``/proc`` does not say. The judge reads the worker's to check the read-only view it claims."""
    try:
        lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 6:
            out.append(Mount(_unescape(fields[4]), frozenset(fields[5].split(","))))
    return out


def _beneath(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _proc_writable(point: str) -> bool:
    return _beneath(point, ["/proc"]) and not _beneath(point, PROC_READONLY)


def writable_mounts(pid: int | str, allowed: Iterable[str | Path]) -> list[str]:
    """The mount points ``pid`` may write through other than ``allowed`` (and ``/proc`` less ``PROC_READONLY``):
    none when the read-only view is in force. The worker checks its own view with its policy's paths; the judge
    checks the worker's from outside (``/proc/<pid>/mountinfo``), allowing its scratch folder and the device
    files the worker bound beneath ``/dev``."""
    keep = [str(a) for a in allowed]
    return [m.point for m in _visible(mounts(pid)) if "ro" not in m.options and not _beneath(m.point, keep)
            and not _proc_writable(m.point)]


def _visible(seen: list[Mount]) -> list[Mount]:
    """One mount per mount point, the one a path reaches: the last mounted there (mountinfo's order); the ones
    under it are hidden (``/dev/shm`` and ``/dev/pts`` are mounted twice on some hosts)."""
    return list({m.point: m for m in seen}.values())


def left_writable(pid: int, env: Mapping[str, str]) -> list[str]:
    """The judge's own check of a worker that claims the read-only mounts, from ``/proc/<pid>/mountinfo``: the
    mount points it can write through besides its scratch folder, a test's extra paths, the device files it bound
    beneath ``/dev`` and ``/proc`` (less ``PROC_READONLY``). ``env``: what the worker was started with."""
    seen = mounts(pid)
    if not seen:
        return [f"/ (unverified: /proc/{pid}/mountinfo unreadable)"]
    allowed = [env.get(SCRATCH_ENV, "")] + env.get(WRITABLE_ENV, "").split(os.pathsep)
    allowed = [os.path.realpath(a) for a in allowed if a]
    allowed += [m.point for m in seen if m.point.startswith("/dev/")]
    return writable_mounts(pid, allowed)


def secret_visible(pid: int) -> bool:
    """The judge's check that a worker claiming the mounts cannot read the held-out secret: its folder, where
    there is one, must be a mount point of the worker's (the empty tmpfs put there)."""
    folder = os.path.realpath(secret_path().parent)
    return os.path.isdir(folder) and folder not in {m.point for m in mounts(pid)}


def install_readonly_mounts(policy: Policy) -> str | None:
    """Where Landlock is off (a GPU worker by default) and the worker runs as root (the H200), give it a private
    mount namespace in which every file system is read-only except its scratch folder, ``policy.dev``'s device
    files and ``/proc`` (less ``PROC_READONLY``); ``/dev`` itself becomes ``nodev``, so no other device file (a
    disk) opens at all, and the held-out secret's folder (``policy.hidden``) is an empty read-only one. Without
    it a root worker without capabilities still writes every file root owns: the judge's Triton cache (the
    original's compiled kernel), the op folder, the harness's own modules and the queue's results. Needs
    CAP_SYS_ADMIN (root), so it runs before the capabilities go; seccomp then denies ``mount``/``umount2``/
    ``unshare``, so the view cannot be undone. None when in force, else why not."""
    if sys.platform != "linux":
        return f"no mount namespaces on {sys.platform}"
    libc = _libc()
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]

    def mount(source: str | None, target: str, flags: int, fstype: str | None = None, data: str | None = None) -> int:
        return int(libc.mount(source.encode() if source else None, target.encode(),
                              fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                              ctypes.c_char_p(data.encode()) if data else None))

    if libc.unshare(ctypes.c_int(_CLONE_NEWNS)) != 0:
        return _err("unshare(CLONE_NEWNS)")
    if mount("none", "/", MS_REC | MS_PRIVATE) != 0:  # nothing done here reaches the judge's namespace
        return _err("mount --make-rprivate /")
    keep = [str(p) for p in policy.writable + policy.dev if not _beneath(str(p), ["/proc"])]
    for path in keep + [p for p in PROC_READONLY if os.path.exists(p)]:
        if mount(path, path, MS_BIND) != 0:  # its own mount, so the remounts below leave it as it is
            return _err(f"bind {path}")
    for hidden in policy.hidden:  # the held-out secret's folder: an empty one in its place
        if os.path.isdir(hidden) and mount("tmpfs", str(hidden), MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                           "tmpfs", "size=4k,mode=0500") != 0:
            return _err(f"hide {hidden}")
    seen = _visible(mounts())
    if not any(m.point == "/" for m in seen):  # nothing listed would mean nothing remounted, and "all read-only"
        return "cannot list the mounts (/proc/self/mountinfo)"
    failed = []
    for m in seen:
        if _beneath(m.point, keep) or _proc_writable(m.point) or ("ro" in m.options and m.point != "/dev"):
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | (MS_NODEV if m.point == "/dev" else 0)
        flags |= sum(bit for name, bit in _KEPT_FLAGS.items() if name in m.options)
        if mount(None, m.point, flags) != 0:
            failed.append(_err(m.point))
    left = writable_mounts("self", keep)
    if failed or left:
        return "remount read-only failed: " + "; ".join(failed + [f"{p} still writable" for p in left if p])[:400]
    return None


# ------------------------------------------------------------------------------------------------- seccomp

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers, denied whole

# syscall -> (x86_64 number, arm64 number); from the kernel's unistd_64.h and asm-generic/unistd.h
_NR: dict[str, tuple[int, int]] = {
    "kill": (62, 129), "tkill": (200, 130), "tgkill": (234, 131), "rt_sigqueueinfo": (129, 138),
    "rt_tgsigqueueinfo": (297, 240), "pidfd_send_signal": (424, 424), "pidfd_getfd": (438, 438),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "process_madvise": (440, 440), "process_mrelease": (448, 448), "kcmp": (312, 272),
    "migrate_pages": (256, 238), "move_pages": (279, 239),
    "setpriority": (141, 140), "ioprio_set": (251, 30), "sched_setaffinity": (203, 122),
    "sched_setscheduler": (144, 119), "sched_setparam": (142, 118), "sched_setattr": (314, 274),
    "prlimit64": (302, 261), "setsid": (112, 157), "setpgid": (109, 154),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "unshare": (272, 97), "setns": (308, 268), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "open_by_handle_at": (304, 265),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "reboot": (169, 142),
    "swapon": (167, 224), "swapoff": (168, 225), "acct": (163, 89), "quotactl": (179, 60),
    "fanotify_init": (300, 262), "settimeofday": (164, 170), "clock_settime": (227, 112),
    "adjtimex": (159, 171), "clock_adjtime": (305, 266),
}
# denied whatever their arguments: other processes' memory and fds, signals through a pidfd, leaving the process
# group, and what no kernel candidate needs (io_uring also runs file operations outside seccomp's view)
DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "process_mrelease", "kcmp",
          "migrate_pages", "move_pages", "pidfd_send_signal", "pidfd_getfd", "setsid", "setpgid",
          "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "open_tree", "move_mount", "fsopen",
          "fsconfig", "fsmount", "fspick", "mount_setattr", "open_by_handle_at", "bpf", "perf_event_open",
          "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key",
          "request_key", "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
          "swapon", "swapoff", "acct", "quotactl", "fanotify_init", "settimeofday", "clock_settime", "adjtimex",
          "clock_adjtime")
# allowed only aimed at the worker itself: syscall -> (the pid argument's index, 0 allowed as "myself"). For
# setpriority/ioprio_set the first argument must also say "a process" (PRIO_PROCESS 0, IOPRIO_WHO_PROCESS 1):
# a group or a user would reach the judge
SELF_ONLY: dict[str, tuple[int, bool]] = {
    "kill": (0, False), "tkill": (0, False), "tgkill": (0, False), "rt_sigqueueinfo": (0, False),
    "rt_tgsigqueueinfo": (0, False), "setpriority": (1, True), "ioprio_set": (1, True),
    "sched_setaffinity": (0, True), "sched_setscheduler": (0, True), "sched_setparam": (0, True),
    "sched_setattr": (0, True), "prlimit64": (0, True),
}
_WHICH_PROCESS = {"setpriority": 0, "ioprio_set": 1}

_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_JGE_K, _BPF_RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_EPERM = 0x7FFF0000, 0x00050000 | errno.EPERM
_OFF_NR, _OFF_ARCH = 0, 4


def _arg(i: int) -> int:
    return 16 + 8 * i  # seccomp_data.args[i]; its low 32 bits first (little-endian): a pid_t or an int


def seccomp_program(pid: int, machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The BPF filter (code, jt, jf, k) for a worker of pid ``pid``: a foreign architecture and every call in
    ``DENIED`` get EPERM, a call in ``SELF_ONLY`` gets EPERM unless its pid argument is the worker's own (or 0
    where that means the caller), everything else is allowed. Each check returns on its own, so no jump is
    longer than a few instructions."""
    machine = machine or platform.machine()
    col = {"x86_64": 0, "aarch64": 1}[machine]
    prog = [(_BPF_LD_W_ABS, 0, 0, _OFF_ARCH), (_BPF_JEQ_K, 1, 0, _AUDIT_ARCH[machine]), (_BPF_RET_K, 0, 0, _RET_EPERM),
            (_BPF_LD_W_ABS, 0, 0, _OFF_NR)]
    if machine == "x86_64":
        prog += [(_BPF_JGE_K, 0, 1, _X32_SYSCALL_BIT), (_BPF_RET_K, 0, 0, _RET_EPERM)]
    for name in DENIED:
        prog += [(_BPF_JEQ_K, 0, 1, _NR[name][col]), (_BPF_RET_K, 0, 0, _RET_EPERM)]
    for name, (idx, zero_is_self) in SELF_ONLY.items():
        body: list[tuple[int, int, int, int]] = []
        if name in _WHICH_PROCESS:
            body += [(_BPF_LD_W_ABS, 0, 0, _arg(0)), (_BPF_JEQ_K, 1, 0, _WHICH_PROCESS[name]),
                     (_BPF_RET_K, 0, 0, _RET_EPERM)]
        body.append((_BPF_LD_W_ABS, 0, 0, _arg(idx)))
        if zero_is_self:
            body.append((_BPF_JEQ_K, 2, 0, 0))
        body += [(_BPF_JEQ_K, 1, 0, pid & 0xFFFFFFFF), (_BPF_RET_K, 0, 0, _RET_EPERM), (_BPF_RET_K, 0, 0, _RET_ALLOW)]
        prog.append((_BPF_JEQ_K, 0, len(body), _NR[name][col]))
        prog += body
    prog.append((_BPF_RET_K, 0, 0, _RET_ALLOW))
    return prog


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1


def install_seccomp(pid: int | None = None) -> str | None:
    """Install ``seccomp_program`` on every thread of this process (TSYNC) and on what it starts. None when in
    force, else why not."""
    machine = platform.machine()
    if sys.platform != "linux" or machine not in _AUDIT_ARCH:
        return f"seccomp filter not written for {sys.platform}/{machine}"
    prog = seccomp_program(os.getpid() if pid is None else pid, machine)
    raw = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))
    fprog = _SockFprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    libc = _libc()
    if not _no_new_privs(libc):
        return _err("prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.syscall(ctypes.c_long(_SYS_SECCOMP[machine]), ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
                    ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog)) != 0:
        return _err("seccomp(SECCOMP_SET_MODE_FILTER)")
    return None


# ------------------------------------------------------------------------------------------- capabilities

_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
_CAP_V3 = 0x20080522
KEEP_CAPS_ENV = "ASTRA_SGLANG_SANDBOX_KEEP_CAPS"  # "1": the seccomp layer leaves the worker's capabilities alone


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def capabilities(pid: int | str = "self") -> int | None:
    """The effective capability set the kernel reports for ``pid`` (``CapEff``), read by the judge as a check
    independent of what the worker says; None where ``/proc`` does not say."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return None


def drop_capabilities() -> str | None:
    """Give up every capability, for good (bounding and ambient sets too, so no program it starts regains any
    even as root). The H200 runs the harness as root: with CAP_SYS_PTRACE a worker opens the judge's
    ``/proc/<pid>/mem`` although the judge is undumpable (measured where Landlock is off), and could read the
    secret that picks which timed replay is checked. Without it the kernel's ptrace check refuses. A process
    without capabilities is what CUDA runs as for any non-root user. None when done, else why not."""
    machine = platform.machine()
    if sys.platform != "linux" or machine not in _SYS_CAPSET:
        return f"capabilities not dropped on {sys.platform}/{machine}"
    libc = _libc()
    zero = ctypes.c_ulong(0)
    for cap in range(64):  # needs CAP_SETPCAP, so before the sets below; EINVAL past the kernel's last cap
        libc.prctl(ctypes.c_int(_PR_CAPBSET_DROP), ctypes.c_ulong(cap), zero, zero, zero)
    libc.prctl(ctypes.c_int(_PR_CAP_AMBIENT), ctypes.c_ulong(_PR_CAP_AMBIENT_CLEAR_ALL), zero, zero, zero)
    header, data = _CapHeader(_CAP_V3, 0), (_CapData * 2)()
    if libc.syscall(ctypes.c_long(_SYS_CAPSET[machine]), ctypes.byref(header), ctypes.byref(data)) != 0:
        return _err("capset")
    left = capabilities()
    return None if left in (0, None) else f"capabilities left after capset: {left:#x}"


# ---------------------------------------------------------------------------------------------------- both


def _threads() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 1


LAYERS = ("landlock", "seccomp", "mounts")  # the order a level names them in
MOUNTS_NEED_ROOT = "needs root (a worker of another user writes what that user may)"


def wanted_layers(env: Mapping[str, str]) -> tuple[list[str], str]:
    """The layers to install and, where that is not Landlock's, why: what ``ASTRA_SGLANG_SANDBOX`` asks for
    ("1": landlock and seccomp; "0": none; layer names joined by "+", e.g. "seccomp+mounts"), else landlock and
    seccomp on a CPU, and seccomp with the read-only mounts on a GPU (``GPU_LANDLOCK_OFF``)."""
    asked = env.get(SANDBOX_ENV, "").strip().lower()
    if asked in ("0", "off", "no", "false", "none"):
        return [], f"switched off ({SANDBOX_ENV}={env.get(SANDBOX_ENV)})"
    names = [n.strip() for n in asked.replace(",", "+").split("+") if n.strip()]
    if names and all(n in LAYERS for n in names):
        return [n for n in LAYERS if n in names], f"switched to {asked} ({SANDBOX_ENV})"
    if not asked and env.get(DEVICE_ENV, "cpu") != "cpu":
        return ["seccomp", "mounts"], f"landlock: {GPU_LANDLOCK_OFF}"
    return ["landlock", "seccomp"], ""


def install(env: Mapping[str, str] | None = None) -> str:
    """Install what ``wanted_layers`` says and say what is in force: the layers joined by "+" ("landlock+seccomp",
    "seccomp+mounts"), "<layer> only", each followed by why a layer is missing, or "none: <why>". Never raises: a
    worker without a sandbox still runs, and says so. Order matters: Landlock and the mounts while the process has
    one thread and its capabilities (the mounts need CAP_SYS_ADMIN), then seccomp (which denies mount), then
    the capabilities go."""
    env = os.environ if env is None else env
    layers, chosen = wanted_layers(env)
    if not layers:
        return f"none: {chosen}"
    if ("landlock" in layers or "mounts" in layers) and not env.get(SCRATCH_ENV):
        return f"none: no scratch folder given ({SCRATCH_ENV} unset: not started by the judge)"
    threads = _threads()
    why: dict[str, str | None] = {}
    extra = ""
    try:
        policy = default_policy(env) if ("landlock" in layers or "mounts" in layers) else Policy()
        if "landlock" in layers:
            why["landlock"] = install_landlock(policy)
        if "mounts" in layers:
            why["mounts"] = install_readonly_mounts(policy) if os.geteuid() == 0 else MOUNTS_NEED_ROOT
        if "seccomp" in layers:
            why["seccomp"] = install_seccomp()
            # dropped with one thread yet (as Landlock): every later thread starts without any
            if why["seccomp"] is None and env.get(KEEP_CAPS_ENV) == "1":
                extra = f"capabilities kept ({KEEP_CAPS_ENV}=1)"
            elif why["seccomp"] is None and (caps := drop_capabilities()):
                extra = f"capabilities kept: {caps}"
    except Exception as e:  # noqa: BLE001 - a sandbox that cannot be made is reported, never fatal
        return f"none: {type(e).__name__}: {e}"
    on = [name for name in LAYERS if name in why and why[name] is None]
    off = "; ".join(f"{name}: {reason}" for name, reason in why.items() if reason is not None)
    if not on:
        return f"none: {off}"
    level = "+".join(on) if len(on) > 1 else f"{on[0]} only"
    notes = [n for n in (off, chosen, extra,
                         f"{threads - 1} thread(s) started before Landlock are not bound by it"
                         if "landlock" in on and threads > 1 else "") if n]
    return level + (": " + "; ".join(notes) if notes else "")


def seccomp_mode(pid: int) -> int | None:
    """The seccomp mode the kernel reports for ``pid`` (2: a filter), read by the judge from ``/proc`` as a check
    independent of what the worker says; None where ``/proc`` does not say."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Seccomp:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None
