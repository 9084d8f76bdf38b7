#!/usr/bin/env bash
# The course's commands. Each one first installs whatever is missing (Debian /
# Ubuntu packages through apt-get; matplotlib through pip, or apt-get for the
# system's own python3), then runs CMake.
#
#   bash cmake/course.sh test          configure, build, run every test that must pass (CPU, no GPU needed)
#   bash cmake/course.sh backends      the main job: every backend's error against the fp64 oracle
#   bash cmake/course.sh step 02       build YOUR skeleton of stage 02 (steps/02_*) and run its tests
#   bash cmake/course.sh step all      the same for every stage
#   bash cmake/course.sh setup         only install what is missing
#
# On a machine with an NVIDIA GPU and nvcc, add `gpu`: `test gpu`, `backends gpu`, `step 02 gpu`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# What the build needs, as Debian/Ubuntu packages. A tool counts as there when its
# command is on PATH, however it was installed.
PACKAGES=(cmake ninja-build g++ python3 libgtest-dev libgmock-dev libbenchmark-dev libboost-context-dev)
declare -A COMMAND_OF=([cmake]=cmake [ninja-build]=ninja [g++]=g++ [python3]=python3)

say() { echo "course.sh: $*"; }
die() { echo "course.sh: $*" >&2; exit 1; }

usage() {
  sed -n '2,12s/^# \{0,1\}//p' "$0"
  exit "${1:-0}"
}

# Sets SUDO to what runs a command as root: nothing when we are root, else sudo.
# Fails when neither is possible.
SUDO=()
can_be_root() {
  if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
  elif command -v sudo >/dev/null; then
    SUDO=(sudo)
  else
    return 1
  fi
}

apt_install() {
  "${SUDO[@]}" apt-get update -qq &&
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

install_packages() {
  if ! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then
    say "not Debian/Ubuntu: make sure these (or your system's equivalents) are installed: ${PACKAGES[*]}"
    return
  fi
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    [ "$flavor" = gpu ] && [ "$p" = libboost-context-dev ] && continue  # only the CPU runtime needs it
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' && continue
    [ -n "${COMMAND_OF[$p]:-}" ] && command -v "${COMMAND_OF[$p]}" >/dev/null && continue
    missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  if ! can_be_root; then
    say "missing ${missing[*]}: installing them needs root, and sudo is not there. Run this once as root,"
    say "or install them yourself. Going on: the build will say what it cannot do without them."
    return
  fi
  say "installing ${missing[*]} (apt-get)"
  apt_install "${missing[@]}" ||
    say "apt-get could not install ${missing[*]} (its message is above). Going on: the build will say what it cannot do without them."
}

has_matplotlib() {
  python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("matplotlib") is None)' 2>/dev/null
}

# The plot test needs matplotlib in the python3 that CMake finds (the first on PATH).
# It is optional: without it that one test is left out, and we say so.
install_matplotlib() {
  command -v python3 >/dev/null || return 0  # the build will say that python3 is missing
  has_matplotlib && return 0
  local stdlib
  stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')
  if [ -e "$stdlib/EXTERNALLY-MANAGED" ]; then
    # The system's own python3 (Debian 12, Ubuntu 24.04) takes packages from apt, not pip.
    if command -v apt-get >/dev/null && can_be_root; then
      say "installing python3-matplotlib (apt-get)"
      apt_install python3-matplotlib || true
    fi
  else
    say "installing matplotlib for $(command -v python3) (pip)"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check matplotlib || true
  fi
  has_matplotlib || say "matplotlib is still missing: the test that draws the plots is left out."
}

check_cmake_version() {
  local version
  command -v cmake >/dev/null || die "cmake is not installed, and it could not be installed here (see above)."
  version=$(cmake --version | sed -n '1s/^cmake version \([0-9][0-9.]*\).*/\1/p')
  if [ "$(printf '%s\n' 3.25 "$version" | sort -V | head -n1)" != 3.25 ]; then
    die "CMake $version is too old: the presets need 3.25 or newer (Debian 12 and Ubuntu 24.04" \
        "have it; elsewhere: python3 -m pip install cmake)."
  fi
}

setup() {
  install_packages
  install_matplotlib
  check_cmake_version
}

# `step 02` (or 2, or 02_fused_paged): the stage's folder name under steps/.
stage_of() {
  local arg=$1 matches
  [[ $arg =~ ^[0-9]$ ]] && arg=0$arg
  matches=(steps/"${arg:0:2}"_*/)
  [[ $arg =~ ^[0-9][0-9] && -d ${matches[0]} ]] ||
    die "no stage '$1' under steps/ (the stages: $(cd steps && echo [0-9][0-9]_* | sed 's/_[a-z_]*//g'))"
  basename "${matches[0]}"
}

# Builds the learner's skeleton of one stage (or all) and runs its tests.
run_step() {
  local which=$1 flavor=$2 stage target label
  [ -n "$which" ] || die "which stage? e.g. bash cmake/course.sh step 02"
  if [ "$which" = all ]; then
    stage=""
    target=all_steps
    label='^steps$'
  else
    stage=$(stage_of "$which")
    target=test_${stage}_steps
    label="^step${stage:0:2}\$"
  fi
  [ -f "build/$flavor/CMakeCache.txt" ] || cmake --preset "$flavor"  # the presets build in build/<flavor>
  cmake --build --preset "$flavor" --target "$target" ||
    die "${stage:+steps/$stage: }your code does not compile yet: the compiler's first error is above."
  # Two -L options select the tests that carry both labels: the skeleton's, of this stage.
  if (cd "build/$flavor" && ctest -L '^steps$' -L "$label" --output-on-failure); then
    [ -z "$stage" ] || say "steps/$stage passes its tests. The solution, to compare: diff -r steps/$stage solutions/$stage"
  else
    [ -z "$stage" ] || say "steps/$stage is not done yet: the messages above name the TODOs left, or the" \
                           "first elements that differ from the fp64 oracle. Edit, then run this again."
    exit 1
  fi
}

# The last word may name the flavor: cpu (the default) or gpu.
case "${1:-}" in
  test | backends) flavor=${2:-cpu} ;;
  step) flavor=${3:-cpu} ;;
  *) flavor=cpu ;;
esac
[[ $flavor =~ ^(cpu|gpu)$ ]] || die "unknown flavor '$flavor' (cpu or gpu)"

case "${1:-}" in
  setup) setup ;;
  test)
    setup
    cmake --workflow --preset "$flavor"
    ;;
  backends)
    setup
    if [ "$flavor" = gpu ]; then preset=backends-gpu; else preset=backends; fi
    cmake --workflow --preset "$preset"
    ;;
  step)
    setup
    run_step "${2:-}" "$flavor"
    ;;
  -h | --help | help) usage ;;
  *) usage 1 ;;
esac
