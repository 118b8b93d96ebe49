#!/usr/bin/env python3
"""Independent witness for gridkey's translation key format v2 (ADR 0003, ADR 0014).

Encodes fixed key inputs by the rules of the format and prints their keys: integers
little-endian, strings as u64 length + UTF-8 bytes, tags as one byte, hashed with xxh3_128
(seed 0), printed as 32 lowercase hex digits. Version 2 adds the frontend fingerprint after
the frontend version.

Usage (needs xxhash):
  translation_key_witness.py > data/golden/translation-key-v2.txt
      the key of crates/gridkey-fingerprint/tests/key.rs `the_key_of_a_fixed_input_is_pinned`
  translation_key_witness.py --explain
      the keys "a" and "b" of data/golden/explain-v1.json (crates/gridkey/tests/explain.rs
      `the_json_form_matches_the_golden_file`), one per line
"""
import struct
import sys

import xxhash

KEY_FORMAT_VERSION = 2
DIGEST_FORMAT_VERSION = 1


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


def key(frontend, version, fingerprint, program, encoding_hex, options, offsets):
    out = u32(KEY_FORMAT_VERSION) + u32(DIGEST_FORMAT_VERSION)
    out += s(frontend) + s(version) + s(fingerprint) + s(program) + s(encoding_hex)
    out += u64(len(options)) + b"".join(s(k) + s(v) for k, v in sorted(options.items()))
    out += u64(len(offsets)) + b"".join(offsets)
    return xxhash.xxh3_128(out).hexdigest()


def pinned():
    return key("test-frontend", "1.0.0", "5e1f" * 8, "div", "00ff", {}, [
        dimension("Koff", "K", "vertical"),
        gather("C2E", "Cell", "C2EDim", "Edge", None, "<i4", (20480, 3), "9bcee51d14f05d37316945fc51e952ed"),
    ])


def explain_pair():
    def inputs(options, c2e):
        return key("gridkey-stencil", "0.1.0", "0123456789abcdef" * 2, "div", "0102", options,
                   [c2e, dimension("Koff", "K", "vertical")])
    a = inputs({}, gather("C2E", "Cell", "C2EDim", "Edge", None, "<i4", (20480, 3),
                          "9bcee51d14f05d37316945fc51e952ed"))
    b = inputs({"opt_level": "3"}, gather("C2E", "Cell", "C2EDim", "Edge", -1, "<i4", (1791, 3),
                                          "eca80d29e9c8c9e85522c42c2dcf1a50"))
    return a, b


if __name__ == "__main__":
    if sys.argv[1:] == ["--explain"]:
        print("\n".join(explain_pair()))
    else:
        print(pinned())
