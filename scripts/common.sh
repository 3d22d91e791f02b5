# Shared by scripts/run, scripts/test and scripts/bench (sourced, not run).
# Safe on a fresh Debian machine and in CI: no prompts, packages installed only when missing.

export DEBIAN_FRONTEND=noninteractive
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="${STRATA_JOBS:-$(nproc)}"
# The one Python virtual environment of the scripts (ensure_python_venv): safetensors for scripts/test's interop
# tests, PyTorch for scripts/bench's comparisons. The Release and sanitizer builds share it.
VENV="$ROOT/build/venv"

# Packages every build needs (iproute2: the multihost test's network namespaces, scripts/multihost; bible-kjv:
# examples/char_gpt's corpus, the King James Bible, which its `bible` command prints).
REQUIRED_PACKAGES=(build-essential cmake libeigen3-dev libdnnl-dev libgtest-dev libbenchmark-dev libopenmpi-dev openmpi-bin
  zlib1g-dev nlohmann-json3-dev dataset-fashion-mnist bible-kjv python3 python3-venv clang-format git iproute2)

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

# ensure_python_venv DIR PACKAGE...: makes DIR a Python virtual environment (python3 -m venv; Debian's
# python3-venv) and pip-installs whichever of the packages it lacks, quietly. The system Python is never
# touched. Returns non-zero, with a message, when the environment cannot be made or PyPI cannot be reached;
# call it as `ensure_python_venv ... || echo ...` so that the script goes on without the packages.
ensure_python_venv() {
  local dir="$1"; shift
  if [ ! -x "$dir/bin/python" ]; then
    local fresh=0
    [ -e "$dir" ] || fresh=1
    if ! python3 -m venv "$dir"; then
      echo "strata: python3 -m venv $dir failed" >&2
      if [ "$fresh" -eq 1 ]; then rm -rf "$dir"; fi  # a half-made environment would pass the test above
      return 1
    fi
  fi
  local pkg missing=()
  for pkg in "$@"; do
    "$dir/bin/python" -m pip show -q "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "strata: pip-installing ${missing[*]} into $dir"
    if ! "$dir/bin/python" -m pip install -q --disable-pip-version-check --retries 2 --timeout 20 "${missing[@]}"; then
      echo "strata: pip could not install ${missing[*]} into $dir (is PyPI reachable?)" >&2
      return 1
    fi
  fi
}
