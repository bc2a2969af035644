#!/usr/bin/env bash
# Installs the Debian packages cubist needs, if any is missing: with apt-get
# when root, otherwise prints the one command to run and stops.
set -u
pkgs=(build-essential pkg-config libopenblas-openmp-dev libopenmpi-dev openmpi-bin libmpich-dev mpich python3-torch python3-numpy bible-kjv)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# NCF's data (scripts/debian_deps.py) is apt's package lists: fetch them if absent
if [ -z "$(apt-cache dumpavail 2>/dev/null | head -c 1)" ]; then
    if [ "$(id -u)" -eq 0 ]; then apt-get update -q >/dev/null || echo "deps: apt-get update failed" >&2
    else echo "deps: apt's package lists are empty (NCF's data); run: sudo apt-get update" >&2; fi
fi
[ ${#missing[@]} -eq 0 ] && { echo "deps: all installed (${pkgs[*]})"; exit 0; }
if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 2
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null || {
    echo "deps: apt-get install ${missing[*]} failed" >&2; exit 2; }
