//! The typed settings of gridkey, parsed once at the edge (docs/design.md "Configuration", ADR 0013).
//!
//! Every switch that changes what gridkey does (the build-jobs mode and count, the cache
//! directory, the two verification switches, the per-task timeout, the C compiler and the
//! variables that reach it, the fault-matrix test hook) is a field of [`Settings`]. An entry
//! point builds one value: the `gridkey` binary from its flags and the process environment, the
//! Python package in its constructor, an embedder at its own edge (its `main` hands
//! [`Settings::from_vars`] a lookup over the process environment) or by filling the fields.
//! Library crates take what they need from it as arguments. A task gets only what the compile
//! step uses, a [`TaskSettings`] built once in the parent (cache directory absolute, the compiler
//! resolved and identified, the verification switches, the fault hook; never the shared tier's
//! URL or keys, ADR 0032): process-mode workers receive it in every task frame, so serial,
//! thread and process mode, and a pool reused after a setting changed, all see the same value.
//!
//! # Architecture invariant
//!
//! Nothing in this crate reads the process environment: [`Settings::from_vars`] is a pure
//! function of the lookup it is given, and only entry points (the binary, the Python package, an
//! embedder's `main`) hand it the environment. Every
//! variable is listed once, in [`VARIABLES`], with its meaning and default. Nothing here enters a
//! translation key: settings say where and how to build, never what is built.
//!
//! # Example
//!
//! ```
//! use gridkey_settings::{BuildJobsMode, Settings};
//!
//! // What an embedder does with its own configuration source (here a fixed list).
//! let vars = [("GRIDKEY_BUILD_JOBS_MODE", "thread"), ("GRIDKEY_BUILD_JOBS", "4"), ("GRIDKEY_VERIFY_TABLES", "yes")];
//! let lookup = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
//! let settings = Settings::from_vars(lookup).unwrap();
//! assert_eq!(settings.build_jobs.mode, BuildJobsMode::Thread);
//! assert_eq!(settings.build_jobs.jobs, 4);
//! assert!(settings.verify_tables);
//! assert_eq!(settings.compiler.command, ["cc"]);
//!
//! // A bad value is an error that names the variable and what it accepts.
//! let err = Settings::from_vars(|name| (name == "GRIDKEY_BUILD_JOBS_MODE").then(|| "fast".to_owned())).unwrap_err();
//! assert!(err.to_string().starts_with("GRIDKEY_BUILD_JOBS_MODE=\"fast\" is not valid"));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod remote;
mod task;

pub use remote::{
    redact, RemoteSettings, Role, ENV_REMOTE_CONNECT_TIMEOUT, ENV_REMOTE_LEASE_TTL, ENV_REMOTE_LEASE_WAIT,
    ENV_REMOTE_MAX_OBJECT, ENV_REMOTE_NAMESPACE, ENV_REMOTE_SIGNING_KEY, ENV_REMOTE_TIMEOUT, ENV_REMOTE_TRUSTED_KEYS,
    ENV_REMOTE_URL, ENV_REMOTE_WRITER, REDIS_SCHEMES,
};
pub use remote::{RemoteTrust, ENV_REMOTE_CA_FILE, ENV_REMOTE_TRUST};
pub use task::{IdentifiedCompiler, TaskSettings};

/// Variable choosing the build-jobs mode: `serial`, `thread` or `process`.
pub const ENV_MODE: &str = "GRIDKEY_BUILD_JOBS_MODE";
/// Variable giving the worker count (an integer; 0 or less means serial).
pub const ENV_JOBS: &str = "GRIDKEY_BUILD_JOBS";
/// Variable giving the cache directory (a path, relative to the current directory or absolute).
pub const ENV_CACHE_DIR: &str = "GRIDKEY_CACHE_DIR";
/// Variable giving the per-task timeout of process mode, in seconds.
pub const ENV_TIMEOUT: &str = "GRIDKEY_BUILD_TIMEOUT";
/// Variable giving the C compiler command, split on whitespace (`ccache gcc`).
pub const ENV_CC: &str = "CC";
/// Switch: recompute the digest of every stored table on every open.
pub const ENV_VERIFY_TABLES: &str = "GRIDKEY_VERIFY_TABLES";
/// Switch: translate again on every translation-cache hit and compare byte for byte.
pub const ENV_VERIFY_CACHE_HITS: &str = "GRIDKEY_VERIFY_CACHE_HITS";
/// Variable naming a read-only site cache, looked up after the cache directory (ADR 0036).
pub const ENV_SITE_CACHE: &str = "GRIDKEY_SITE_CACHE";
/// Test hook of the fault matrix (ADR 0012): stop or fail a cache write.
pub const ENV_FAULT: &str = "GRIDKEY_FAULT";
/// Variable giving the longest wait for a per-key lock of the cache directory, in seconds
/// (ADR 0033).
pub const ENV_LOCK_WAIT: &str = "GRIDKEY_LOCK_WAIT";
/// Default of [`ENV_LOCK_WAIT`]: 60 seconds, as the shared tier's lease wait.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(60);
/// Default cache directory, relative to the current directory.
pub const DEFAULT_CACHE_DIR: &str = ".gridkey_cache";
/// Default C compiler command.
pub const DEFAULT_CC: &str = "cc";
/// Largest worker count taken from the number of cores.
pub const MAX_DEFAULT_JOBS: usize = 32;

