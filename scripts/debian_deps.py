#!/usr/bin/env python3
"""The Debian package dependency graph as implicit feedback for NCF: one
`package<TAB>dependency` line per (package, package it depends on), read
from apt's package lists through `apt-cache dumpavail` (what `apt-get
update` fetched; make deps runs it when the lists are missing).

Each binary package is a user and each package named in its Depends or
Pre-Depends an item, in the order the fields list them (the last one is
what NCF's leave-last-out evaluation holds out). Of an alternative "a | b"
the first is taken; versions and architecture qualifiers are dropped; a
package listed twice (several versions, suites) counts once; a dependency
listed twice once.

  scripts/debian_deps.py > deps.tsv                 # every package
  scripts/debian_deps.py --users 3000 > small.tsv   # the first 3000 with 2+ deps
"""
import argparse, re, subprocess, sys


def stanzas(text):
    pkg, deps = None, []
    for line in text.splitlines():
        if not line.strip():
            if pkg:
                yield pkg, deps
            pkg, deps = None, []
        elif line.startswith('Package:'):
            pkg = line.split(':', 1)[1].strip()
        elif line.startswith(('Depends:', 'Pre-Depends:')):
            deps.append(line.split(':', 1)[1])
    if pkg:
        yield pkg, deps


def names(fields):
    out = []
    for f in fields:
        for group in f.split(','):
            first = group.split('|')[0].strip()
            m = re.match(r'[A-Za-z0-9][A-Za-z0-9+.\-]*', first)
            if m and m.group(0) not in out:
                out.append(m.group(0))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--users', type=int, default=0,
                    help='stop after this many packages with two or more dependencies (0: all)')
    a = ap.parse_args()
    try:
        text = subprocess.run(['apt-cache', 'dumpavail'], check=True, capture_output=True,
                              text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f'debian_deps.py: apt-cache dumpavail failed ({e}); run apt-get update (make deps)')
    seen, users = set(), 0
    w = sys.stdout.write
    for pkg, fields in stanzas(text):
        if pkg in seen:
            continue
        seen.add(pkg)
        deps = names(fields)
        if a.users and len(deps) < 2:
            continue
        for d in deps:
            w(f'{pkg}\t{d}\n')
        users += 1
        if a.users and users >= a.users:
            break
    if not users:
        sys.exit('debian_deps.py: apt knows no packages; run apt-get update (make deps)')


if __name__ == '__main__':
    main()
