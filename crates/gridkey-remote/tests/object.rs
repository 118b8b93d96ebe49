//! The remote object format v1 (ADR 0019): pinned by an independent Python witness, and every
//! damage to an object is a reject, never a payload (proptest).

use std::collections::BTreeSet;

use gridkey_remote::ed25519_dalek::SigningKey;
use gridkey_remote::object::{decode, encode, CHECKSUM_BYTES, HEADER_BYTES, SIGNATURE_BYTES};
use gridkey_remote::{Kind, Reject, RemoteTrust, Trust};
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
    Trust::new(
        None,
        Some(keys.iter().map(|k| k.verifying_key().to_bytes()).collect::<BTreeSet<_>>()),
        RemoteTrust::Signed,
    )
}

#[test]
fn the_format_is_pinned_by_an_independent_witness() {
    // data/tools/remote_object_witness.py writes data/golden/remote-object-v1.txt.
    let key: [u8; 16] = std::array::from_fn(|i| i as u8);
    let mut reversed = key;
    reversed.reverse();
    let signer = Trust::new(Some(seed_key()), None, RemoteTrust::Acl);
    let want = golden();
    assert_eq!(want[0].0, "unsigned-translation-entry");
    assert_eq!(encode(Kind::TranslationEntry, &key, b"void kernel(void) {}\n", &Trust::acl()), want[0].1);
    assert_eq!(want[1].0, "signed-kernel-library");
    assert_eq!(encode(Kind::KernelLibrary, &reversed, b"\x7fELF library bytes", &signer), want[1].1);
    assert_eq!(want[1].1.len(), HEADER_BYTES + 18 + SIGNATURE_BYTES + CHECKSUM_BYTES);
    // And the witness's objects decode, the signed one for a reader that trusts its key.
    assert_eq!(
        decode(Kind::TranslationEntry, &key, &want[0].1, MAX, &Trust::acl()).unwrap(),
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
    let good = encode(Kind::TranslationEntry, &key, b"payload", &Trust::acl());
    let check = |bytes: &[u8], kind: Kind, max: u64, trust: &Trust| decode(kind, &key, bytes, max, trust).unwrap_err();
    let none = Trust::acl();
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
    let signed =
        encode(Kind::TranslationEntry, &key, b"payload", &Trust::new(Some(other.clone()), None, RemoteTrust::Acl));
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
        let trust = if signed { Trust::new(Some(seed_key()), None, RemoteTrust::Acl) } else { Trust::acl() };
        let bytes = encode(k, &key, &payload, &trust);
        prop_assert_eq!(decode(k, &key, &bytes, MAX, &Trust::acl()).unwrap(), &payload[..]);
        let required = trusting(&[&seed_key()]);
        prop_assert_eq!(decode(k, &key, &bytes, MAX, &required).is_ok(), signed);
    }

    #[test]
    fn any_flipped_bit_is_rejected(
        k in kind(), key in any::<[u8; 16]>(), payload in prop::collection::vec(any::<u8>(), 0..300),
        signed in any::<bool>(), at in any::<prop::sample::Index>(), bit in 0u8..8
    ) {
        let trust = if signed { Trust::new(Some(seed_key()), None, RemoteTrust::Acl) } else { Trust::acl() };
        let mut bytes = encode(k, &key, &payload, &trust);
        let i = at.index(bytes.len());
        bytes[i] ^= 1 << bit;
        prop_assert!(decode(k, &key, &bytes, MAX, &Trust::acl()).is_err());
    }

    #[test]
    fn any_truncation_or_extension_is_rejected(
        k in kind(), key in any::<[u8; 16]>(), payload in prop::collection::vec(any::<u8>(), 0..300),
        cut in any::<prop::sample::Index>(), extra in prop::collection::vec(any::<u8>(), 1..40)
    ) {
        let bytes = encode(k, &key, &payload, &Trust::acl());
        let short = &bytes[..cut.index(bytes.len())];
        prop_assert!(decode(k, &key, short, MAX, &Trust::acl()).is_err());
        let mut long = bytes.clone();
        long.extend_from_slice(&extra);
        prop_assert!(decode(k, &key, &long, MAX, &Trust::acl()).is_err());
    }

    #[test]
    fn an_object_answers_only_its_own_key(
        k in kind(), key in any::<[u8; 16]>(), other in any::<[u8; 16]>(), payload in prop::collection::vec(any::<u8>(), 0..100)
    ) {
        prop_assume!(key != other);
        let bytes = encode(k, &key, &payload, &Trust::acl());
        let swapped = matches!(decode(k, &other, &bytes, MAX, &Trust::acl()), Err(Reject::Key { .. }));
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

/// `bytes` with the header byte range `at` overwritten by `with` and the checksum recomputed:
/// what a forger who can write to Redis makes of a signed object to replay it elsewhere.
fn relabelled(bytes: &[u8], at: usize, with: &[u8]) -> Vec<u8> {
    let mut out = bytes[..bytes.len() - CHECKSUM_BYTES].to_vec();
    out[at..at + with.len()].copy_from_slice(with);
    let check = xxhash_rust::xxh3::xxh3_128(&out).to_le_bytes();
    out.extend_from_slice(&check);
    out
}

#[test]
fn a_signed_object_replayed_under_another_key_or_kind_is_rejected() {
    // The signature covers the header (version, kind, key, length): an object signed for one
    // key and kind checks for nothing else, copied as it is or relabelled (ADR 0031).
    let (key, other) = ([9u8; 16], [10u8; 16]);
    let writer = Trust::new(Some(seed_key()), None, RemoteTrust::Signed);
    let reader = trusting(&[&seed_key()]);
    let signed = encode(Kind::KernelLibrary, &key, b"\x7fELF library", &writer);
    assert_eq!(decode(Kind::KernelLibrary, &key, &signed, MAX, &reader).unwrap(), b"\x7fELF library");
    // Copied under another key, or asked for as another kind.
    assert!(matches!(decode(Kind::KernelLibrary, &other, &signed, MAX, &reader), Err(Reject::Key { .. })));
    assert!(matches!(decode(Kind::TranslationEntry, &key, &signed, MAX, &reader), Err(Reject::Kind { .. })));
    // Relabelled to answer another key or kind, checksum recomputed: the signature fails.
    let moved = relabelled(&signed, 8, &other);
    assert!(matches!(decode(Kind::KernelLibrary, &other, &moved, MAX, &reader), Err(Reject::Signature { .. })));
    let rekinded = relabelled(&signed, 6, &[Kind::TranslationEntry.code()]);
    assert!(matches!(decode(Kind::TranslationEntry, &key, &rekinded, MAX, &reader), Err(Reject::Signature { .. })));
    // Even a reader that trusts the ACL verifies what is signed.
    assert!(matches!(decode(Kind::KernelLibrary, &other, &moved, MAX, &Trust::acl()), Err(Reject::Signature { .. })));
}

#[test]
fn a_reader_without_trusted_keys_takes_nothing_unless_it_trusts_the_acl() {
    let key = [11u8; 16];
    let unsigned = encode(Kind::TranslationEntry, &key, b"int planted;", &Trust::acl());
    let signed =
        encode(Kind::TranslationEntry, &key, b"int signed;", &Trust::new(Some(seed_key()), None, RemoteTrust::Signed));
    for bytes in [&unsigned, &signed] {
        assert_eq!(decode(Kind::TranslationEntry, &key, bytes, MAX, &Trust::nothing()), Err(Reject::NotTrusted));
        assert_eq!(
            decode(Kind::TranslationEntry, &key, bytes, MAX, &Trust::new(None, None, RemoteTrust::Signed)),
            Err(Reject::NotTrusted)
        );
        assert!(decode(Kind::TranslationEntry, &key, bytes, MAX, &Trust::acl()).is_ok());
    }
    // The default trust is the one that takes nothing.
    assert!(!Trust::default().accepts_any());
    assert_eq!(decode(Kind::TranslationEntry, &key, &unsigned, MAX, &Trust::default()), Err(Reject::NotTrusted));
}

/// The signatures of one round trip are verified as one batch (`verify_signatures`): a forged
/// object among good ones fails alone, and so does one "signed" by a weak key (the identity
/// point, with R the identity and s zero, which the cofactorless equation of a plain or batch
/// check accepts for any message, and `verify_strict` refuses), also for a reader that trusts
/// the ACL and so no key in particular.
#[test]
fn a_round_trip_s_signatures_are_verified_as_one_batch_and_a_forgery_fails_alone() {
    use gridkey_remote::object::{decode_unverified, verify_signatures};
    let writer = Trust::new(Some(seed_key()), None, RemoteTrust::Signed);
    let keys: Vec<[u8; 16]> = (0..10u8).map(|i| [i; 16]).collect();
    let mut objects: Vec<Vec<u8>> =
        keys.iter().map(|k| encode(Kind::TranslationEntry, k, format!("int v{};", k[0]).as_bytes(), &writer)).collect();
    // Object 8: its payload changed, checksum recomputed (a forgery without the key).
    objects[8] = relabelled(&objects[8], HEADER_BYTES, b"X");
    // Object 9: signer the identity point, R the identity, s zero.
    let trailer = objects[9].len() - CHECKSUM_BYTES - SIGNATURE_BYTES;
    let mut weak = [0u8; SIGNATURE_BYTES];
    weak[0] = 1;
    weak[32] = 1;
    objects[9] = relabelled(&objects[9], trailer, &weak);
    for reader in [trusting(&[&seed_key()]), Trust::acl()] {
        let unverified: Vec<_> = keys
            .iter()
            .zip(&objects)
            .filter_map(|(k, o)| decode_unverified(Kind::TranslationEntry, k, o, MAX, &reader).ok())
            .collect();
        if unverified.len() == 9 {
            // The trusting reader refuses the weak signer before any signature is checked.
            let verdicts = verify_signatures(&unverified.iter().map(|u| u.signature().unwrap()).collect::<Vec<_>>());
            assert_eq!(verdicts, [vec![true; 8], vec![false]].concat());
            continue;
        }
        assert_eq!(unverified.len(), 10);
        let checks: Vec<_> = unverified.iter().map(|u| u.signature().unwrap()).collect();
        assert_eq!(verify_signatures(&checks), [vec![true; 8], vec![false, false]].concat());
        // Every good one alone, and all good ones together, verify.
        assert_eq!(verify_signatures(&checks[..8]), vec![true; 8]);
        assert_eq!(verify_signatures(&checks[3..4]), vec![true]);
        // The weak one among good ones only: the batch must not take it.
        let with_weak: Vec<_> = checks[..8].iter().chain(&checks[9..]).copied().collect();
        assert_eq!(verify_signatures(&with_weak), [vec![true; 8], vec![false]].concat());
        assert_eq!(verify_signatures(&checks[9..]), vec![false]);
        // A signed object is taken only once its signature verified.
        let first = decode_unverified(Kind::TranslationEntry, &keys[0], &objects[0], MAX, &reader).unwrap();
        assert!(matches!(first.checked(None), Err(Reject::Signature { .. })));
        // `decode` says the same, object by object.
        for (i, (k, o)) in keys.iter().zip(&objects).enumerate() {
            let got = decode(Kind::TranslationEntry, k, o, MAX, &reader);
            assert_eq!(got.is_ok(), i < 8, "object {i}: {got:?}");
            if i >= 8 {
                assert!(matches!(got, Err(Reject::Signature { .. })), "object {i}: {got:?}");
            }
        }
    }
}