/// The variables of the compiler's environment that reach it; every other variable is cleared
/// when the compiler runs, so a worker's own environment cannot change a build (ADR 0013).
/// `PATH` also resolves the compiler command.
pub const COMPILER_ENV: &[&str] = &[
    "PATH",
    "TMPDIR",
    "LANG",
    "LC_ALL",
    "COMPILER_PATH",
    "LIBRARY_PATH",
    "CPATH",
    "C_INCLUDE_PATH",
    "GCC_EXEC_PREFIX",
    "SOURCE_DATE_EPOCH",
];

/// Prefixes of the variables that a compiler wrapper (`ccache`, `sccache`, `distcc`) reads: every
/// variable whose name starts with one of them reaches the compiler too, so that `CC="sccache cc"`
/// uses the server and storage its `SCCACHE_*` variables configure (ADR 0032). An entry point
/// that can list its environment passes them with [`CompilerSettings::pass_wrapper_vars`]; they
/// enter neither the compiler's identity nor a build key (a correct wrapper produces what the
/// compiler it runs produces).
pub const COMPILER_ENV_PREFIXES: &[&str] = &["CCACHE_", "SCCACHE_", "DISTCC_"];

/// How a crate below the entry points names a setting in its messages: by its role
/// (`phrase`), never by a variable, since it takes arguments and reads no environment (ADR
/// 0013). An entry point that sets it from `variable` names the variable with
/// [`name_settings`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettingRole {
    /// The words a lower crate's message uses for the setting (`the cache directory`).
    pub phrase: &'static str,
    /// The variable an entry point sets it from.
    pub variable: &'static str,
}

/// Every role a lower crate's message names a setting by, with its variable.
pub const SETTING_ROLES: &[SettingRole] = &[
    SettingRole { phrase: "the cache directory", variable: ENV_CACHE_DIR },
    SettingRole { phrase: "the per-task timeout", variable: ENV_TIMEOUT },
    SettingRole { phrase: "the lock wait", variable: ENV_LOCK_WAIT },
    SettingRole { phrase: "the shared tier's URL", variable: remote::ENV_REMOTE_URL },
    SettingRole { phrase: "the shared tier's CA file", variable: remote::ENV_REMOTE_CA_FILE },
    SettingRole { phrase: "the shared tier's signing key", variable: remote::ENV_REMOTE_SIGNING_KEY },
    SettingRole { phrase: "the shared tier's trusted keys", variable: remote::ENV_REMOTE_TRUSTED_KEYS },
    SettingRole { phrase: "the shared tier's trust mode", variable: remote::ENV_REMOTE_TRUST },
    SettingRole { phrase: "the shared tier's object limit", variable: remote::ENV_REMOTE_MAX_OBJECT },
];

/// `message` with the variable of each [`SETTING_ROLES`] role it mentions named after the
/// role's first mention, with the flag `flag` gives for that variable, if any:
/// `point the cache directory at ...` becomes `point the cache directory (GRIDKEY_CACHE_DIR or
/// --cache-dir) at ...`. A message that already names the variable is left as it is. What an
/// entry point does to every message of a lower crate it shows.
pub fn name_settings(message: &str, flag: impl Fn(&str) -> Option<&'static str>) -> String {
    let mut out = message.to_owned();
    for role in SETTING_ROLES {
        if out.contains(role.variable) {
            continue;
        }
        if let Some(at) = out.find(role.phrase) {
            let names = match flag(role.variable) {
                Some(flag) => format!(" ({} or {flag})", role.variable),
                None => format!(" ({})", role.variable),
            };
            out.insert_str(at + role.phrase.len(), &names);
        }
    }
    out
}

