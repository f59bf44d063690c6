#!/usr/bin/env bash
# Downloads (here, where Debian's mirror is reachable) the Debian 12 packages
# that a lent GPU machine lacks to build and run Dendrite: OpenMPI, oneDNN,
# SentencePiece, PCRE2's headers and ICU (tokenizer.json pipelines), OpenSSL's
# libcrypto headers (the tests' SHA-256), the
# header-only libraries, GoogleTest and pkg-config. They
# land in .gpu-debs/ (ignored by git), which the device call carries and
# scripts/gpu_check.sh unpacks into a private prefix there.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libopenmpi3 libopenmpi-dev openmpi-bin openmpi-common libpmix2 libevent-2.1-7
          libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 libltdl7 libnuma1
          libpciaccess0 libxnvctrl0 libfabric1 libucx0 libibverbs1 librdmacm1 libnl-3-200
          libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libmunge2
          libdnnl2 libdnnl-dev ocl-icd-libopencl1
          libsentencepiece0 libsentencepiece-dev libprotobuf-lite32
          libpcre2-8-0 libpcre2-dev libicu72 libicu-dev
          nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev googletest
          libssl3 libssl-dev
          pkgconf pkgconf-bin libpkgconf3 pkg-config)
mkdir -p .gpu-debs
cd .gpu-debs
# Only what is not here yet (a package added to the list above is fetched on
# the next run; the others stay).
missing=()
for p in "${packages[@]}"; do
  compgen -G "${p}_*.deb" > /dev/null || missing+=("$p")
done
((${#missing[@]} == 0)) || apt-get download "${missing[@]}" >/dev/null
echo "gpu_deps: $(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in .gpu-debs/"
