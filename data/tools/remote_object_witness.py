#!/usr/bin/env python3
"""Independent witness for gridkey's remote object format v1 (ADR 0019).

Builds the two fixed objects of crates/gridkey-remote/tests/object.rs
(`the_format_is_pinned_by_an_independent_witness`) by the rules of the format and prints each
as `NAME HEX`: magic b"GKRO", version u16 LE, kind u8, flags u8 (bit 0: signed), the 16 key
bytes, payload length u64 LE, the payload, when signed the Ed25519 public key (32 bytes) and the
signature over everything before it (64 bytes), then xxh3_128 (seed 0) of everything before it
as 16 bytes little-endian.
Usage: remote_object_witness.py > data/golden/remote-object-v1.txt   (needs xxhash, cryptography)
"""
import struct

import xxhash
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat


def obj(kind, key, payload, seed=None):
    out = b"GKRO" + struct.pack("<HBB", 1, kind, 0 if seed is None else 1) + key
    out += struct.pack("<Q", len(payload)) + payload
    if seed is not None:
        private = Ed25519PrivateKey.from_private_bytes(seed)
        out += private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        out += private.sign(out)
    return out + xxhash.xxh3_128_intdigest(out).to_bytes(16, "little")


KEY = bytes(range(16))
print("unsigned-translation-entry", obj(1, KEY, b"void kernel(void) {}\n").hex())
print("signed-kernel-library", obj(2, KEY[::-1], b"\x7fELF library bytes", seed=bytes(range(1, 33))).hex())
