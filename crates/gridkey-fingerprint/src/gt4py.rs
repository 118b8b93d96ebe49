//! GT4Py's artifacts in gridkey's cache directory: the key of a shared GT4Py extension
//! (ADR 0040) and the store `gt4py-v1/` of GT4Py translation entries and built extensions.
//!
//! # What goes into an extension key
//!
//! [`ExtensionKeyInputs`] is the one place that lists them; [`ExtensionKeyInputs::key`] hashes
//! exactly these, in this order, with the [`KeyEncoder`] (explicit little-endian lengths):
//!
//! | input | why |
//! |---|---|
//! | [`EXTENSION_KEY_VERSION`] | a change of what is keyed must change every key |
//! | GT4Py's build folder name (entry point, fingerprint of the extension source, `BUILD_CACHE_VERSION_ID`, fingerprint of the build system) | the C++ source and how GT4Py builds it |
//! | the C++ compiler's identity (ADR 0022: executable bytes, `--version`, `-dumpmachine`) | another compiler, other code; folder names do not encode it |
//! | the Python extension suffix (`EXT_SUFFIX`: ABI tag and platform) and the platform tag | an extension built for another interpreter ABI does not load |
//! | the installed nanobind and gridtools-cpp versions | headers compiled into the extension; folder names do not encode them |
//! | the GT4Py version | the bindings and the loader that read the folder |
//!
//! Left out on purpose: the build folder's path, the cache directory, the compiler's path,
//! times and host names: identical builds at two paths or on two nodes share one key.
//!
//! # What goes into a build-folder memo key
//!
//! GT4Py names a build folder after the fingerprint of the extension source its bindings step
//! makes of a translation; [`FolderMemoInputs`] lists what that name is a function of (ADR 0058),
//! and [`FolderMemoInputs::key`] hashes exactly these, in this order:
//!
//! | input | why |
//! |---|---|
//! | [`FOLDER_MEMO_KEY_VERSION`] | a change of what is keyed must change every key |
//! | the bytes of GT4Py's translation entry (its pickle) | the program source the bindings and the name are made of |
//! | the GT4Py version | the bindings step, the fingerprinter and the naming code |
//! | `BUILD_CACHE_VERSION_ID` | part of the name, and overridable apart from the version |
//! | the fingerprint of the bindings step (its configuration) | the binding source |
//! | the build context (the fingerprint of the build system, or empty) | part of the name |
//!
//! Left out on purpose: GT4Py's key of the entry (the bytes stand for it), the cache
//! directory, the build cache's lifetime (which picks the folder's parent, not its name), paths
//! and times.
//!
//! # The store
//!
//! `<cache_dir>/gt4py-v1/<kind>/<hex[0..2]>/<hex>.bin`, each entry in the translation cache's
//! entry format ([`encode_entry`]: magic, version, key, length, payload, checksum), written with
//! [`gridkey_fs::write_atomic`]. A lookup checks all of it and removes an entry that fails, so
//! that the next build puts a good one. Beside the two kinds, `folder/` holds the build-folder
//! memo (ADR 0058): under a [`FolderMemoInputs`] key, the name of the build folder, in the same
//! entry format; it is never shared.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::{decode_entry, encode_entry, FingerprintError, KeyEncoder, Miss, TranslationKey};

/// Name of GT4Py's store under the cache directory ([`gridkey_fs::CacheBucket::Gt4py`], ADR 0043); its
/// version is [`GT4PY_STORE_VERSION`] and changes with the layout or the payload formats of its entries.
pub const GT4PY_DIR: &str = gridkey_fs::CacheBucket::Gt4py.name();

/// Version of the layout and payload formats of [`GT4PY_DIR`].
pub const GT4PY_STORE_VERSION: u32 = 1;

/// Version of the extension key's encoding, hashed first into every extension key.
pub const EXTENSION_KEY_VERSION: u32 = 1;

/// Version of the translation-entry key's encoding, hashed first into every such key.
pub const GT4PY_TRANSLATION_KEY_VERSION: u32 = 1;

/// Version of the build-folder memo key's encoding, hashed first into every such key.
pub const FOLDER_MEMO_KEY_VERSION: u32 = 1;

