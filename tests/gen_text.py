#!/usr/bin/python3
"""Deterministic test text: N bytes of seeded random printable characters
(uniform over 64 symbols, like base64 of random bytes), so a failing
equivalence test reproduces exactly. Usage: gen_text.py N [seed] > file"""
import random, sys
n = int(sys.argv[1])
random.seed(int(sys.argv[2]) if len(sys.argv) > 2 else 5)
sym = b'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
out = bytearray(random.choice(sym) for _ in range(n))
for i in range(76, n, 77):
    out[i] = 10
sys.stdout.buffer.write(bytes(out))
