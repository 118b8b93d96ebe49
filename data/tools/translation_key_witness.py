#!/usr/bin/env python3
"""Independent witness for gridkey's translation key format v1 (ADR 0003).

Encodes the fixed key inputs of crates/gridkey-fingerprint/tests/key.rs
(`the_key_of_a_fixed_input_is_pinned`) by the rules of the format and prints the key:
integers little-endian, strings as u64 length + UTF-8 bytes, tags as one byte,
hashed with xxh3_128 (seed 0), printed as 32 lowercase hex digits.
Usage: translation_key_witness.py > data/golden/translation-key-v1.txt   (needs xxhash)

With `records FILE...`, reads key-input records (the `<key>.json` files gridkey keeps beside each
translation-cache entry) and prints a JSON object of program name to the key this witness
computes from the record, which must equal the name of the record:
    translation_key_witness.py records CACHE/translation-v1/*/*.json > data/golden/icon-program-keys-v1.json
"""
import json
import os
import struct
import sys
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

def key_of_record(r):
    offsets = []
    for o in r["offsets"]:
        if o["kind"] == "dimension":
            offsets.append(dimension(o["offset"], o["name"], o["dimension_kind"]))
        else:
            offsets.append(gather(o["offset"], o["domain"], o["local"], o["codomain"], o["skip_value"],
                                  o["dtype"], o["shape"], o["digest"]))
    return key(r["key_format_version"], r["digest_format_version"], r["frontend"]["name"],
               r["frontend"]["version"], r["program"], r["program_encoding"], r["options"], offsets)

if len(sys.argv) > 1 and sys.argv[1] == "records":
    keys = {}
    for path in sys.argv[2:]:
        with open(path) as f:
            record = json.load(f)
        k = key_of_record(record)
        name = os.path.basename(path)[: -len(".json")]
        if k != name:
            sys.exit(f"{path}: the witness computes key {k}, the record is named {name}")
        keys[record["program"]] = k
    print(json.dumps(keys, indent=2, sort_keys=True))
    sys.exit(0)

print(key(1, 1, "test-frontend", "1.0.0", "div", "00ff", {}, [
    dimension("Koff", "K", "vertical"),
    gather("C2E", "Cell", "C2EDim", "Edge", None, "<i4", (20480, 3), "9bcee51d14f05d37316945fc51e952ed"),
]))
