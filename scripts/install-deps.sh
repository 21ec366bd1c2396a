#!/usr/bin/env bash
# Installs the Debian 12 packages moert needs to build, test and run (only what is missing).
set -euo pipefail

packages=(
  g++ cmake ninja-build make pkg-config ccache
  openmpi-bin libopenmpi-dev libucx-dev ucx-utils
  libboost-program-options-dev libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
  libpcre2-dev libutf8proc-dev
  slurm-wlm munge jq gnuplot-nox clang-14 libclang-rt-14-dev
  iproute2 util-linux   # scripts/cluster.sh: ip, tc (iproute2); nsenter, unshare, taskset, flock
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
echo "install-deps: installing ${missing[*]}" >&2
"${sudo_cmd[@]}" apt-get update -q
# --no-install-recommends keeps slurm-wlm from pulling ~30 plugin packages.
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
