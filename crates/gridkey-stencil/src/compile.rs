//! The compile step: translation key, translation cache, translation, build cache.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use gridkey_fingerprint::{
    translate_cached, CacheProtocolError, Request, SiteCache, Tiers, TranslationCache, TranslationKey,
    TranslationOptions,
};
use gridkey_fs::lock::{Acquired, KeyLocks, LockWait};
use gridkey_fs::Fault;
use gridkey_offsets::CompileTimeOffsetProvider;
use gridkey_settings::{IdentifiedCompiler, TaskSettings};
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use crate::{check_options, key_inputs, translate, Program, StencilError};

/// Version of the build cache layout and key; part of its directory name, [`BUILD_DIR`].
pub const BUILD_FORMAT_VERSION: u32 = 2;

/// Name of the build cache directory under the cache directory.
pub const BUILD_DIR: &str = gridkey_fs::CacheBucket::Build.name();

/// Flags every build gets besides the optimisation level.
const SHARED_FLAGS: [&str; 2] = ["-shared", "-fPIC"];

/// Bytes of compiler stderr kept in [`StencilError::Compiler`].
const STDERR_TAIL: usize = 2000;

/// How [`compile`] runs: what it takes from the typed settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileConfig {
    /// The cache directory: translation cache in `translation-v2/`, shared libraries in
    /// [`BUILD_DIR`].
    pub cache_dir: PathBuf,
    /// A read-only site cache of the same layout, looked up after `cache_dir` for translation
    /// entries and kernel libraries and never written (ADR 0036); `None`: none.
    pub site_cache: Option<PathBuf>,
    /// Whether a miss takes the per-key locks of `cache_dir` (ADR 0025); off when `cache_dir`
    /// is private to one run, which nobody else uses (ADR 0036).
    pub key_locks: bool,
    /// The C compiler, resolved and identified in the parent: its command words, the
    /// environment it runs with (nothing else reaches it), its absolute path and its identity,
    /// which the build key holds (ADR 0022, ADR 0032).
    pub compiler: IdentifiedCompiler,
    /// Debug switch: on a translation-cache hit, translate again and compare byte for byte;
    /// a difference is [`StencilError::VerifyMismatch`].
    pub verify_hits: bool,
    /// Debug switch: recompute the digest of every compile-time table before translating, in
    /// every mode; a changed table is [`StencilError::TableChanged`].
    pub verify_tables: bool,
    /// The fault matrix's hook (ADR 0012), passed to every write of the translation cache and
    /// the build cache; `None` in normal use.
    pub fault: Option<Fault>,
    /// The bound of every per-key lock wait, translation and build, and who is told of a wait
    /// that lasts (ADR 0033); from [`TaskSettings::key_lock_wait`].
    pub lock_wait: LockWait,
}

impl CompileConfig {
    /// The cache directory, compiler, both verification switches, the fault hook and the lock
    /// wait bound of a task's `settings` (ADR 0032, ADR 0033; no notice: the caller sets
    /// [`LockWait::notice`]).
    ///
    /// Errors: [`StencilError::FaultHook`] when the fault hook does not parse.
    pub fn from_settings(settings: &TaskSettings) -> Result<Self, StencilError> {
        Ok(Self {
            cache_dir: settings.cache_dir().to_path_buf(),
            site_cache: settings.site_cache().map(Path::to_path_buf),
            key_locks: !settings.private_cache(),
            compiler: settings.compiler().clone(),
            verify_hits: settings.verify_cache_hits(),
            verify_tables: settings.verify_tables(),
            fault: Fault::parse_setting(settings.fault())?,
            lock_wait: LockWait { limit: settings.key_lock_wait(), notice: None },
        })
    }
}

