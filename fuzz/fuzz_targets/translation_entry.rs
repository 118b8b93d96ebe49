//! The translation-entry decoder on arbitrary bytes: the first 16 bytes are the key asked for,
//! the rest the entry file. Any input is an error text or a payload, never a panic; an entry
//! encoded for a key decodes to its payload under that key only.
#![no_main]

use gridkey_fingerprint::{decode_entry, encode_entry, TranslationKey};
use libfuzzer_sys::fuzz_target;

fn key(bytes: &[u8]) -> TranslationKey {
    let mut hex = String::with_capacity(32);
    for i in 0..16 {
        hex.push_str(&format!("{:02x}", bytes.get(i).copied().unwrap_or(0)));
    }
    hex.parse().unwrap()
}

fuzz_target!(|data: &[u8]| {
    let k = key(data);
    let entry = data.get(16..).unwrap_or_default();
    if let Ok(payload) = decode_entry(&k, entry) {
        assert!(payload.len() + 40 == entry.len());
        assert_eq!(encode_entry(&k, payload), entry, "a decodable entry is the encoding of its payload");
    }
    let encoded = encode_entry(&k, entry);
    assert_eq!(decode_entry(&k, &encoded), Ok(entry));
    let other = key(&[0x5a; 16]);
    if other != k {
        assert!(decode_entry(&other, &encoded).is_err(), "an entry never serves another key");
    }
});
