//! The key-input record decoder (the `<key>.json` beside each translation entry, read by
//! `gridkey explain`) on arbitrary bytes, and what explain does with a record: key it, diff it.
//! Any input is a serde error or a record, never a panic.
#![no_main]

use gridkey_fingerprint::{diff_inputs, KeyInputs};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(record) = serde_json::from_slice::<KeyInputs>(data) else { return };
    let key = record.key();
    assert!(diff_inputs(&record, &record).is_empty(), "a record does not differ from itself");
    let again: KeyInputs = serde_json::from_slice(&serde_json::to_vec(&record).unwrap()).unwrap();
    assert_eq!(again.key(), key, "a record read back keys alike");
    let mut other = record.clone();
    other.program.push('x');
    let changes = diff_inputs(&record, &other);
    assert!(changes.iter().any(|c| c.input == "program name"), "{changes:?}");
    for c in changes {
        let _ = c.to_string();
    }
});