/// What [`compile`] did for one program. Crosses the worker protocol, hence serde.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompileOutcome {
    /// The program's name.
    pub program: String,
    /// The translation key (serialised as 32 hex digits).
    #[serde(with = "key_hex")]
    pub key: TranslationKey,
    /// `true`: translation-cache miss, translated here; `false`: hit.
    pub translated: bool,
    /// Seconds spent on the translation-cache lookup and, on a miss (or with `verify_hits`),
    /// translating.
    pub translate_seconds: f64,
    /// `true`: the C compiler ran; `false`: build-cache hit.
    pub built: bool,
    /// Seconds spent on the build-cache lookup and building.
    pub build_seconds: f64,
    /// Of `translate_seconds`: seconds spent computing the key inputs (options normalised,
    /// program fingerprint, the digests and facts of the tables).
    pub key_seconds: f64,
    /// Of `translate_seconds`: seconds spent in the cache protocol other than translating and
    /// locking: hashing the key inputs into the key, and looking the key up in the translation
    /// cache (both lookups on a miss: before and under the key's lock).
    pub lookup_seconds: f64,
    /// Seconds spent taking the per-key locks (translation and build, waiting included, ADR
    /// 0025); zero on a warm compile, which takes none.
    pub lock_seconds: f64,
    /// Of `build_seconds`: seconds spent checking the stored library (checksum trailer and load
    /// as this program's kernel, ADR 0023), both checks on a miss.
    pub library_check_seconds: f64,
    /// The shared library, `<cache_dir>/build-v2/<hex>.so`, or the site cache's
    /// `<site_cache>/build-v2/<hex>.so` when only it had a usable one (ADR 0036).
    pub artifact: PathBuf,
    /// On a translation-cache miss, why the entry was not usable.
    pub miss_reason: Option<String>,
    /// Per-key locks that could not be had (held past the bound of the wait, or not lockable):
    /// the work was done without them (ADR 0033).
    #[serde(default)]
    pub warnings: Vec<LockWarning>,
}

/// A per-key lock [`compile`] went on without (ADR 0033).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockWarning {
    /// The lock file, `<cache>/locks/<name>.lock`.
    pub path: PathBuf,
    /// Which key, how long it waited, and what to do, one sentence without a final period.
    pub message: String,
}