/// One variable that changes what gridkey does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// What it changes.
    pub meaning: &'static str,
    /// Its default, in words.
    pub default: &'static str,
}

/// Every variable [`Settings::from_vars`] reads, with meaning and default (the README table
/// lists each; a test checks it). The compiler's allowlisted environment, [`COMPILER_ENV`],
/// is read besides these.
pub const VARIABLES: &[Variable] = &[
    Variable { name: ENV_MODE, meaning: "`serial`, `thread` or `process`", default: "`process`" },
    Variable {
        name: ENV_JOBS,
        meaning: "number of workers; 0 or less means serial",
        default: "available cores, at most 32",
    },
    Variable {
        name: ENV_CACHE_DIR,
        meaning: "cache directory (`tables-v1/`, `translation-v2/`, `build-v2/`)",
        default: "`.gridkey_cache`",
    },
    Variable {
        name: ENV_SITE_CACHE,
        meaning: "read-only site cache: its translation entries and kernel libraries are served after the cache directory's, and nothing is written to it",
        default: "unset: no site cache",
    },
    Variable {
        name: ENV_TIMEOUT,
        meaning: "seconds a process-mode task may run before its worker is killed and replaced",
        default: "off",
    },
    Variable { name: ENV_CC, meaning: "C compiler command (words split on whitespace)", default: "`cc`" },
    Variable {
        name: ENV_LOCK_WAIT,
        meaning: "seconds at most to wait for another process's per-key lock (translation, build); then go on without it; 0: never wait",
        default: "60",
    },
    Variable {
        name: ENV_VERIFY_CACHE_HITS,
        meaning: "switch: translate again on every cache hit and compare byte for byte",
        default: "off",
    },
    Variable {
        name: ENV_VERIFY_TABLES,
        meaning: "switch: every open of a stored table recomputes its digest",
        default: "off",
    },
    Variable {
        name: ENV_FAULT,
        meaning: "test hook of the fault matrix: stop or fail a cache write",
        default: "unset",
    },
    remote::REMOTE_VARIABLES[0],
    remote::REMOTE_VARIABLES[1],
    remote::REMOTE_VARIABLES[2],
    remote::REMOTE_VARIABLES[3],
    remote::REMOTE_VARIABLES[4],
    remote::REMOTE_VARIABLES[5],
    remote::REMOTE_VARIABLES[6],
    remote::REMOTE_VARIABLES[7],
    remote::REMOTE_VARIABLES[8],
    remote::REMOTE_VARIABLES[9],
    remote::REMOTE_VARIABLES[10],
    remote::REMOTE_VARIABLES[11],
];

/// Errors of parsing settings (ADR 0005); each names the variable, the value and what is
/// accepted.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A variable (or the flag that replaces it) has a value outside those accepted.
    #[error("{var}={value:?} is not valid: expected {accepted}")]
    BadSetting {
        /// The variable.
        var: &'static str,
        /// The value found.
        value: String,
        /// The accepted values.
        accepted: &'static str,
    },
    /// The compiler command names a program that is not found.
    #[error("C compiler {program:?} ({var}) is not found on PATH {path:?}; install it or set {var} to a compiler")]
    CompilerNotFound {
        /// The variable that named it.
        var: &'static str,
        /// The program word.
        program: String,
        /// The search path used.
        path: String,
    },
    /// Task settings were asked of a compiler that was not resolved, or without its identity.
    #[error("C compiler {command:?} ({var}) has no {missing} yet; resolve and identify it in the parent before making tasks")]
    CompilerNotIdentified {
        /// The variable that named it.
        var: &'static str,
        /// The command, as one line.
        command: String,
        /// What is missing: `resolved program` or `identity`.
        missing: &'static str,
    },
    /// The cache directory of task settings is relative or not valid UTF-8.
    #[error("cache directory {path:?} ({var}) must be absolute and valid UTF-8 in task settings; make it absolute in the parent or choose another {var}")]
    TaskCacheDir {
        /// The variable that named it.
        var: &'static str,
        /// The directory.
        path: PathBuf,
    },
}

/// How build jobs run (docs/design.md "Build jobs").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum BuildJobsMode {
    /// In the calling thread, one after the other.
    Serial,
    /// In a pool of threads of this process.
    Thread,
    /// In a pool of `gridkey worker` processes.
    Process,
}

impl BuildJobsMode {
    /// All modes, in the order of their names.
    pub const ALL: [BuildJobsMode; 3] = [BuildJobsMode::Serial, BuildJobsMode::Thread, BuildJobsMode::Process];

