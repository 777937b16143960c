#!/usr/bin/env python3
"""Fetch Apple's metal-cpp headers for the Linux-side compile check of the Metal host code.

Apple's own archive (developer.apple.com, the one CMakeLists.txt pins for Apple builds) is not
reachable from every CI machine; PyPI is. MLX's `mlx-metal` wheel redistributes metal-cpp
(Apache-2.0) under mlx/include/metal_cpp, and mlx-metal 0.26.5 carries the same release as the
pinned archive ("macOS 15, iOS 18" in its README). The wheel is pinned by SHA-256; only the
headers are extracted (into .metal-cpp/, git-ignored). lmtail never ships or imports them.

    python tools/fetch_metal_cpp.py [DEST]      # default: <repo>/.metal-cpp
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "mlx_metal-0.26.5-py3-none-macosx_15_0_arm64.whl"
SHA256 = "f5bd394c7ff6eebaaf8db6d7bd4f8dec96f2d232f08ba641673ab66f22e9727b"
PREFIX = "mlx/include/metal_cpp/"
RELEASE_LINE = "| macOS 15, iOS 18 |"


def main() -> int:
    dest = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / ".metal-cpp"
    if (dest / "Metal" / "Metal.hpp").is_file():
        print(f"metal-cpp already at {dest}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             "--platform", "macosx_15_0_arm64", "mlx-metal==0.26.5", "-d", tmp],
            check=True,
        )
        wheel = Path(tmp) / WHEEL
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != SHA256:
            print(f"fetch_metal_cpp: {WHEEL} has SHA-256 {digest}, expected {SHA256}", file=sys.stderr)
            return 1
        staging = Path(tmp) / "metal-cpp"
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if not name.startswith(PREFIX) or name.endswith("/"):
                    continue
                rel = Path(name[len(PREFIX):])
                if rel.is_absolute() or ".." in rel.parts:
                    raise SystemExit(f"fetch_metal_cpp: unexpected path in wheel: {name}")
                out = staging / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(name))
        readme = (staging / "README.md").read_text(encoding="utf-8")
        if RELEASE_LINE not in readme.split("| macOS 14")[0]:
            print("fetch_metal_cpp: the wheel's metal-cpp is not the macOS 15 / iOS 18 release", file=sys.stderr)
            return 1
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            shutil.rmtree(dest)
        shutil.move(str(staging), str(dest))
    print(f"metal-cpp (macOS 15 / iOS 18) headers at {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
