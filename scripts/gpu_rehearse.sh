#!/usr/bin/env bash
# Rehearses scripts/gpu_check.sh here, before a GPU is lent, on a bare root
# that has what the lent machine's image has and lacks what it lacks:
#   has:   a compiler, CMake, Ninja, Python 3 with numpy, and the CUDA toolkit
#          (this machine's /usr/local/cuda, mounted read-only);
#   lacks: ssh and rsh, OpenMPI (and Debian's mpirun/mpiexec alternatives),
#          PMIx, oneDNN, SentencePiece, ICU's and PCRE2's headers, pkg-config,
#          GoogleTest, the `bible`
#          command, PyTorch, and any GPU.
# The root is a minimal Debian 12 made once with debootstrap (kept in
# $DENDRITE_BARE_ROOT, default /var/tmp/dendrite-bare-root; --fresh remakes
# it). Each run copies the working tree as the device tool sends it (tracked
# and untracked files that git does not ignore, plus .gpu-debs), runs the
# stages in a private mount namespace chrooted into the root, and fails when
# any part other than those needing a GPU failed. The build starts from
# nothing, as on a fresh lent machine, unless --keep-build.
# Where .gpu-prebuilt/ is here (scripts/gpu_prebuild.sh), it travels too, as
# it would to the lease, and the stages take its programs in place of the
# build; --no-prebuilt leaves it behind, so that the build is rehearsed.
# --wheel-libs rehearses an image whose toolkit lacks cuBLAS, CUPTI and NCCL
# (hidden by an overlay), which then come only from PyTorch's wheels: their
# layout (nvidia/cu13/{include,lib} with versioned libraries only, and
# nvidia/nccl/) made in the root's Python path from this toolkit's files.
# --no-launcher rehearses a machine where OpenMPI's launcher cannot start
# (its launch component named one that does not exist): the stages must say
# so and run the parts of one process without it.
#   scripts/gpu_rehearse.sh [--stage 1|2|both] [--fresh] [--keep-build] [--wheel-libs]
#                           [--no-prebuilt] [--no-launcher]
# Logs: $OUT or /tmp/gpu_rehearsal (one folder per stage). Needs root.
set -euo pipefail
main() {
cd "$(dirname "$0")/.."
stages=(1 2) fresh=0 keep_build=0 wheel_libs=0 prebuilt=1 no_launcher=0
while (($#)); do
  case $1 in
    --stage) case ${2:-} in 1|2) stages=("$2") ;; both) stages=(1 2) ;; *) echo "gpu_rehearse: --stage 1, 2 or both"; exit 2 ;; esac; shift ;;
    --fresh) fresh=1 ;;
    --keep-build) keep_build=1 ;;
    --wheel-libs) wheel_libs=1 ;;
    --no-prebuilt) prebuilt=0 ;;
    --no-launcher) no_launcher=1 ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "gpu_rehearse: unknown option $1 (--stage 1|2|both, --fresh, --keep-build, --wheel-libs, --no-prebuilt, --no-launcher)"; exit 2 ;;
  esac
  shift
done
[[ $(id -u) -eq 0 ]] || { echo "gpu_rehearse: needs root (debootstrap, mount, chroot)"; exit 2; }
[[ -d /usr/local/cuda/bin ]] || { echo "gpu_rehearse: no CUDA toolkit in /usr/local/cuda"; exit 2; }
root=${DENDRITE_BARE_ROOT:-/var/tmp/dendrite-bare-root}
out=${OUT:-/tmp/gpu_rehearsal}

# ---- the bare root ----
if ((fresh)) || [[ ! -f $root/.dendrite-bare-root ]]; then
  command -v debootstrap > /dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap > /dev/null
  }
  rm -rf "$root"
  echo "gpu_rehearse: making the bare root in $root (a few minutes)"
  debootstrap --variant=minbase --include=g++,make,cmake,ninja-build,python3,python3-numpy \
    bookworm "$root" > /tmp/gpu_rehearse_debootstrap.log 2>&1 \
    || { tail -20 /tmp/gpu_rehearse_debootstrap.log; echo "gpu_rehearse: debootstrap failed"; exit 1; }
  touch "$root/.dendrite-bare-root"
fi
# What the lent image lacks must be missing here too, or the rehearsal proves nothing.
for cmd in ssh rsh mpirun mpiexec mpirun.openmpi bible pkg-config pkgconf; do
  if chroot "$root" /bin/sh -c "command -v $cmd" > /dev/null 2>&1; then
    echo "gpu_rehearse: the bare root has $cmd, which the lent machine lacks: rerun with --fresh"
    exit 1
  fi