    /// `serial`, `thread` or `process`.
    pub const fn as_str(self) -> &'static str {
        match self {
            BuildJobsMode::Serial => "serial",
            BuildJobsMode::Thread => "thread",
            BuildJobsMode::Process => "process",
        }
    }
}

impl fmt::Display for BuildJobsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for BuildJobsMode {
    type Err = SettingsError;

    /// Parses `serial`, `thread` or `process`, ignoring surrounding whitespace.
    ///
    /// Errors: [`SettingsError::BadSetting`] naming [`ENV_MODE`].
    fn from_str(value: &str) -> Result<Self, SettingsError> {
        match value.trim() {
            "serial" => Ok(BuildJobsMode::Serial),
            "thread" => Ok(BuildJobsMode::Thread),
            "process" => Ok(BuildJobsMode::Process),
            _ => Err(SettingsError::BadSetting {
                var: ENV_MODE,
                value: value.to_owned(),
                accepted: "serial, thread or process",
            }),
        }
    }
}

/// Mode, worker count and per-task timeout of a runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildJobs {
    /// The mode; [`BuildJobsMode::Serial`] whenever the count asked for was 0 or less.
    pub mode: BuildJobsMode,
    /// Number of threads or worker processes (1 when serial).
    pub jobs: usize,
    /// Per-task timeout of process mode; `None`: no limit. Serial and thread modes cannot stop
    /// a task and ignore it (ADR 0010).
    pub timeout: Option<Duration>,
}

impl BuildJobs {
    /// `mode` with `jobs` workers and no timeout; 0 or fewer workers means serial.
    pub fn new(mode: BuildJobsMode, jobs: i64) -> Self {
        if jobs <= 0 || mode == BuildJobsMode::Serial {
            Self { mode: BuildJobsMode::Serial, jobs: 1, timeout: None }
        } else {
            Self { mode, jobs: usize::try_from(jobs).unwrap_or(usize::MAX), timeout: None }
        }
    }

    /// The same settings with a per-task timeout (`None`: no limit).
    pub fn with_timeout(self, timeout: Option<Duration>) -> Self {
        Self { timeout, ..self }
    }
}

impl Default for BuildJobs {
    /// Process mode with [`default_jobs`] workers, no timeout.
    fn default() -> Self {
        Self::new(BuildJobsMode::Process, default_jobs() as i64)
    }
}

/// The available cores, at most [`MAX_DEFAULT_JOBS`].
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_DEFAULT_JOBS)
}

/// The C compiler: the command words, the variables that reach it, and what the command was
/// resolved to in the parent (ADR 0013). Travels with every task, so a worker never resolves
/// the compiler from its own `PATH`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompilerSettings {
    /// The command, split on whitespace (`["ccache", "gcc"]`); never empty.
    pub command: Vec<String>,
    /// The compiler's environment: the variables of [`COMPILER_ENV`] that were set, and those
    /// with a prefix of [`COMPILER_ENV_PREFIXES`] an entry point passed. The compiler runs with
    /// exactly these.
    pub env: BTreeMap<String, String>,
    /// What the command resolved to, filled by [`CompilerSettings::resolve`] in the parent.
    pub resolved: Option<ResolvedCompiler>,
}

/// A compiler command resolved once, in the parent. Its identity is not here: a compiler that
/// tasks run is an [`IdentifiedCompiler`], which cannot be made without one (ADR 0032).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedCompiler {
    /// The absolute path of the program the first command word names. Recorded, never keyed:
    /// identical compilers at different paths share builds.
    pub program: PathBuf,
}

impl CompilerSettings {
    /// The command `words` (split on whitespace) with the allowlisted variables of `lookup`.
    ///
    /// Errors: [`SettingsError::BadSetting`] naming [`ENV_CC`] for a blank command.
    pub fn from_command(words: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let command: Vec<String> = words.split_whitespace().map(str::to_owned).collect();
        if command.is_empty() {
            return Err(SettingsError::BadSetting {
                var: ENV_CC,
                value: words.to_owned(),
                accepted: "a compiler command such as cc, gcc or \"ccache gcc\" (unset it for cc)",
            });
        }
        let env = COMPILER_ENV.iter().filter_map(|&name| lookup(name).map(|v| (name.to_owned(), v))).collect();
        Ok(Self { command, env, resolved: None })
    }

    /// The command as one line, for messages.
    pub fn command_line(&self) -> String {
        self.command.join(" ")
    }

