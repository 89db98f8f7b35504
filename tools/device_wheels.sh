#!/usr/bin/env bash
# The Python packages Tempo needs that the GPU machine's image lacks, as wheels for its Python
# (CPython 3.12, manylinux x86-64), into .device_wheels/ at the repository root (git ignores it):
# islpy (Tempo's scheduler) and gguf (GGUF model files), at the versions pyproject.toml pins, without
# their dependencies (the image has numpy, pyyaml, requests and tqdm). Prints the folder's size and
# the command that installs the wheels there, with no network.
#
#   tools/device_wheels.sh            # PYTHON=... to use another interpreter's pip
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/.device_wheels"
python="${PYTHON:-$root/.venv/bin/python}"
[ -x "$python" ] || python=python3

pin() {  # NAME==VERSION as pyproject.toml pins it
    grep -o "\"$1==[^\"]*\"" "$root/pyproject.toml" | head -n 1 | tr -d '"'
}

packages=("$(pin islpy)" "$(pin gguf)")
for p in "${packages[@]}"; do
    [ -n "$p" ] || { echo "device_wheels.sh: a package is not pinned in pyproject.toml" >&2; exit 1; }
done
mkdir -p "$out"
"$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$out" "${packages[@]}"
ls -1 "$out"
echo "$(du -sh "$out" | cut -f1) in $out"
echo "install there: python3 -m pip install --no-index --no-deps --target /tmp/pydeps .device_wheels/*.whl"