done
if chroot "$root" /bin/sh -c 'ls /usr/lib/x86_64-linux-gnu/ | grep -qE "^lib(dnnl|sentencepiece|mpi|pmix)"'; then
  echo "gpu_rehearse: the bare root has oneDNN, SentencePiece, MPI or PMIx libraries: rerun with --fresh"
  exit 1
fi
# ICU's and PCRE2's run-time libraries come with CMake (libxml2) and grep, as
# on any image with those; their headers and pkg-config files must come from
# .gpu-debs.
if chroot "$root" /bin/sh -c 'test -e /usr/include/unicode/utypes.h || test -e /usr/include/pcre2.h'; then
  echo "gpu_rehearse: the bare root has ICU's or PCRE2's headers: rerun with --fresh"
  exit 1
fi

# ---- the working tree, as the device tool sends it ----
scripts/gpu_deps.sh  # fetches what the list has and .gpu-debs lacks
repo=$root/lease/repo
((prebuilt)) && [[ ! -f .gpu-prebuilt/manifest ]] && prebuilt=0
tree() {
  git ls-files -co --exclude-standard
  find .gpu-debs -type f
  ((prebuilt)) && find .gpu-prebuilt -type f
  return 0
}
if ((keep_build)) && [[ -d $repo/build-gpu ]]; then
  # As on a warm machine: the build stays, and only the files that changed
  # are replaced.
  # shellcheck source=scripts/gpu_build.sh
  source scripts/gpu_build.sh
  tree | gpu_sync_tree "$repo"
else
  rm -rf "$repo" && mkdir -p "$repo"
  tree | tar -cf - -T - | tar -xf - -C "$repo"
fi
rm -rf "$root/tmp/dendrite-prefix"  # a fresh machine unpacks the packages again

# ---- the stages, in a private mount namespace ----
status=0
for s in "${stages[@]}"; do
  rm -rf "$out/stage$s" && mkdir -p "$out/stage$s"
  echo "gpu_rehearse: stage $s in the bare root"
  # (The commands inside read this script from standard input: the check's
  # own, mpirun among them, read /dev/null instead.)
  # Two cores here build for far longer than the lent machine's sixteen.
  DENDRITE_BUILD_TIMEOUT=${DENDRITE_BUILD_TIMEOUT:-5400} DENDRITE_STAGE_SECONDS=${DENDRITE_STAGE_SECONDS:-90000} \
    unshare -m /bin/bash -s "$root" "$s" "$wheel_libs" "$no_launcher" <<'NS' || true
set -e
root=$1 stage=$2 wheel_libs=$3 no_launcher=$4
broken=()
((no_launcher)) && broken=(OMPI_MCA_plm=no-such-launcher)
mount --make-rprivate /
mkdir -p "$root/usr/local/cuda" "$root/lease/out"
if ((wheel_libs)); then
  # The toolkit without cuBLAS, CUPTI and NCCL: an overlay whose top layer
  # holds a whiteout (a 0/0 character device) for each of their files.
  # (The folders where the files are: targets/x86_64-linux/ may hold links to them.)
  real=$(readlink -f /usr/local/cuda)
  inc=$(realpath --relative-to="$real" "$real/targets/x86_64-linux/include")
  lib=$(realpath --relative-to="$real" "$real/targets/x86_64-linux/lib")
  mkdir -p /tmp/rehearse-overlay && mount -t tmpfs tmpfs /tmp/rehearse-overlay
  top=/tmp/rehearse-overlay/top && mkdir -p "$top/$inc" "$top/$lib"
  hidden_inc=$(cd "$real/$inc" && ls -d cublas*.h nvblas.h cupti*.h generated_*_meta.h nvperf_*.h \
                 cuda_stdint.h Openacc Openmp nccl*.h nccl_device 2> /dev/null || true)
  hidden_lib=$(cd "$real/$lib" && ls -d libcublas* libnvblas* libcupti* libnvperf_* libpcsamplingutil* \
                 libcheckpoint* libnccl* 2> /dev/null || true)
  for f in $hidden_inc; do mknod "$top/$inc/$f" c 0 0; done
  for f in $hidden_lib; do mknod "$top/$lib/$f" c 0 0; done
  mount -t overlay overlay -o "ro,lowerdir=$top:$real" "$root/usr/local/cuda"
  # The wheels, as PyTorch's bring them: links to this toolkit's files.
  mkdir -p "$root/opt/wheel-files" && mount --bind "$real" "$root/opt/wheel-files"
  mount -o remount,bind,ro "$root/opt/wheel-files"
  site=$root/usr/local/lib/python3.11/dist-packages/nvidia
  mkdir -p "$site" && mount -t tmpfs tmpfs "$site"
  mkdir -p "$site/cu13/include" "$site/cu13/lib" "$site/nccl/include" "$site/nccl/lib"
  for f in $hidden_inc; do
    case $f in nccl*) to=$site/nccl/include ;; *) to=$site/cu13/include ;; esac
    ln -s "/opt/wheel-files/$inc/$f" "$to/$f"
  done
  for f in $hidden_lib; do
    # No unversioned link where a versioned library is: the wheels have none.
    [[ $f == *.so ]] && compgen -G "$real/$lib/$f.*" > /dev/null && continue
    case $f in libnccl*) to=$site/nccl/lib ;; *) to=$site/cu13/lib ;; esac
    ln -s "/opt/wheel-files/$lib/$f" "$to/$f"
  done
