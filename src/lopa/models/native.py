"""lopa's C kernels (models/kernels/*.c), compiled once per CPU and compiler into lopa's cache, loaded with ctypes.

Each is built with the system's C compiler for this CPU (`-march=native`) and named by a hash of its source,
the compiler and the CPU's instruction sets, so an edit, a new compiler or another machine gets a fresh
build. Kernels that use OpenMP link libgomp by its soname, which is the one torch has already loaded: they
share torch's thread pool rather than starting a second one. Without a compiler (or when a build fails)
`library()` is None, with one notice, and the caller keeps torch's own kernels.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
from functools import cache
from pathlib import Path

from .catalog import cache_root

log = logging.getLogger("lopa")
KERNELS = Path(__file__).with_name("kernels")
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-shared", "-fPIC")


def _build_id(source: Path, compiler: str) -> str:
    """What the compiled code depends on: the source, the compiler and the CPU's instruction sets."""
    flags = ""
    if Path("/proc/cpuinfo").exists():
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    identity = f"{source.read_bytes()!r}{compiler}{platform.machine()}{flags}"
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


@cache
def library(name: str) -> ctypes.CDLL | None:
    """kernels/<name>.c compiled for this CPU (built on first use), or None when it cannot be built."""
    source = KERNELS / f"{name}.c"
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.warning("lopa: no C compiler found: %s is not built, torch's kernels are used instead", source.name)
        return None
    target = cache_root() / "kernels" / f"{name}-{_build_id(source, compiler)}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        built = subprocess.run([compiler, *FLAGS, "-o", str(partial), str(source), "-lm"],
                               capture_output=True, text=True)  # fmt: skip
        if built.returncode != 0:
            log.warning("lopa: building %s failed, torch's kernels kept: %s", source.name, built.stderr.strip()[-300:])
            return None
        partial.replace(target)
    return ctypes.CDLL(str(target))
