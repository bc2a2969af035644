#!/usr/bin/env bash
# Installs the Debian packages cubist needs, if any is missing: with apt-get
# when root, otherwise prints the one command to run and stops.
set -u
pkgs=(build-essential pkg-config libopenblas-openmp-dev libdnnl-dev libopenmpi-dev openmpi-bin libmpich-dev mpich python3-torch python3-numpy bible-kjv)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && { echo "deps: all installed (${pkgs[*]})"; exit 0; }
if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 2
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null || {
    echo "deps: apt-get install ${missing[*]} failed" >&2; exit 2; }