/// The directory of the build-folder memo under [`GT4PY_DIR`] (ADR 0058).
pub const FOLDER_MEMO_DIR: &str = "folder";

/// Magic bytes that start the payload of an extension entry (a bundle of files).
pub const BUNDLE_MAGIC: &[u8; 4] = b"GKXB";

/// The most files a bundle holds; GT4Py's loader needs two.
pub const MAX_BUNDLE_FILES: u64 = 64;

/// What a GT4Py entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Gt4pyKind {
    /// A translation entry of GT4Py's translation cache (`FileCache`): the pickled result.
    Translation,
    /// A built extension: the files GT4Py's loader needs from a build folder ([`encode_bundle`]).
    Extension,
}

impl Gt4pyKind {
    /// Both kinds.
    pub const ALL: [Gt4pyKind; 2] = [Gt4pyKind::Translation, Gt4pyKind::Extension];

    /// The kind named `translation` or `extension` (the names of [`Self::dir`]), if `name` is one.
    pub fn from_name(name: &str) -> Option<Gt4pyKind> {
        Gt4pyKind::ALL.into_iter().find(|k| k.dir() == name)
    }

    /// The shared tier's object kind of entries of this kind (ADR 0041).
    pub fn object_kind(self) -> crate::shared::Kind {
        match self {
            Gt4pyKind::Translation => crate::shared::Kind::Gt4pyTranslation,
            Gt4pyKind::Extension => crate::shared::Kind::Gt4pyExtension,
        }
    }

    /// The directory of this kind under [`GT4PY_DIR`]: `translation` or `extension`.
    pub fn dir(self) -> &'static str {
        match self {
            Gt4pyKind::Translation => "translation",
            Gt4pyKind::Extension => "extension",
        }
    }
}

/// Every input of a GT4Py extension key (ADR 0040), as the Python edge collects them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtensionKeyInputs {
    /// GT4Py's build folder name (last path component only): entry point, extension-source
    /// fingerprint, build-cache version id and build-system fingerprint.
    pub build_folder: String,
    /// The C++ compiler's identity, 32 hex digits (`gridkey_stencil::compiler_identity`).
    pub compiler_identity: String,
    /// The interpreter's extension suffix, e.g. `.cpython-312-x86_64-linux-gnu.so`.
    pub ext_suffix: String,
    /// The platform tag, e.g. `linux-x86_64`.
    pub platform: String,
    /// The installed nanobind version.
    pub nanobind_version: String,
    /// The installed gridtools-cpp version.
    pub gridtools_cpp_version: String,
    /// The GT4Py version.
    pub gt4py_version: String,
}

impl ExtensionKeyInputs {
    /// The extension key: xxh3_128 over [`EXTENSION_KEY_VERSION`] and every field, in order.
    pub fn key(&self) -> TranslationKey {
        // Destructured, so that a field added and not encoded does not compile.
        let Self {
            build_folder,
            compiler_identity,
            ext_suffix,
            platform,
            nanobind_version,
            gridtools_cpp_version,
            gt4py_version,
        } = self;
        let mut e = KeyEncoder::default();
        e.str("gridkey gt4py extension");
        e.u32(EXTENSION_KEY_VERSION);
        for field in [
            build_folder,
            compiler_identity,
            ext_suffix,
            platform,
            nanobind_version,
            gridtools_cpp_version,
            gt4py_version,
        ] {
            e.str(field);
        }
        e.finish()
    }
}

/// The key of a GT4Py translation entry: xxh3_128 over [`GT4PY_TRANSLATION_KEY_VERSION`], the
/// GT4Py version, the translation cache's name (`gtfn`) and GT4Py's own key of the entry
/// (`content_hash` of the step and compilable fingerprints, no path).
pub fn translation_entry_key(gt4py_version: &str, cache_name: &str, gt4py_key: &str) -> TranslationKey {
    let mut e = KeyEncoder::default();
    e.str("gridkey gt4py translation");
    e.u32(GT4PY_TRANSLATION_KEY_VERSION);
    e.str(gt4py_version);
    e.str(cache_name);
    e.str(gt4py_key);
    e.finish()
}

