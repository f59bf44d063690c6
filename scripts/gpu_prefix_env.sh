# Sourced by scripts/gpu_check.sh: the environment that builds and runs
# Dendrite against Debian packages unpacked into a prefix (dpkg-deb -x), on a
# machine that has none of them installed: OpenMPI, PMIx, oneDNN,
# SentencePiece and the header-only libraries.
#   source scripts/gpu_prefix_env.sh PREFIX
# shellcheck shell=bash
# What a plain unpack leaves broken, and the setting that mends it:
#  - OpenMPI finds its own files (help texts, MCA components, wrapper data)
#    under its configure-time prefix /usr: OPAL_PREFIX moves it;
#  - PMIx, a library of its own, loads its components from a path compiled
#    into it that OPAL_PREFIX does not move: PMIX_MCA_mca_base_component_path;
#  - the launcher looks for ssh or rsh even for processes on this host, and
#    refuses to start without one on some images: its rsh agent is set to a
#    command that exists (nothing is launched remotely on one machine);
#  - Debian's generic names (mpirun, mpiexec, mpicxx) are alternatives links
#    that the packages do not hold: callers use mpirun.openmpi and
#    mpicxx.openmpi by path.
prefix_root=${1:?usage: source scripts/gpu_prefix_env.sh PREFIX}
prefix_lib=$prefix_root/usr/lib/x86_64-linux-gnu
export OPAL_PREFIX=$prefix_root/usr
export PATH=$prefix_root/usr/bin:$PATH
export CPATH=$prefix_root/usr/include${CPATH:+:$CPATH}
# Some packages (libnl-3-200, which OpenMPI's netlink component loads) still
# ship their libraries under /lib rather than /usr/lib.
export LD_LIBRARY_PATH=$prefix_lib:$prefix_lib/openmpi/lib:$prefix_root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_SYSROOT_DIR=$prefix_root
export PKG_CONFIG_LIBDIR=$prefix_lib/pkgconfig:$prefix_root/usr/share/pkgconfig
export PMIX_MCA_mca_base_component_path=$prefix_lib/pmix2/lib/pmix
export OMPI_MCA_plm_rsh_agent=${OMPI_MCA_plm_rsh_agent:-false}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# No InfiniBand on a one-GPU machine: skip NCCL's probe for it.
export NCCL_IB_DISABLE=1
# OpenMPI's shared-memory transport keeps its segments in /dev/shm; where an
# image has none, or a small one (a container's 64 MB), they go to /tmp.
shm_mb=$(df -Pm /dev/shm 2>/dev/null | awk 'NR == 2 {print $4}')
if [[ ! -w /dev/shm || ${shm_mb:-0} -lt 1024 ]]; then
  export OMPI_MCA_btl_vader_backing_directory=/tmp
  # shellcheck disable=SC2034  # read by gpu_check.sh, which sources this
  shm_note="/dev/shm has ${shm_mb:-no} MB free: OpenMPI's shared memory goes to /tmp"
fi
unset shm_mb
unset prefix_lib prefix_root
