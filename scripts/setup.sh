#!/usr/bin/env bash
# Installs what Dendrite needs from Debian 12's packages (only what is missing).
#   scripts/setup.sh            build and run: compilers, MPI, oneDNN, SentencePiece, ...
#   scripts/setup.sh --torch    also PyTorch, to regenerate tests/data/reference and run bench/pytorch_step.py
set -euo pipefail
packages=(g++ cmake ninja-build pkg-config git openmpi-bin libopenmpi-dev libdnnl-dev
          libsentencepiece-dev libpcre2-dev libicu-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
          bible-kjv python3-matplotlib python3-numpy
          libssl-dev  # the tests' SHA-256 of exported files (tests/sha256.h)
          fortunes-min jargon-text  # canary text: experiments/memorization/make_canaries.py
          clang libclang-rt-14-dev  # clang: libFuzzer targets (scripts/fuzz.sh)
          ccache)  # rebuilds reuse compiled objects (CMakeLists.txt)
# Debian's torch uses the system BLAS; the OpenMP build of OpenBLAS shares its thread pool.
if [[ "${1:-}" == "--torch" ]]; then packages+=(python3-torch libopenblas0-openmp); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: all packages present"