else
  mount --bind /usr/local/cuda "$root/usr/local/cuda"
  mount -o remount,bind,ro "$root/usr/local/cuda"
fi
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/dev/shm"
mount -t tmpfs tmpfs "$root/lease/out"
chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb \
  PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  OUT=/lease/out DENDRITE_BUILD_TIMEOUT=$DENDRITE_BUILD_TIMEOUT DENDRITE_STAGE_SECONDS=$DENDRITE_STAGE_SECONDS "${broken[@]}" /bin/bash -c "cd /lease/repo && scripts/gpu_check.sh --stage $stage" < /dev/null || true
cp -r "$root/lease/out/." "/tmp/gpu_rehearse_stage$stage.out"
NS
  if [[ -d /tmp/gpu_rehearse_stage$s.out ]]; then
    cp -r "/tmp/gpu_rehearse_stage$s.out/." "$out/stage$s/" && rm -rf "/tmp/gpu_rehearse_stage$s.out"
  fi
  summary=$out/stage$s/summary-stage$s.txt
  # The device tool brings back at most 8 files from $OUT, 16 MiB each.
  files=$(find "$out/stage$s" -type f | wc -l)
  big=$(find "$out/stage$s" -type f -size +16M | wc -l)
  if ((files > 8 || big > 0)); then
    echo "gpu_rehearse: stage $s left $files files in \$OUT ($big over 16 MiB): the device tool brings back 8 at most"
    status=1
  fi
  [[ -f $out/stage$s/logs-stage$s.tar.gz ]] && tar -xzf "$out/stage$s/logs-stage$s.tar.gz" -C "$out/stage$s"
  if [[ ! -f $summary ]] || ! grep -q "stage $s done" "$summary"; then
    echo "gpu_rehearse: stage $s did not finish; its logs are in $out/stage$s"
    status=1
  elif grep -E "FAILED|TIMED OUT" "$summary"; then
    echo "gpu_rehearse: stage $s: the parts above failed without needing a GPU; logs in $out/stage$s"
    for log in $(grep -E "FAILED|TIMED OUT" "$summary" | sed -E 's/^\[[0-9]+ s\] ([^:]+):.*/\1/'); do
      echo "---- $log.log (last lines)"
      tail -8 "$out/stage$s/$log.log" 2>/dev/null
    done
    status=1
  elif ((no_launcher)) && ! grep -q "the MPI launcher cannot start" "$summary"; then
    echo "gpu_rehearse: stage $s: the launcher was to fail (--no-launcher), and the summary does not say it did"
    status=1
  else
    echo "gpu_rehearse: stage $s passed up to the GPU ($(grep -cE '^\[[0-9]+ s\] [^ ]+: skipped \(no (GPU|compute-sanitizer)' "$summary") parts need one$(
      ((no_launcher)) && echo "; $(grep -cE '^\[[0-9]+ s\] [^ ]+: skipped \(the MPI launcher' "$summary") need the launcher"))"
    if ((prebuilt)) && ! grep -q "^build: none; the programs built before the lease" "$summary"; then
      grep "^prebuilt:" "$summary"
      echo "gpu_rehearse: stage $s built its programs, though .gpu-prebuilt/ came with the tree"
      status=1
    fi
  fi
done
exit $status
}

# Parsed whole before it runs, so that editing this file meanwhile changes nothing.
main "$@"
