# Shared by scripts/run, scripts/test and scripts/bench (sourced, not run).
# Safe on a fresh Debian machine and in CI: no prompts, packages installed only when missing.

export DEBIAN_FRONTEND=noninteractive
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="${STRATA_JOBS:-$(nproc)}"

# Packages every build needs (iproute2: the multihost test's network namespaces, scripts/multihost).
REQUIRED_PACKAGES=(build-essential cmake libeigen3-dev libdnnl-dev libgtest-dev libbenchmark-dev libopenmpi-dev openmpi-bin
  zlib1g-dev nlohmann-json3-dev dataset-fashion-mnist python3 clang-format git iproute2)

sudo_if_needed() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# missing_packages PKG...: prints the packages dpkg does not have installed.
missing_packages() {
  local pkg
  for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      echo "$pkg"
    fi
  done
}

APT_UPDATED=0
# apt_install PKG...: installs the given packages, running apt-get update once per script.
apt_install() {
  if [ "$APT_UPDATED" -eq 0 ]; then
    sudo_if_needed apt-get update -q
    APT_UPDATED=1
  fi
  sudo_if_needed apt-get install -y -q --no-install-recommends "$@"
}

# ensure_packages PKG...: installs whichever of the packages are missing.
ensure_packages() {
  if ! command -v dpkg-query >/dev/null; then
    echo "strata: not a Debian system, not checking packages ($*)" >&2
    return 0
  fi
  local missing
  mapfile -t missing < <(missing_packages "$@")
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "strata: installing ${missing[*]}"
    apt_install "${missing[@]}"
  fi
}

# configure_and_build DIR [CMAKE_ARGS...] [-- TARGETS...]: configures DIR (once, or again
# when arguments change) and builds it incrementally.
configure_and_build() {
  local dir="$1"; shift
  local args=() targets=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
  if [ $# -gt 0 ]; then shift; targets=("$@"); fi
  cmake -S "$ROOT" -B "$ROOT/$dir" "${args[@]}"
  local target_args=()
  if [ "${#targets[@]}" -gt 0 ]; then target_args=(--target "${targets[@]}"); fi
  cmake --build "$ROOT/$dir" -j"$JOBS" "${target_args[@]}"
}
