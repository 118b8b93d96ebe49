#!/usr/bin/env python3
"""Independent witness for gridkey's translation key format v1 (ADR 0003).

Encodes the fixed key inputs of crates/gridkey-fingerprint/tests/key.rs
(`the_key_of_a_fixed_input_is_pinned`) by the rules of the format and prints the key:
integers little-endian, strings as u64 length + UTF-8 bytes, tags as one byte,
hashed with xxh3_128 (seed 0), printed as 32 lowercase hex digits.
Usage: translation_key_witness.py > data/golden/translation-key-v1.txt   (needs xxhash)
"""
import struct
import xxhash

def u8(x): return struct.pack("<B", x)
def u32(x): return struct.pack("<I", x)
def u64(x): return struct.pack("<Q", x)
def i64(x): return struct.pack("<q", x)
def s(x): b = x.encode(); return u64(len(b)) + b

def dimension(offset, name, kind): return s(offset) + u8(0) + s(name) + s(kind)

def gather(offset, domain, local, codomain, skip, dtype, shape, digest):
    out = s(offset) + u8(1) + s(domain) + s(local) + s(codomain)
    out += u8(0) if skip is None else u8(1) + i64(skip)
    return out + s(dtype) + u64(2) + u64(shape[0]) + u64(shape[1]) + s(digest)

def key(key_format, digest_format, frontend, version, program, encoding_hex, options, offsets):
    out = u32(key_format) + u32(digest_format) + s(frontend) + s(version) + s(program) + s(encoding_hex)
    out += u64(len(options)) + b"".join(s(k) + s(v) for k, v in sorted(options.items()))
    out += u64(len(offsets)) + b"".join(offsets)
    return xxhash.xxh3_128(out).hexdigest()

print(key(1, 1, "test-frontend", "1.0.0", "div", "00ff", {}, [
    dimension("Koff", "K", "vertical"),
    gather("C2E", "Cell", "C2EDim", "Edge", None, "<i4", (20480, 3), "9bcee51d14f05d37316945fc51e952ed"),
]))
