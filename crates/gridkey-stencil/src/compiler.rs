//! The C compiler's identity: what the compiler is, not where it is (ADR 0022).
//!
//! The build key holds [`compiler_identity`], never the compiler's path: another compiler behind
//! the same command words (a new `PATH`, a `module load`, a compiler fixed in place) gets other
//! build keys and is run, and identical compilers at two paths share their builds.

use std::fs;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gridkey_settings::{CompilerSettings, IdentifiedCompiler, SettingsError};
use xxhash_rust::xxh3::Xxh3;

/// Version of the identity's encoding; hashed first, so that a change of what is identified
/// changes every identity.
pub const COMPILER_IDENTITY_VERSION: u32 = 1;

/// The identity of `compiler` as the build key sees it: 32 hex digits of xxh3_128 over, each
/// length-prefixed (u64 LE):
///
/// 1. [`COMPILER_IDENTITY_VERSION`];
/// 2. the command words, the first reduced to its file name (`/usr/bin/gcc` and `gcc` are the
///    same word; the directory is where the compiler is, not what it is);
/// 3. the bytes of the executable the first word resolved to (symlinks followed);
/// 4. for a wrapper such as `ccache gcc` (a second word that is not a flag), the bytes of the
///    executable that word names on the compiler's `PATH`: the compiler the wrapper runs;
/// 5. the exit status, stdout and stderr of `<command> --version` and of `<command> -dumpmachine`,
///    run with the compiler's environment only ([`CompilerSettings::env`]) and stdin closed
///    (less clang's `InstalledDir:` line, which names a directory), each killed after
///    [`PROBE_TIMEOUT`].
///
/// An executable that cannot be read is identified by its size and modification time instead
/// (and says so in the hash); one that cannot be resolved (its builds fail) by its words alone.
/// The path of the executable is never hashed. Uses the resolved program of `compiler`,
/// resolving the command on its `PATH` first when it is not resolved (`cwd` anchors a relative
/// command). An empty command has the identity of its (no) words.
pub fn compiler_identity(compiler: &CompilerSettings, cwd: &Path) -> String {
    let program = match &compiler.resolved {
        Some(resolved) => resolved.program.clone(),
        None if compiler.command.is_empty() => PathBuf::new(),
        None => {
            compiler.clone().resolve(cwd).map_or_else(|_| PathBuf::from(&compiler.command[0]), |r| r.program.clone())
        }
    };
    let mut h = Xxh3::new();
    let mut field = |b: &[u8]| {
        h.update(&(b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(b"gridkey-stencil compiler identity");
    field(&COMPILER_IDENTITY_VERSION.to_le_bytes());
    field(&(compiler.command.len() as u64).to_le_bytes());
    for (i, word) in compiler.command.iter().enumerate() {
        let word = if i == 0 {
            Path::new(word).file_name().map_or(word.as_str(), |n| n.to_str().unwrap_or(word))
        } else {
            word
        };
        field(word.as_bytes());
    }
    field(&executable_fingerprint(&program));
    match wrapped_compiler(compiler, cwd) {
        Some(wrapped) => {
            field(b"wraps");
            field(&executable_fingerprint(&wrapped));
        }
        None => field(b"runs itself"),
    }
    for probe in ["--version", "-dumpmachine"] {
        field(probe.as_bytes());
        field(&probe_output(compiler, &program, probe));
    }
    format!("{:032x}", h.digest128())
}

/// `compiler` resolved (when not resolved yet; `cwd` anchors a relative command) and
/// identified with [`compiler_identity`]: what the parent of a run does once, so that every task
/// and worker carries the same identity and no build computes one of its own (ADR 0022,
/// ADR 0032). A wrapper's own variables (`CCACHE_*`, `SCCACHE_*`, `DISTCC_*` in
/// [`CompilerSettings::env`]) reach the probes, as they reach every build, but are not hashed.
///
/// Errors: [`SettingsError::CompilerNotFound`].
pub fn identify_compiler(compiler: &CompilerSettings, cwd: &Path) -> Result<IdentifiedCompiler, SettingsError> {
    let mut compiler = compiler.clone();
    if compiler.resolved.is_none() {
        compiler.resolve(cwd)?;
    }
    let identity = compiler_identity(&compiler, cwd);
    IdentifiedCompiler::new(&compiler, identity)
}

/// The compiler a wrapper runs: the second command word when it is not a flag and names an
/// executable (on the compiler's `PATH`, or as a path).
fn wrapped_compiler(compiler: &CompilerSettings, cwd: &Path) -> Option<PathBuf> {
    let word = compiler.command.get(1).filter(|w| !w.starts_with('-'))?;
    let mut probe = CompilerSettings { command: vec![word.clone()], env: compiler.env.clone(), resolved: None };
    probe.resolve(cwd).ok().map(|r| r.program.clone())
}

/// xxh3_128 of the executable's bytes; for one that cannot be read, its size and modification
/// time, marked as such.
fn executable_fingerprint(program: &Path) -> Vec<u8> {
    match fs::read(program) {
        Ok(bytes) => {
            let mut out = b"bytes:".to_vec();
            out.extend_from_slice(&xxhash_rust::xxh3::xxh3_128(&bytes).to_le_bytes());
            out
        }
        Err(e) => {
            let meta = fs::metadata(program).ok();
            let modified = meta
                .as_ref()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            format!("unreadable ({:?}): {} bytes, modified {modified}", e.kind(), meta.map_or(0, |m| m.len()))
                .into_bytes()
        }
    }
}

/// How long a probe (`--version`, `-dumpmachine`) may run before it is killed; a compiler that
/// hangs on it is identified as such (its builds then fail or time out on their own).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Exit status, stdout and stderr of `<program> <pre-args> <probe>`, or why it could not run.
/// The probe runs in its own process group, killed whole after [`PROBE_TIMEOUT`].
fn probe_output(compiler: &CompilerSettings, program: &Path, probe: &str) -> Vec<u8> {
    let spawned = Command::new(program)
        .env_clear()
        .envs(&compiler.env)
        .args(compiler.command.get(1..).unwrap_or_default())
        .arg(probe)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return format!("cannot run: {:?}", e.kind()).into_bytes(),
    };
    let readers = [child.stdout.take().map(read_all), child.stderr.take().map(read_all)];
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break format!("status {:?}", status.code()),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                // SAFETY: kill(2) on the process group this probe leads; no memory is involved.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.wait();
                break format!("timed out after {} s", PROBE_TIMEOUT.as_secs());
            }
            Err(e) => break format!("cannot wait: {:?}", e.kind()),
        }
    };
    let mut bytes = format!("{status}\n").into_bytes();
    for reader in readers {
        let stream = reader.and_then(|r| r.join().ok()).unwrap_or_default();
        // Clang names the directory it was installed in: where it is, not what it is.
        for line in stream.split(|&b| b == b'\n').filter(|l| !l.starts_with(b"InstalledDir:")) {
            bytes.extend_from_slice(line);
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(b"--\n");
    }
    bytes
}

/// A thread reading `stream` to its end (so a chatty probe never blocks on a full pipe).
fn read_all(mut stream: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out);
        out
    })
}
