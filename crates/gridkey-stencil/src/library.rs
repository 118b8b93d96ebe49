//! The build cache's library format: the linker's shared object followed by a trailer that
//! names its build key and checksums its bytes (ADR 0023).
//!
//! `build-v2/<key>.so` = the ELF bytes, then [`TRAILER_BYTES`] bytes: [`TRAILER_MAGIC`] (8), the
//! 16 bytes of the build key, the ELF length as u64 LE, and xxh3_128 of the ELF bytes as u128 LE.
//! The dynamic loader ignores bytes past the last segment, so the file is still a library; the
//! trailer is checked before every load, so a library altered on disk (same size, still a valid
//! ELF) is a miss and is built again, never loaded.

use xxhash_rust::xxh3::xxh3_128;

/// Magic bytes that start the trailer (format 1).
pub const TRAILER_MAGIC: &[u8; 8] = b"GKSOSUM1";

/// Length of the trailer in bytes.
pub const TRAILER_BYTES: usize = 8 + 16 + 8 + 16;

/// The trailer to append to `elf` stored under the build key `key` (32 hex digits).
pub(crate) fn trailer(key: &str, elf: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(TRAILER_BYTES);
    out.extend_from_slice(TRAILER_MAGIC);
    out.extend_from_slice(&key_bytes(key).unwrap_or([0; 16]));
    out.extend_from_slice(&(elf.len() as u64).to_le_bytes());
    out.extend_from_slice(&xxh3_128(elf).to_le_bytes());
    out
}

/// The ELF bytes of a library file `bytes` stored under the build key `key`, once its trailer
/// says so and its checksum matches; otherwise what is wrong.
pub(crate) fn checked_elf<'a>(key: &str, bytes: &'a [u8]) -> Result<&'a [u8], String> {
    let Some(at) = bytes.len().checked_sub(TRAILER_BYTES) else {
        return Err(format!("{} bytes, too short for a build-cache library", bytes.len()));
    };
    let (elf, t) = bytes.split_at(at);
    if &t[..8] != TRAILER_MAGIC {
        return Err("no build-cache checksum trailer (not written by this gridkey, or altered)".to_owned());
    }
    if Some(<[u8; 16]>::try_from(&t[8..24]).expect("16 bytes")) != key_bytes(key) {
        return Err(format!("its trailer names another build key than {key} (a library moved under this name)"));
    }
    let len = u64::from_le_bytes(t[24..32].try_into().expect("8 bytes"));
    if len != elf.len() as u64 {
        return Err(format!("its trailer announces {len} library bytes, the file holds {}", elf.len()));
    }
    if xxh3_128(elf).to_le_bytes() != t[32..48] {
        return Err("checksum mismatch: the library was altered after it was built".to_owned());
    }
    Ok(elf)
}

/// The 16 bytes of a 32-hex-digit key, `None` for any other text.
fn key_bytes(key: &str) -> Option<[u8; 16]> {
    u128::from_str_radix(key, 16).ok().filter(|_| key.len() == 32).map(u128::to_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_sealed_library_checks_and_every_alteration_is_refused() {
        let elf = b"\x7fELF pretend library bytes".to_vec();
        let mut file = elf.clone();
        file.extend(trailer(KEY, &elf));
        assert_eq!(checked_elf(KEY, &file), Ok(elf.as_slice()));
        for i in 0..file.len() {
            let mut bad = file.clone();
            bad[i] ^= 0x20;
            assert!(checked_elf(KEY, &bad).is_err(), "byte {i} flipped");
        }
        assert!(checked_elf("fedcba9876543210fedcba9876543210", &file).is_err(), "another key");
        assert!(checked_elf(KEY, &file[..file.len() - 1]).is_err(), "truncated");
        assert!(checked_elf(KEY, &elf).is_err(), "no trailer");
    }
}
