#!/usr/bin/env python3
"""Independent witness for gridkey's translation key format v2 (ADR 0003, ADR 0020).

Encodes key inputs by the rules of the format and prints their keys: integers little-endian,
strings as u64 length + UTF-8 bytes, tags as one byte, hashed with xxh3_128 (seed 0), printed as
32 lowercase hex digits. Version 2 adds the frontend fingerprint after the frontend version.

Usage (needs xxhash):
  translation_key_witness.py > data/golden/translation-key-v2.txt
      the key of crates/gridkey-fingerprint/tests/key.rs `the_key_of_a_fixed_input_is_pinned`
  translation_key_witness.py --explain
      the keys "a" and "b" of data/golden/explain-v1.json (crates/gridkey/tests/explain.rs
      `the_json_form_matches_the_golden_file`), one per line
  translation_key_witness.py records [--fingerprint F] FILE...
      reads key-input records (the `<key>.json` files gridkey keeps beside each translation-cache
      entry), checks that the key this witness computes from each equals the record's name, and
      prints a JSON object of program name to key. With --fingerprint, the printed keys are those
      of the records with the frontend fingerprint replaced by F: the golden keys of the eight
      programs pin their encoding and the tables, not the translation code, whose fingerprint
      changes with every edit of it (tests/tests/golden_keys.rs):
    translation_key_witness.py records --fingerprint golden-keys CACHE/translation-v2/*/*.json \\
        > data/golden/icon-program-keys-v2.json
"""
import json
import os
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


def key(frontend, version, fingerprint, program, encoding_hex, options, offsets,
        key_format=KEY_FORMAT_VERSION, digest_format=DIGEST_FORMAT_VERSION):
    out = u32(key_format) + u32(digest_format)
    out += s(frontend) + s(version) + s(fingerprint) + s(program) + s(encoding_hex)
    out += u64(len(options)) + b"".join(s(k) + s(v) for k, v in sorted(options.items()))
    out += u64(len(offsets)) + b"".join(offsets)
    return xxhash.xxh3_128(out).hexdigest()


def key_of_record(r, fingerprint=None):
    offsets = []
    for o in r["offsets"]:
        if o["kind"] == "dimension":
            offsets.append(dimension(o["offset"], o["name"], o["dimension_kind"]))
        else:
            offsets.append(gather(o["offset"], o["domain"], o["local"], o["codomain"], o["skip_value"],
                                  o["dtype"], o["shape"], o["digest"]))
    f = r["frontend"]
    return key(f["name"], f["version"], f["fingerprint"] if fingerprint is None else fingerprint, r["program"],
               r["program_encoding"], r["options"], offsets, r["key_format_version"], r["digest_format_version"])


def records(args):
    fingerprint = None
    if args[:1] == ["--fingerprint"]:
        fingerprint, args = args[1], args[2:]
    keys = {}
    for path in args:
        with open(path) as f:
            record = json.load(f)
        k = key_of_record(record)
        name = os.path.basename(path)[: -len(".json")]
        if k != name:
            sys.exit(f"{path}: the witness computes key {k}, the record is named {name}")
        keys[record["program"]] = key_of_record(record, fingerprint)
    print(json.dumps(keys, indent=2, sort_keys=True))


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
    if sys.argv[1:2] == ["records"]:
        records(sys.argv[2:])
    elif sys.argv[1:] == ["--explain"]:
        print("\n".join(explain_pair()))
    else:
        print(pinned())
