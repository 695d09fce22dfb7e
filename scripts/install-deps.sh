#!/usr/bin/env bash
# install-deps.sh - install the Debian/Ubuntu packages mpinccl needs to build
# and test, only those not installed yet (checked with dpkg -s), so that it
# costs nothing when all are there.  Uses sudo when not root.  The CUDA
# toolkit is not a Debian package here: configure looks for it in
# /usr/local/cuda (or --with-cuda=DIR).
set -euo pipefail

packages=(build-essential autoconf automake libtool pkg-config
          libopenmpi-dev openmpi-bin libucx-dev ucx-utils libhwloc-dev
          check libsubunit-dev valgrind iproute2 util-linux git python3)

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} = 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: missing ${missing[*]}, and no apt-get to install them" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "install-deps: missing ${missing[*]}; run as root or install sudo" >&2
    exit 1
  fi
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