/// Every input of a build-folder memo key (ADR 0058): what GT4Py's name of the build folder of
/// a translation entry is a function of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FolderMemoInputs<'a> {
    /// The bytes of GT4Py's translation entry (the pickled program source).
    pub translation_entry: &'a [u8],
    /// The GT4Py version.
    pub gt4py_version: &'a str,
    /// GT4Py's `config.BUILD_CACHE_VERSION_ID`.
    pub build_cache_version_id: &'a str,
    /// GT4Py's strict fingerprint of the workflow's bindings step.
    pub bindings_fingerprint: &'a str,
    /// The build context GT4Py's compilation step names folders with (the fingerprint of its
    /// build system, or empty).
    pub build_context_id: &'a str,
}

impl FolderMemoInputs<'_> {
    /// The memo key: xxh3_128 over [`FOLDER_MEMO_KEY_VERSION`] and every field, in order.
    pub fn key(&self) -> TranslationKey {
        // Destructured, so that a field added and not encoded does not compile.
        let Self { translation_entry, gt4py_version, build_cache_version_id, bindings_fingerprint, build_context_id } =
            self;
        let mut e = KeyEncoder::default();
        e.str("gridkey gt4py build folder");
        e.u32(FOLDER_MEMO_KEY_VERSION);
        e.bytes(translation_entry);
        for field in [gt4py_version, build_cache_version_id, bindings_fingerprint, build_context_id] {
            e.str(field);
        }
        e.finish()
    }
}

/// The bytes of the entry file `path`, its use recorded for `cache gc` ([`gridkey_fs::touch`]):
/// [`Miss::Absent`] when there is none, [`Miss::Invalid`] naming it when it cannot be read.
fn read_entry(path: &Path) -> Result<Vec<u8>, Miss> {
    let read = fs::File::open(path).and_then(|mut f| {
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut f, &mut bytes)?;
        gridkey_fs::touch(&f);
        Ok(bytes)
    });
    match read {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Miss::Absent),
        Err(e) => Err(Miss::Invalid(format!("{}: {e}", path.display()))),
    }
}

/// Whether `name` can be a build folder's name: one plain path component, no separator.
fn is_folder_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// The bytes of a bundle of `files` (relative path, bytes): [`BUNDLE_MAGIC`], the file count
/// (u64 LE), then per file its path and its bytes, each as a u64 LE length and the bytes.
pub fn encode_bundle(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = BUNDLE_MAGIC.to_vec();
    out.extend_from_slice(&(files.len() as u64).to_le_bytes());
    for (name, bytes) in files {
        for part in [name.as_bytes(), bytes.as_slice()] {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part);
        }
    }
    out
}

/// The files of a bundle from [`encode_bundle`], checked: magic, count, lengths, nothing left
/// over, every path relative and without `..` (a bundle never writes outside its folder).
///
/// Errors: a text saying what is wrong.
pub fn decode_bundle(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut rest = bytes.strip_prefix(BUNDLE_MAGIC.as_slice()).ok_or("not an extension bundle (bad magic)")?;
    let mut take = |n: u64| -> Result<&[u8], String> {
        let n = usize::try_from(n).ok().filter(|&n| n <= rest.len()).ok_or("bundle is truncated")?;
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let u64_of = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0xff; 8]));
    let count = u64_of(take(8)?);
    if count > MAX_BUNDLE_FILES {
        return Err(format!("bundle announces {count} files, more than {MAX_BUNDLE_FILES}"));
    }
    let mut files = Vec::new();
    for _ in 0..count {
        let len = u64_of(take(8)?);
        let name = String::from_utf8(take(len)?.to_vec()).map_err(|_| "bundle holds a path that is not UTF-8")?;
        let path = Path::new(&name);
        if name.is_empty() || !path.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(format!("bundle holds the path {name:?}, which is not relative to its folder"));
        }
        let len = u64_of(take(8)?);
        files.push((name, take(len)?.to_vec()));
    }
    if !rest.is_empty() {
        return Err(format!("bundle has {} bytes after its last file", rest.len()));
    }
    Ok(files)
}