    /// Adds to [`Self::env`] every variable of `vars` whose name starts with a prefix of
    /// [`COMPILER_ENV_PREFIXES`] (a compiler wrapper's own configuration, ADR 0032); the others
    /// are ignored. The entry point hands it its environment, once, at its edge.
    pub fn pass_wrapper_vars(&mut self, vars: impl IntoIterator<Item = (String, String)>) {
        for (name, value) in vars {
            if COMPILER_ENV_PREFIXES.iter().any(|prefix| name.starts_with(prefix)) {
                self.env.insert(name, value);
            }
        }
    }

    /// Resolves the first command word to an absolute path: as given when it contains a `/`,
    /// else searched on the allowlisted `PATH`; `cwd` anchors relative paths. Stores the
    /// result in [`Self::resolved`]; the frontend then identifies it ([`IdentifiedCompiler::new`]).
    ///
    /// Errors: [`SettingsError::CompilerNotFound`] naming the program and the search path.
    pub fn resolve(&mut self, cwd: &Path) -> Result<&ResolvedCompiler, SettingsError> {
        let word = &self.command[0];
        let path = self.env.get("PATH").cloned().unwrap_or_default();
        let not_found = || SettingsError::CompilerNotFound { var: ENV_CC, program: word.clone(), path: path.clone() };
        let program = if word.contains('/') {
            let p = cwd.join(word);
            if !p.is_file() {
                return Err(not_found());
            }
            p
        } else {
            which::which_in(word, Some(&path), cwd).map_err(|_| not_found())?
        };
        Ok(self.resolved.insert(ResolvedCompiler { program }))
    }
}

impl Default for CompilerSettings {
    /// [`DEFAULT_CC`] with an empty environment.
    fn default() -> Self {
        Self { command: vec![DEFAULT_CC.to_owned()], env: BTreeMap::new(), resolved: None }
    }
}

/// Test hooks the binary ships (ADR 0012): typed here so that no library reads them from the
/// environment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestHooks {
    /// The fault of the fault matrix, in the text form `gridkey_fs::Fault::parse` reads
    /// (`GRIDKEY_FAULT`); `None` in normal use.
    pub fault: Option<String>,
}

/// Everything that changes what gridkey does, parsed once (see the crate docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// Runner mode, worker count, timeout ([`ENV_MODE`], [`ENV_JOBS`], [`ENV_TIMEOUT`]).
    pub build_jobs: BuildJobs,
    /// The cache directory ([`ENV_CACHE_DIR`]); holds `tables-v1/`, `translation-v2/`, `build-v2/`.
    pub cache_dir: PathBuf,
    /// A read-only site cache ([`ENV_SITE_CACHE`]): the same layout as [`Self::cache_dir`],
    /// looked up after it and never written (ADR 0036); `None`: none.
    pub site_cache: Option<PathBuf>,
    /// Whether [`Self::cache_dir`] is a directory private to one run (the only cache given was
    /// read-only, ADR 0036): nobody else uses it, so no per-key lock is taken in it. Set by the
    /// run, never by a variable.
    pub private_cache: bool,
    /// Recompute the digest of every stored table on every open ([`ENV_VERIFY_TABLES`]).
    pub verify_tables: bool,
    /// Translate again on every translation-cache hit and compare ([`ENV_VERIFY_CACHE_HITS`]).
    pub verify_cache_hits: bool,
    /// The C compiler ([`ENV_CC`] and [`COMPILER_ENV`]).
    pub compiler: CompilerSettings,
    /// The longest wait for a per-key lock of the cache directory, translation or build
    /// ([`ENV_LOCK_WAIT`], ADR 0033); past it the work is done without the lock. Travels to the
    /// workers with the other compile settings.
    pub key_lock_wait: Duration,
    /// Test hooks ([`ENV_FAULT`]).
    pub test_hooks: TestHooks,
    /// The shared tier on Redis ([`ENV_REMOTE_URL`] and the other `GRIDKEY_REMOTE_*` variables);
    /// `None`: no shared tier, nothing changes.
    pub remote: Option<RemoteSettings>,
}

impl Default for Settings {
    /// What [`Settings::from_vars`] gives when no variable is set.
    fn default() -> Self {
        Self {
            build_jobs: BuildJobs::default(),
            cache_dir: PathBuf::from(DEFAULT_CACHE_DIR),
            site_cache: None,
            private_cache: false,
            verify_tables: false,
            verify_cache_hits: false,
            compiler: CompilerSettings::default(),
            key_lock_wait: DEFAULT_LOCK_WAIT,
            test_hooks: TestHooks::default(),
            remote: None,
        }
    }
}