mod key_hex {
    use gridkey_fingerprint::TranslationKey;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(key: &TranslationKey, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&key.to_hex())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<TranslationKey, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Compiles `program` against the compile-time offset provider:
///
/// 1. key inputs = [`key_inputs`]`(program, options, provider)` (options normalised, ADR 0021);
/// 2. the cache protocol, [`translate_cached`], over the local tier `<cache_dir>/translation-v2`:
///    a hit is the C source; a miss (absent, or unreadable, corrupt, not UTF-8) translates with
///    [`translate`] and stores the source with its key-input record;
/// 3. build cache: `<cache_dir>/build-v2/<`[`build_key`]`>.so`, used when its checksum
///    trailer matches its bytes and it loads as this program's kernel; otherwise the compiler
///    `cc -O<level> -shared -fPIC -o kernel.so kernel.c` runs in a temporary directory of
///    `build-v2`, and the library with its checksum trailer (ADR 0023) is written atomically
///    (temp file, sync, rename), so no partial library is ever visible under a final name.
///
/// Errors: [`check_options`] and [`translate`] errors; [`StencilError::Cache`] when the
/// translation cache cannot be written; [`StencilError::VerifyMismatch`];
/// [`StencilError::Io`] for the build cache; [`StencilError::Compiler`] when the compiler is
/// missing or fails (nothing is left in `build-v2`).
pub fn compile(
    program: &Program,
    provider: &CompileTimeOffsetProvider,
    options: &TranslationOptions,
    config: &CompileConfig,
) -> Result<CompileOutcome, StencilError> {
    let opts = check_options(options)?;
    if config.verify_tables {
        for (offset, entry) in provider.entries() {
            if let gridkey_offsets::Entry::Gather(c) = entry {
                c.verify().map_err(|source| StencilError::TableChanged {
                    program: program.name().to_owned(),
                    offset: offset.clone(),
                    source,
                })?;
            }
        }
    }
    let started = Instant::now();
    let inputs = key_inputs(program, options, provider)?;
    let key_seconds = started.elapsed().as_secs_f64();
    let options = &inputs.options;
    let mut tiers =
        Tiers::new(vec![Box::new(TranslationCache::open(&config.cache_dir)?.with_fault(config.fault.clone()))]);
    if let Some(site) = &config.site_cache {
        tiers.push(Box::new(SiteCache::open(site)));
    }
    if config.key_locks {
        tiers = tiers.with_locks(KeyLocks::new(&config.cache_dir).with_wait(config.lock_wait));
    }
    let accept = |payload: &[u8]| {
        std::str::from_utf8(payload).map(|_| ()).map_err(|e| format!("entry is not UTF-8 C source: {e}"))
    };
    let request = Request { inputs: &inputs, verify_hits: config.verify_hits, accept: &accept };
    // Every table the translation read must still hold what its digest (the key) names once the
    // translation is done: a table changed in place in the window fails this task and is never
    // cached under the original key. One digest per table, on a miss only.
    let translating = std::cell::Cell::new(0.0);
    let translate_checked = || {
        let t = Instant::now();
        let source = translate(program, provider, options);
        // Checked whether or not the translation succeeded: a table changed in the window may be
        // what made it fail (an index out of range), and that is the table's failure, not the
        // program's (ADR 0054).
        let checked = check_tables_read(program, provider).and(source);
        translating.set(translating.get() + t.elapsed().as_secs_f64());
        Ok::<_, StencilError>(checked?.into_bytes())
    };
    let looking = Instant::now();
    let cached = translate_cached(&tiers, &request, translate_checked).map_err(|e| match e {
        CacheProtocolError::Translate(e) => e,
        CacheProtocolError::Put(e) => StencilError::Cache(e),
        CacheProtocolError::VerifyMismatch { key, first_difference, .. } => {
            StencilError::VerifyMismatch { program: program.name().to_owned(), key, first_difference }
        }
    })?;
    let mut lock_seconds = cached.lock_time.as_secs_f64();
    let lookup_seconds = (looking.elapsed().as_secs_f64() - translating.get() - lock_seconds).max(0.0);
    let key = cached.key;
    let miss_reason = cached.miss_reason;
    let mut warnings: Vec<LockWarning> =
        cached.unlocked.into_iter().map(|(path, message)| LockWarning { path, message }).collect();
    let source = String::from_utf8(cached.payload).expect("accepted as UTF-8");
    let translate_seconds = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut library_check_seconds = 0.0;
    let mut checked = |usable: fn(&Path, &Program) -> bool, artifact: &Path| {
        let t = Instant::now();
        let usable = usable(artifact, program);
        library_check_seconds += t.elapsed().as_secs_f64();
        usable
    };
    let flags = build_flags(&opts);
    let dir = config.cache_dir.join(BUILD_DIR);
    let library_key = build_key(&source, config.compiler.identity(), &flags);
    let mut artifact = dir.join(format!("{library_key}.so"));
    // A site cache's library is checked as the local one is, and served in place; one that does
    // not check is left there (nobody here can repair it) and built into the local cache.
    let site_artifact = config.site_cache.as_ref().map(|site| site.join(BUILD_DIR).join(format!("{library_key}.so")));
    let built = if checked(library_usable, &artifact) {
        false
    } else if let Some(site) = site_artifact.filter(|site| checked(site_library_usable, site)) {
        artifact = site;
        false
    } else {
        // One build per key across processes (ADR 0025): a concurrent build of this key is
        // waited for and its library used. Without locks (a file system that has none) every
        // process builds, as before.
        let locking = Instant::now();
        let locks = KeyLocks::new(&config.cache_dir).with_wait(config.lock_wait);
        let name = format!("build-{library_key}");
        // A cache private to this run (ADR 0036) takes no lock: nobody else uses it.
        let held = if !config.key_locks {
            None
        } else {
            match locks.lock(&name) {
                Ok((Acquired::Held(held), _)) => Some(held),
                Ok((Acquired::GaveUp { path }, waited)) => {
                    let message = format!(
                        "lock of build key {library_key} held by another process (stopped or slow) for {:.1} s, the \
                     longest wait; built without it: if this repeats, find the holder (`fuser` on the lock file) \
                     or raise the lock wait",
                        waited.as_secs_f64()
                    );
                    warnings.push(LockWarning { path, message });
                    None
                }
                // Without locks (a file system that has none) every process builds, as before.
                Err(e) if gridkey_fs::lock::is_no_locks(&e) => None,
                Err(e) => {
                    let message = format!(
                        "cannot take the lock of build key {library_key} ({e}); built without it: remove what is in \
                     the lock file's place"
                    );
                    warnings.push(LockWarning { path: locks.path(&name), message });
                    None
                }
            }
        };
        lock_seconds += locking.elapsed().as_secs_f64();
        if held.is_some() && checked(library_usable, &artifact) {
            false
        } else {
            build(program.name(), &config.compiler, &flags, &source, &artifact, &library_key, config.fault.as_ref())?;
            true
        }
    };
    Ok(CompileOutcome {
        program: program.name().to_owned(),
        key,
        translated: miss_reason.is_some(),
        translate_seconds,
        built,
        build_seconds: started.elapsed().as_secs_f64(),
        key_seconds,
        lookup_seconds,
        lock_seconds,
        library_check_seconds,
        artifact,
        miss_reason,
        warnings,
    })
}

/// The compiler flags of a build with `opts`: the optimisation level, then `-shared -fPIC`.
fn build_flags(opts: &crate::StencilOptions) -> Vec<String> {
    let mut flags = opts.cflags();
    flags.extend(SHARED_FLAGS.iter().map(|f| (*f).to_owned()));
    flags
}

/// The build key ([`build_key`]) of the library that [`compile`] builds from `source` with
/// `options` and `compiler`: what names it in `<cache_dir>/build-v2/<build key>.so`, with the
/// identity `compiler` carries ([`crate::identify_compiler`]).
///
/// Errors: [`check_options`] errors.
pub fn library_build_key(
    source: &str,
    options: &TranslationOptions,
    compiler: &IdentifiedCompiler,
) -> Result<String, StencilError> {
    let opts = check_options(options)?;
    Ok(build_key(source, compiler.identity(), &build_flags(&opts)))
}

/// Recomputes the digest of every compile-time table `program` reads and compares it with the
/// digest the key was computed from (ADR 0024).
///
/// Errors: [`StencilError::TableChanged`] naming the program, the offset and the file.
fn check_tables_read(program: &Program, provider: &CompileTimeOffsetProvider) -> Result<(), StencilError> {
    for offset in program.offsets() {
        if let Some(c) = provider.gather(&offset) {
            c.verify().map_err(|source| StencilError::TableChanged {
                program: program.name().to_owned(),
                offset: offset.clone(),
                source,
            })?;
        }
    }
    Ok(())
}

/// The build-cache key of a library: xxh3_128 (32 hex digits) over [`BUILD_FORMAT_VERSION`],
/// the C source, the compiler's identity ([`crate::compiler_identity`]: its command words,
/// executable, version and target) and the flags, each length-prefixed (u64 LE) (ADR 0022).
///
/// Left out on purpose: every path (the compiler's, the cache directory's): identical compilers
/// at different paths share builds.
pub fn build_key(source: &str, compiler_identity: &str, flags: &[String]) -> String {
    let mut h = Xxh3::new();
    let mut bytes = |b: &[u8]| {
        h.update(&(b.len() as u64).to_le_bytes());
        h.update(b);
    };
    bytes(b"gridkey-stencil build");
    bytes(&BUILD_FORMAT_VERSION.to_le_bytes());
    bytes(source.as_bytes());
    bytes(compiler_identity.as_bytes());
    bytes(&(flags.len() as u64).to_le_bytes());
    for flag in flags {
        bytes(flag.as_bytes());
    }
    format!("{:032x}", h.digest128())
}

/// Name of the lock file in a build's private directory: locked exclusively while the compiler
/// runs, so that `gridkey cache gc` leaves the directory alone (ADR 0009).
const BUILD_DIR_LOCK: &str = gridkey_fs::TEMP_DIR_LOCK;

/// Runs the compiler in a private temp directory of the build cache (fixed file names
/// `kernel.c` and `kernel.so`, so the library's bytes depend only on the source, the compiler
/// and the flags), appends the checksum trailer and writes the result to `artifact` atomically.
fn build(
    program: &str,
    compiler: &IdentifiedCompiler,
    flags: &[String],
    source: &str,
    artifact: &Path,
    key: &str,
    fault: Option<&Fault>,
) -> Result<(), StencilError> {
    let dir = artifact.parent().unwrap_or(Path::new("."));
    let io_err = |action, path: &Path| {
        let program = program.to_owned();
        let path = path.to_path_buf();
        move |source| StencilError::Io { program, action, path, source }
    };
    let compiler_err = |status, stderr_tail| StencilError::Compiler {
        cc: compiler.command_line(),
        program: program.to_owned(),
        status,
        stderr_tail,
    };
    let pre_args = compiler.command().get(1..).unwrap_or_default();
    // The program resolved in the parent, so that every mode runs the same compiler whatever
    // the worker's own PATH.
    let exe = compiler.program();
    gridkey_fs::create_private_dir_all(dir).map_err(io_err("create", dir))?;
    // Everything the compiler reads and writes lives in a temp directory of the build cache, so
    // that a build killed in the middle (Ctrl-C, a timeout) leaves nothing outside the cache
    // and `gridkey cache gc` removes it once its lock is free and it is old enough.
    let work = tempfile::Builder::new()
        .prefix(gridkey_fs::TEMP_PREFIX)
        .tempdir_in(dir)
        .map_err(io_err("create a temp directory in", dir))?;
    let lock_path = work.path().join(BUILD_DIR_LOCK);
    let lock = fs::File::create(&lock_path).map_err(io_err("create", &lock_path))?;
    gridkey_fs::lock::lock_exclusive(&lock).map_err(io_err("lock", &lock_path))?;
    let src = work.path().join("kernel.c");
    fs::write(&src, source).map_err(io_err("write", &src))?;
    let out = work.path().join("kernel.so");
    let run = Command::new(exe)
        .env_clear()
        .envs(compiler.env())
        .args(pre_args)
        .args(flags)
        .args(["-o", "kernel.so", "kernel.c"])
        .current_dir(work.path())
        .stdin(std::process::Stdio::null())
        .output();
    let output = match run {
        Ok(output) => output,
        Err(e) => return Err(compiler_err(None, format!("cannot run {}: {e}", exe.display()))),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stderr_tail = tail(stderr.trim_end(), STDERR_TAIL).to_owned();
        if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&output.status) {
            return Err(StencilError::CompilerKilled {
                cc: compiler.command_line(),
                program: program.to_owned(),
                signal,
                stderr_tail,
            });
        }
        return Err(compiler_err(output.status.code(), stderr_tail));
    }
    let elf = match fs::read(&out) {
        Ok(bytes) if !bytes.is_empty() => bytes,
        Ok(_) | Err(_) => {
            return Err(compiler_err(
                output.status.code(),
                "the compiler exited successfully but wrote no library".to_owned(),
            ))
        }
    };
    let trailer = crate::library::trailer(key, &elf);
    // Temp file, sync, rename: no partial library is ever visible under the final name. A
    // concurrent build of the same key renames the same bytes over it: harmless.
    gridkey_fs::write_atomic(artifact, fault, |w| {
        w.write_all(&elf)?;
        w.write_all(&trailer)
    })
    .map_err(io_err("write", artifact))?;
    Ok(())
}