/// GT4Py's store in a cache directory: `<cache_dir>/gt4py-v1`.
#[derive(Clone, Debug)]
pub struct Gt4pyStore {
    dir: PathBuf,
}

impl Gt4pyStore {
    /// Opens (creating if needed) `<cache_dir>/gt4py-v1`.
    ///
    /// Errors: [`FingerprintError::Directory`].
    pub fn open(cache_dir: &Path) -> Result<Self, FingerprintError> {
        let dir = cache_dir.join(GT4PY_DIR);
        gridkey_fs::create_private_dir_all(&dir)
            .map_err(|source| FingerprintError::Directory { path: dir.clone(), source })?;
        Ok(Self { dir })
    }

    /// The store `<cache_dir>/gt4py-v1` as it is, for the cache commands that only read it
    /// (`cache push`, `cache retract`): nothing is created, and a missing directory is a store
    /// without entries.
    pub fn open_existing(cache_dir: &Path) -> Self {
        Self { dir: cache_dir.join(GT4PY_DIR) }
    }

    /// Every key of `kind` with an entry in the store, sorted (unchecked: [`Self::get`] checks).
    pub fn keys(&self, kind: Gt4pyKind) -> Vec<TranslationKey> {
        crate::keys_under(&self.dir.join(kind.dir()), ".bin")
    }

    /// The store directory, `<cache_dir>/gt4py-v1`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the entry of `kind` under `key`: `<dir>/<kind>/<hex[0..2]>/<hex>.bin`.
    pub fn entry_path(&self, kind: Gt4pyKind, key: &TranslationKey) -> PathBuf {
        let hex = key.to_hex();
        self.dir.join(kind.dir()).join(&hex[..2]).join(format!("{hex}.bin"))
    }

    /// The checked payload of `kind` under `key`, or why there is none. An entry that cannot be
    /// read or fails a check (truncated, corrupted, another key, another format) is removed and
    /// reported as [`Miss::Invalid`] naming its path; an extension's payload is also checked as a
    /// bundle ([`decode_bundle`]).
    pub fn get(&self, kind: Gt4pyKind, key: &TranslationKey) -> Result<Vec<u8>, Miss> {
        let path = self.entry_path(kind, key);
        let bytes = read_entry(&path)?;
        let checked = decode_entry(key, &bytes).map_err(|e| e.to_string()).and_then(|payload| match kind {
            Gt4pyKind::Extension => decode_bundle(payload).map(|_| payload),
            Gt4pyKind::Translation => Ok(payload),
        });
        match checked {
            Ok(payload) => Ok(payload.to_vec()),
            Err(why) => {
                let _ = fs::remove_file(&path);
                Err(Miss::Invalid(format!("{}: {why}; removed, the next build stores it again", path.display())))
            }
        }
    }

    /// The path and the bytes of the entry of `kind` under `key` holding `payload` (the entry
    /// format of [`encode_entry`]), for a caller that writes it in a batch with other files
    /// ([`gridkey_fs::write_atomic_all`], ADR 0049) instead of with [`Self::put`].
    pub fn entry(&self, kind: Gt4pyKind, key: &TranslationKey, payload: &[u8]) -> (PathBuf, Vec<u8>) {
        (self.entry_path(kind, key), encode_entry(key, payload))
    }

    /// Stores `payload` of `kind` under `key`, atomically ([`gridkey_fs::write_atomic`]);
    /// returns the entry's path. A concurrent writer of the same key writes the same bytes.
    ///
    /// Errors: [`FingerprintError::Write`] (nothing is left behind).
    pub fn put(&self, kind: Gt4pyKind, key: &TranslationKey, payload: &[u8]) -> Result<PathBuf, FingerprintError> {
        let (path, entry) = self.entry(kind, key, payload);
        gridkey_fs::write_atomic(&path, None, |out| out.write_all(&entry))
            .map_err(|source| FingerprintError::Write { path: path.clone(), source })?;
        Ok(path)
    }

    /// Removes the entry of `kind` under `key`, best effort.
    pub fn remove(&self, kind: Gt4pyKind, key: &TranslationKey) {
        let _ = fs::remove_file(self.entry_path(kind, key));
    }

