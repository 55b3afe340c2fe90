# Sourced by the GPU-node scripts (jobs/gpu-node.sh, jobs/readme-gpu.sh): the Debian packages
# carried in $deps (default .deps; jobs/fetch-deps.sh) unpacked into a private prefix (never
# into /), and the variables that let CMake, the compilers and the loader find them. CMake
# reads CMAKE_PREFIX_PATH, CMAKE_LIBRARY_PATH and CMAKE_INCLUDE_PATH from the environment, so
# a plain `cmake -S . -B build` (the README's) configures here as written.
deps=${TESSERA_DEPS:-${deps:-.deps}}
prefix=${TMPDIR:-/tmp}/tessera-prefix
mkdir -p "$prefix"
if ls "$deps"/*.deb >/dev/null 2>&1; then
  for f in "$deps"/*.deb; do dpkg -x "$f" "$prefix"; done
fi
lib=$prefix/usr/lib/x86_64-linux-gnu
mkdir -p "$lib"
[ -e "$lib/lapack/liblapack.so.3" ] && ln -sf lapack/liblapack.so.3 "$lib/liblapack.so"
[ -e "$lib/blas/libblas.so.3" ] && ln -sf blas/libblas.so.3 "$lib/libblas.so"
sysz=$(ls /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1 2>/dev/null | head -1)
[ -n "$sysz" ] && ln -sf "$sysz" "$lib/libz.so"
# An optimized BLAS/LAPACK at run time when carried (OpenBLAS, as Debian's alternatives
# would select it): the host-side dense stages of Tucker (eigen-solves, CholeskyQR) use it.
export LD_LIBRARY_PATH=$lib/openblas-pthread:$lib:$lib/lapack:$lib/blas:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export CMAKE_LIBRARY_PATH=$lib${CMAKE_LIBRARY_PATH:+:$CMAKE_LIBRARY_PATH}
export CMAKE_INCLUDE_PATH=$prefix/usr/include${CMAKE_INCLUDE_PATH:+:$CMAKE_INCLUDE_PATH}
export CPATH=$prefix/usr/include${CPATH:+:$CPATH}
# And for a compiler's own -l (jobs/gpu-node.sh eig links the probe with -llapack).
export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