/// Whether the library in the build cache at `artifact` can be reused for `program`: a regular
/// file whose checksum trailer matches its bytes (ADR 0023), that loads and says it was built
/// for this program. Anything else under the name (an altered, truncated or foreign library, a
/// symlink) is removed so that it is built again; a directory is left for the rename to report.
fn library_usable(artifact: &Path, program: &Program) -> bool {
    match fs::symlink_metadata(artifact) {
        Ok(meta) if meta.is_file() => {
            if crate::Kernel::load(artifact, program).is_ok() {
                return true;
            }
            let _ = gridkey_fs::remove_if_unlocked(artifact);
            false
        }
        Ok(meta) if !meta.is_dir() => {
            let _ = fs::remove_file(artifact);
            false
        }
        _ => false,
    }
}

/// Whether the library of a read-only site cache at `artifact` can be used for `program`: as
/// [`library_usable`], but nothing is removed (ADR 0036).
fn site_library_usable(artifact: &Path, program: &Program) -> bool {
    fs::symlink_metadata(artifact).is_ok_and(|meta| meta.is_file()) && crate::Kernel::load(artifact, program).is_ok()
}

/// The last `max` bytes of `text`, cut at a character boundary.
fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_cuts_at_char_boundary() {
        assert_eq!(tail("abc", 10), "abc");
        assert_eq!(tail("abcdef", 2), "ef");
        assert_eq!(tail("aé", 1), "");
    }

    #[test]
    fn build_key_depends_on_every_input() {
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        let base = build_key("int x;", "id-a", &s(&["-O2"]));
        assert_eq!(base.len(), 32);
        assert_eq!(base, build_key("int x;", "id-a", &s(&["-O2"])));
        assert_ne!(base, build_key("int y;", "id-a", &s(&["-O2"])));
        assert_ne!(base, build_key("int x;", "id-b", &s(&["-O2"])));
        assert_ne!(base, build_key("int x;", "id-a", &s(&["-O3"])));
        assert_ne!(base, build_key("int x;", "id-a", &s(&["-O2", "-g"])));
        // Field boundaries are part of the key.
        assert_ne!(build_key("int x;", "", &[]), build_key("int x", ";", &[]));
        assert_ne!(build_key("", "a", &s(&["b"])), build_key("", "ab", &[]));
    }
}