    /// Path of the memo entry under `key`: `<dir>/folder/<hex[0..2]>/<hex>.bin` (ADR 0058).
    pub fn folder_path(&self, key: &TranslationKey) -> PathBuf {
        let hex = key.to_hex();
        self.dir.join(FOLDER_MEMO_DIR).join(&hex[..2]).join(format!("{hex}.bin"))
    }

    /// The build folder's name the memo holds under `key` (a [`FolderMemoInputs`] key), or why
    /// there is none. An entry that cannot be read, fails the entry checks or does not hold one
    /// plain path component is removed and reported as [`Miss::Invalid`] naming its path.
    pub fn get_folder(&self, key: &TranslationKey) -> Result<String, Miss> {
        let path = self.folder_path(key);
        let bytes = read_entry(&path)?;
        let checked = decode_entry(key, &bytes).map_err(|e| e.to_string()).and_then(|payload| {
            std::str::from_utf8(payload)
                .ok()
                .filter(|name| is_folder_name(name))
                .map(str::to_owned)
                .ok_or_else(|| "it does not name a build folder".to_owned())
        });
        checked.map_err(|why| {
            let _ = fs::remove_file(&path);
            Miss::Invalid(format!("{}: {why}; removed, the next warm start writes it again", path.display()))
        })
    }