impl Settings {
    /// Parses every variable of [`VARIABLES`] (and [`COMPILER_ENV`]) through `lookup`, which
    /// returns a variable's value or `None` when it is unset. An empty value counts as unset,
    /// except for `CC`, where a blank command is an error. Pure: reads nothing else.
    ///
    /// Errors: [`SettingsError::BadSetting`] naming the first variable whose value is not
    /// accepted, and what it accepts.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let set = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mode = match set(ENV_MODE) {
            Some(v) => v.parse()?,
            None => BuildJobsMode::Process,
        };
        let jobs = match set(ENV_JOBS) {
            Some(v) => v.trim().parse::<i64>().map_err(|_| SettingsError::BadSetting {
                var: ENV_JOBS,
                value: v.clone(),
                accepted: "an integer (0 or less means serial)",
            })?,
            None => default_jobs() as i64,
        };
        let timeout = match set(ENV_TIMEOUT) {
            Some(v) => parse_timeout(&v)?,
            None => None,
        };
        let key_lock_wait = match set(ENV_LOCK_WAIT) {
            Some(v) => parse_lock_wait(&v)?,
            None => DEFAULT_LOCK_WAIT,
        };
        let compiler = match lookup(ENV_CC) {
            Some(words) => CompilerSettings::from_command(&words, &lookup)?,
            None => CompilerSettings::from_command(DEFAULT_CC, &lookup)?,
        };
        Ok(Self {
            build_jobs: BuildJobs::new(mode, jobs).with_timeout(timeout),
            cache_dir: set(ENV_CACHE_DIR).map_or_else(|| PathBuf::from(DEFAULT_CACHE_DIR), PathBuf::from),
            site_cache: set(ENV_SITE_CACHE).map(PathBuf::from),
            private_cache: false,
            verify_tables: parse_switch(ENV_VERIFY_TABLES, lookup(ENV_VERIFY_TABLES).as_deref())?,
            verify_cache_hits: parse_switch(ENV_VERIFY_CACHE_HITS, lookup(ENV_VERIFY_CACHE_HITS).as_deref())?,
            compiler,
            key_lock_wait,
            test_hooks: TestHooks { fault: set(ENV_FAULT) },
            remote: RemoteSettings::from_vars(&lookup)?,
        })
    }
}

/// Parses a per-task timeout: seconds (a decimal number); 0 means no limit.
///
/// Errors: [`SettingsError::BadSetting`] naming [`ENV_TIMEOUT`].
pub fn parse_timeout(value: &str) -> Result<Option<Duration>, SettingsError> {
    let bad = || SettingsError::BadSetting {
        var: ENV_TIMEOUT,
        value: value.to_owned(),
        accepted: "a number of seconds (0 or unset: no limit)",
    };
    let seconds: f64 = value.trim().parse().map_err(|_| bad())?;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(bad());
    }
    Ok((seconds > 0.0).then(|| Duration::from_secs_f64(seconds)))
}

/// Parses the bound of a per-key lock wait: seconds (a decimal number, 0 or more; 0: never
/// wait).
///
/// Errors: [`SettingsError::BadSetting`] naming [`ENV_LOCK_WAIT`].
pub fn parse_lock_wait(value: &str) -> Result<Duration, SettingsError> {
    let bad = || SettingsError::BadSetting {
        var: ENV_LOCK_WAIT,
        value: value.to_owned(),
        accepted: "a number of seconds, 0 or more (0: never wait for another process's lock)",
    };
    let seconds: f64 = value.trim().parse().map_err(|_| bad())?;
    Duration::try_from_secs_f64(seconds).map_err(|_| bad())
}

/// Reads an on/off switch: unset, empty, `0`, `false`, `no`, `off` are off; `1`, `true`, `yes`,
/// `on` are on (any case, surrounding whitespace ignored).
///
/// Errors: [`SettingsError::BadSetting`] naming `var` for any other value.
pub fn parse_switch(var: &'static str, value: Option<&str>) -> Result<bool, SettingsError> {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("" | "0" | "false" | "no" | "off") => Ok(false),
        Some("1" | "true" | "yes" | "on") => Ok(true),
        Some(_) => Err(SettingsError::BadSetting {
            var,
            value: value.unwrap_or_default().to_owned(),
            accepted: "1, true, yes or on to switch it on; 0, false, no, off or nothing to switch it off",
        }),
    }
}
