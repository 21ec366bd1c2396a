# Sourced by the scripts: where the build goes and how MPI runs on these machines.
MOERT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOERT_BUILD_DIR="${MOERT_BUILD_DIR:-$MOERT_ROOT/build}"
# nvcc lives outside PATH on a stock CUDA install; CMake finds it through PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
# ccache accepts precompiled headers (MOERT_PCH) only with these relaxations.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
# Paths under the checkout hash as relative ones, so a second clone (a clean-clone CI check)
# reuses what the first compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$MOERT_ROOT}"
# Open MPI as root, more ranks than cores, and idle ranks that yield instead of spinning.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