    /// The path and the bytes of the memo entry naming the build folder `name` under `key`, for
    /// a caller that writes it behind ([`gridkey_fs::write_atomic_all`]).
    ///
    /// Errors: a text saying that `name` is not one plain path component.
    pub fn folder_entry(&self, key: &TranslationKey, name: &str) -> Result<(PathBuf, Vec<u8>), String> {
        if !is_folder_name(name) {
            return Err(format!("{name:?} is not the name of a build folder (one path component)"));
        }
        Ok((self.folder_path(key), encode_entry(key, name.as_bytes())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> ExtensionKeyInputs {
        ExtensionKeyInputs {
            build_folder: "copy_pyext_abc_1.2.3_def".into(),
            compiler_identity: "0".repeat(32),
            ext_suffix: ".cpython-312-x86_64-linux-gnu.so".into(),
            platform: "linux-x86_64".into(),
            nanobind_version: "3.1.0".into(),
            gridtools_cpp_version: "2.3.9".into(),
            gt4py_version: "1.2.3".into(),
        }
    }

    #[test]
    fn every_extension_key_input_changes_the_key() {
        let base = inputs().key();
        let edits: [fn(&mut ExtensionKeyInputs); 7] = [
            |i| i.build_folder.push('x'),
            |i| i.compiler_identity = "1".repeat(32),
            |i| i.ext_suffix = ".cpython-313-x86_64-linux-gnu.so".into(),
            |i| i.platform = "linux-aarch64".into(),
            |i| i.nanobind_version = "2.0.0".into(),
            |i| i.gridtools_cpp_version = "2.3.8".into(),
            |i| i.gt4py_version = "1.2.1".into(),
        ];
        for (n, edit) in edits.iter().enumerate() {
            let mut i = inputs();
            edit(&mut i);
            assert_ne!(i.key(), base, "input {n} does not enter the key");
        }
        // Field boundaries are length-prefixed: moving a byte between fields changes the key.
        let mut i = inputs();
        i.nanobind_version = "3.1.02".into();
        i.gridtools_cpp_version = ".3.9".into();
        assert_ne!(i.key(), base);
    }

    fn memo_inputs(entry: &[u8]) -> FolderMemoInputs<'_> {
        FolderMemoInputs {
            translation_entry: entry,
            gt4py_version: "1.2.3",
            build_cache_version_id: "1.2.3",
            bindings_fingerprint: "a1cdb15d6ef7a102",
            build_context_id: "ec706241d2ee7462",
        }
    }

    #[test]
    fn every_folder_memo_key_input_changes_the_key() {
        let entry = b"a pickled program source".to_vec();
        let base = memo_inputs(&entry).key();
        assert_eq!(memo_inputs(&entry.clone()).key(), base, "the key depends on more than its inputs");
        let mut other = entry.clone();
        other[3] ^= 1;
        assert_ne!(memo_inputs(&other).key(), base, "the entry's bytes do not enter the key");
        let edits: [fn(&mut FolderMemoInputs<'_>); 4] = [
            |i| i.gt4py_version = "1.2.1",
            |i| i.build_cache_version_id = "site-2",
            |i| i.bindings_fingerprint = "0000000000000000",
            |i| i.build_context_id = "",
        ];
        for (n, edit) in edits.iter().enumerate() {
            let mut i = memo_inputs(&entry);
            edit(&mut i);
            assert_ne!(i.key(), base, "input {n} does not enter the key");
        }
        // Field boundaries are length-prefixed: moving a byte between fields changes the key.
        let mut i = memo_inputs(&entry);
        i.gt4py_version = "1.2.31";
        i.build_cache_version_id = ".2.3";
        assert_ne!(i.key(), base);
    }

    #[test]
    fn a_folder_memo_round_trips_and_a_bad_one_is_a_miss_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Gt4pyStore::open(dir.path()).unwrap();
        let key = memo_inputs(b"entry").key();
        assert_eq!(store.get_folder(&key), Err(Miss::Absent));
        let name = "div_abc_1.2.3_ec706241d2ee7462";
        let (path, bytes) = store.folder_entry(&key, name).unwrap();
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, &bytes).unwrap();
        assert_eq!(store.get_folder(&key).unwrap(), name);
        // Stored under another key: refused, as a truncated or flipped entry.
        let other = memo_inputs(b"another entry").key();
        for bad in [bytes[..bytes.len() - 1].to_vec(), store.folder_entry(&other, name).unwrap().1, {
            let mut b = bytes.clone();
            b[35] ^= 1;
            b
        }] {
            fs::write(&path, &bad).unwrap();
            assert!(matches!(store.get_folder(&key), Err(Miss::Invalid(_))));
            assert!(!path.exists(), "a bad memo entry was left in place");
        }
        // A checked entry that names a path, not a folder, is refused too.
        for bad in ["../x", "a/b", "", ".."] {
            assert!(store.folder_entry(&key, bad).is_err(), "{bad:?} was taken for a folder name");
            fs::write(&path, encode_entry(&key, bad.as_bytes())).unwrap();
            assert!(matches!(store.get_folder(&key), Err(Miss::Invalid(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_bundle_round_trips_and_refuses_paths_outside_its_folder() {
        let files = vec![("gt4py.json".to_owned(), b"{}".to_vec()), ("build/bin/m.so".to_owned(), vec![1, 2, 3])];
        assert_eq!(decode_bundle(&encode_bundle(&files)).unwrap(), files);
        for bad in ["../x", "/etc/x", "a/../../x", ""] {
            let err = decode_bundle(&encode_bundle(&[(bad.to_owned(), vec![])])).unwrap_err();
            assert!(err.contains("not relative"), "{bad}: {err}");
        }
        let bytes = encode_bundle(&files);
        for cut in 0..bytes.len() {
            assert!(decode_bundle(&bytes[..cut]).is_err(), "a bundle cut at {cut} bytes was accepted");
        }
    }

    #[test]
    fn a_corrupted_or_truncated_entry_is_a_miss_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Gt4pyStore::open(dir.path()).unwrap();
        let key = inputs().key();
        let payload = encode_bundle(&[("gt4py.json".to_owned(), b"{}".to_vec())]);
        let path = store.put(Gt4pyKind::Extension, &key, &payload).unwrap();
        assert_eq!(store.get(Gt4pyKind::Extension, &key).unwrap(), payload);
        assert_eq!(store.get(Gt4pyKind::Translation, &key), Err(Miss::Absent));
        let good = fs::read(&path).unwrap();
        for bad in [good[..good.len() - 1].to_vec(), {
            let mut b = good.clone();
            b[40] ^= 1;
            b
        }] {
            let _ = fs::remove_file(&path);
            fs::write(&path, &bad).unwrap();
            assert!(matches!(store.get(Gt4pyKind::Extension, &key), Err(Miss::Invalid(_))));
            assert!(!path.exists(), "a bad entry was left in place");
        }
    }
}
