//! The remote object format v1 (ADR 0019): pinned by an independent Python witness, and every
//! damage to an object is a reject, never a payload (proptest).

use std::collections::BTreeSet;

use gridkey_remote::ed25519_dalek::SigningKey;
use gridkey_remote::object::{decode, encode, CHECKSUM_BYTES, HEADER_BYTES, SIGNATURE_BYTES};
use gridkey_remote::{Kind, Reject, Trust};
use proptest::prelude::*;

const MAX: u64 = 1 << 20;

fn golden() -> Vec<(String, Vec<u8>)> {
    let text = include_str!("../../../data/golden/remote-object-v1.txt");
    text.lines()
        .map(|line| {
            let (name, hex) = line.split_once(' ').unwrap();
            let bytes = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
            (name.to_owned(), bytes)
        })
        .collect()
}

fn seed_key() -> SigningKey {
    let seed: [u8; 32] = std::array::from_fn(|i| i as u8 + 1);
    SigningKey::from_bytes(&seed)
}

fn trusting(keys: &[&SigningKey]) -> Trust {
    Trust::new(None, Some(keys.iter().map(|k| k.verifying_key().to_bytes()).collect::<BTreeSet<_>>()))
}

#[test]
fn the_format_is_pinned_by_an_independent_witness() {
    // data/tools/remote_object_witness.py writes data/golden/remote-object-v1.txt.
    let key: [u8; 16] = std::array::from_fn(|i| i as u8);
    let mut reversed = key;
    reversed.reverse();
    let signer = Trust::new(Some(seed_key()), None);
    let want = golden();
    assert_eq!(want[0].0, "unsigned-translation-entry");
    assert_eq!(encode(Kind::TranslationEntry, &key, b"void kernel(void) {}\n", &Trust::none()), want[0].1);
    assert_eq!(want[1].0, "signed-kernel-library");
    assert_eq!(encode(Kind::KernelLibrary, &reversed, b"\x7fELF library bytes", &signer), want[1].1);
    assert_eq!(want[1].1.len(), HEADER_BYTES + 18 + SIGNATURE_BYTES + CHECKSUM_BYTES);
    // And the witness's objects decode, the signed one for a reader that trusts its key.
    assert_eq!(
        decode(Kind::TranslationEntry, &key, &want[0].1, MAX, &Trust::none()).unwrap(),
        b"void kernel(void) {}\n"
    );
    assert_eq!(
        decode(Kind::KernelLibrary, &reversed, &want[1].1, MAX, &trusting(&[&seed_key()])).unwrap(),
        b"\x7fELF library bytes"
    );
}

#[test]
fn each_check_names_what_is_wrong() {
    let key = [3u8; 16];
    let good = encode(Kind::TranslationEntry, &key, b"payload", &Trust::none());
    let check = |bytes: &[u8], kind: Kind, max: u64, trust: &Trust| decode(kind, &key, bytes, max, trust).unwrap_err();
    let none = Trust::none();
    assert_eq!(check(&good, Kind::TranslationEntry, 10, &none), Reject::TooLarge { len: good.len() as u64, max: 10 });
    let mut future = good.clone();
    future[4] = 2;
    assert_eq!(check(&future, Kind::TranslationEntry, MAX, &none), Reject::Version { found: 2 });
    let mut longer = good.clone();
    longer.insert(HEADER_BYTES, b'x');
    assert_eq!(check(&longer, Kind::TranslationEntry, MAX, &none), Reject::Length { announced: 7, held: 8 });
    assert_eq!(
        check(&good, Kind::KernelLibrary, MAX, &none),
        Reject::Kind { expected: Kind::KernelLibrary, found: "translation entry".to_owned() }
    );
    let text = check(&good, Kind::KernelLibrary, MAX, &none).to_string();
    assert_eq!(text, "object holds a translation entry, not a kernel library");
    assert_eq!(check(&good, Kind::TranslationEntry, MAX, &trusting(&[&seed_key()])), Reject::Unsigned);
    let other = SigningKey::from_bytes(&[9u8; 32]);
    let signed = encode(Kind::TranslationEntry, &key, b"payload", &Trust::new(Some(other.clone()), None));
    assert!(matches!(check(&signed, Kind::TranslationEntry, MAX, &trusting(&[&seed_key()])), Reject::Untrusted { .. }));
    assert_eq!(
        decode(Kind::TranslationEntry, &key, &signed, MAX, &trusting(&[&seed_key(), &other])).unwrap(),
        b"payload"
    );
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::TranslationEntry), Just(Kind::KernelLibrary)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_object_decodes_under_its_key_and_kind(
        k in kind(), key in any::<[u8; 16]>(), payload in prop::collection::vec(any::<u8>(), 0..600), signed in any::<bool>()
    ) {
        let trust = if signed { Trust::new(Some(seed_key()), None) } else { Trust::none() };
        let bytes = encode(k, &key, &payload, &trust);
        prop_assert_eq!(decode(k, &key, &bytes, MAX, &Trust::none()).unwrap(), &payload[..]);
        let required = trusting(&[&seed_key()]);
        prop_assert_eq!(decode(k, &key, &bytes, MAX, &required).is_ok(), signed);
    }

    #[test]
    fn any_flipped_bit_is_rejected(
        k in kind(), key in any::<[u8; 16]>(), payload in prop::collection::vec(any::<u8>(), 0..300),
        signed in any::<bool>(), at in any::<prop::sample::Index>(), bit in 0u8..8
    ) {
        let trust = if signed { Trust::new(Some(seed_key()), None) } else { Trust::none() };
        let mut bytes = encode(k, &key, &payload, &trust);
        let i = at.index(bytes.len());
        bytes[i] ^= 1 << bit;
        prop_assert!(decode(k, &key, &bytes, MAX, &Trust::none()).is_err());
    }

    #[test]
    fn any_truncation_or_extension_is_rejected(
        k in kind(), key in any::<[u8; 16]>(), payload in prop::collection::vec(any::<u8>(), 0..300),
        cut in any::<prop::sample::Index>(), extra in prop::collection::vec(any::<u8>(), 1..40)
    ) {
        let bytes = encode(k, &key, &payload, &Trust::none());
        let short = &bytes[..cut.index(bytes.len())];
        prop_assert!(decode(k, &key, short, MAX, &Trust::none()).is_err());
        let mut long = bytes.clone();
        long.extend_from_slice(&extra);
        prop_assert!(decode(k, &key, &long, MAX, &Trust::none()).is_err());
    }

    #[test]
    fn an_object_answers_only_its_own_key(
        k in kind(), key in any::<[u8; 16]>(), other in any::<[u8; 16]>(), payload in prop::collection::vec(any::<u8>(), 0..100)
    ) {
        prop_assume!(key != other);
        let bytes = encode(k, &key, &payload, &Trust::none());
        let swapped = matches!(decode(k, &other, &bytes, MAX, &Trust::none()), Err(Reject::Key { .. }));
        prop_assert!(swapped);
    }
}

#[test]
fn the_library_key_depends_on_the_build_key_and_the_compiler_identity() {
    use gridkey_remote::library_key;
    let base = library_key("0123456789abcdef0123456789abcdef", "identity-a");
    assert_eq!(base, library_key("0123456789abcdef0123456789abcdef", "identity-a"));
    assert_ne!(base, library_key("0123456789abcdef0123456789abcdee", "identity-a"));
    assert_ne!(base, library_key("0123456789abcdef0123456789abcdef", "identity-b"));
    // Lengths are part of the key: moving a character between the two parts changes it.
    assert_ne!(library_key("ab", "c"), library_key("a", "bc"));
}
