//! What a compilation task carries: the part of [`Settings`] the compile step uses (ADR 0032).
//!
//! A [`TaskSettings`] is built once in the parent of a run, from its typed [`Settings`], and the
//! same value goes with every task to every mode; process-mode workers receive it in every task
//! frame. It holds the cache directory (absolute), the compiler resolved and identified
//! ([`IdentifiedCompiler`]), the two verification switches and the fault hook, and nothing else:
//! not the build-jobs mode, which only the parent uses, and never the shared tier's settings (its
//! URL may hold a password, and the parent does every remote request, ADR 0018).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{CompilerSettings, Settings, SettingsError, ENV_CACHE_DIR, ENV_CC};

/// A C compiler resolved and identified in the parent: the command words, the environment it
/// runs with, the program the first word resolved to, and its identity (for the reference
/// frontend, ADR 0022: a digest of the executable, its `--version` and `-dumpmachine` output).
/// It cannot be made, nor decoded from a frame, without a resolved program and a non-empty
/// identity, so a build never has to compute an identity of its own (ADR 0032).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "IdentifiedCompilerFields")]
pub struct IdentifiedCompiler {
    command: Vec<String>,
    env: BTreeMap<String, String>,
    program: PathBuf,
    identity: String,
}

/// The decoded fields of an [`IdentifiedCompiler`], checked before one is made of them.
#[derive(Deserialize)]
struct IdentifiedCompilerFields {
    command: Vec<String>,
    env: BTreeMap<String, String>,
    program: PathBuf,
    identity: String,
}

impl TryFrom<IdentifiedCompilerFields> for IdentifiedCompiler {
    type Error = SettingsError;

    fn try_from(f: IdentifiedCompilerFields) -> Result<Self, SettingsError> {
        let compiler = CompilerSettings {
            command: f.command,
            env: f.env,
            resolved: Some(crate::ResolvedCompiler { program: f.program }),
        };
        IdentifiedCompiler::new(&compiler, f.identity)
    }
}

impl IdentifiedCompiler {
    /// `compiler`, resolved ([`CompilerSettings::resolve`]), with its `identity` as the frontend
    /// computed it.
    ///
    /// Errors: [`SettingsError::CompilerNotIdentified`] when `compiler` is not resolved, its
    /// command is empty, or `identity` is empty.
    pub fn new(compiler: &CompilerSettings, identity: String) -> Result<Self, SettingsError> {
        let missing =
            |missing| SettingsError::CompilerNotIdentified { var: ENV_CC, command: compiler.command_line(), missing };
        let resolved = compiler.resolved.as_ref().filter(|_| !compiler.command.is_empty());
        let program = resolved.ok_or_else(|| missing("resolved program"))?.program.clone();
        if identity.is_empty() {
            return Err(missing("identity"));
        }
        Ok(Self { command: compiler.command.clone(), env: compiler.env.clone(), program, identity })
    }

    /// The command words (`["ccache", "gcc"]`); never empty.
    pub fn command(&self) -> &[String] {
        &self.command
    }

    /// The command as one line, for messages.
    pub fn command_line(&self) -> String {
        self.command.join(" ")
    }

    /// The environment the compiler runs with, and nothing else: the allowlisted variables
    /// ([`crate::COMPILER_ENV`]) and a wrapper's own ([`crate::COMPILER_ENV_PREFIXES`]).
    pub fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    /// The absolute path the first command word resolved to in the parent. Recorded, never keyed.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The compiler's identity, never empty; what a build key holds of the compiler (ADR 0022).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The compiler as [`CompilerSettings`] (resolved), for code that takes those.
    pub fn settings(&self) -> CompilerSettings {
        CompilerSettings {
            command: self.command.clone(),
            env: self.env.clone(),
            resolved: Some(crate::ResolvedCompiler { program: self.program.clone() }),
        }
    }
}

/// Everything a compilation task uses of the settings, the same value in every mode (ADR 0032).
/// Serialisable: it is what travels in a worker's task frame (protocol v5).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSettings {
    cache_dir: PathBuf,
    compiler: IdentifiedCompiler,
    verify_tables: bool,
    verify_cache_hits: bool,
    fault: Option<String>,
    /// Longest wait on another process's per-key lock (ADR 0033).
    key_lock_wait: std::time::Duration,
    /// A read-only site cache looked up after `cache_dir` (ADR 0036).
    site_cache: Option<PathBuf>,
    /// Whether `cache_dir` is private to one run (ADR 0036).
    private_cache: bool,
}

impl TaskSettings {
    /// The task settings of `settings`, with the cache directory `cache_dir` (the settings' own,
    /// made absolute by the caller) and the compiler as the parent identified it.
    ///
    /// Errors: [`SettingsError::TaskCacheDir`] when `cache_dir` is relative or not valid UTF-8
    /// (a worker may run in another directory, and the frame carries it as text).
    pub fn new(settings: &Settings, cache_dir: PathBuf, compiler: IdentifiedCompiler) -> Result<Self, SettingsError> {
        if !cache_dir.is_absolute() || cache_dir.to_str().is_none() {
            return Err(SettingsError::TaskCacheDir { var: ENV_CACHE_DIR, path: cache_dir });
        }
        Ok(Self {
            cache_dir,
            compiler,
            verify_tables: settings.verify_tables,
            verify_cache_hits: settings.verify_cache_hits,
            fault: settings.test_hooks.fault.clone(),
            key_lock_wait: settings.key_lock_wait,
            site_cache: settings.site_cache.clone(),
            private_cache: settings.private_cache,
        })
    }

    /// The cache directory, absolute: `tables-v1/`, `translation-v2/`, `build-v2/`.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// The C compiler, resolved and identified in the parent.
    pub fn compiler(&self) -> &IdentifiedCompiler {
        &self.compiler
    }

    /// Recompute the digest of every compile-time table before translating
    /// ([`crate::ENV_VERIFY_TABLES`]).
    pub fn verify_tables(&self) -> bool {
        self.verify_tables
    }

    /// Translate again on every translation-cache hit and compare
    /// ([`crate::ENV_VERIFY_CACHE_HITS`]).
    pub fn verify_cache_hits(&self) -> bool {
        self.verify_cache_hits
    }

    /// The fault of the fault matrix in its text form ([`crate::ENV_FAULT`]); `None` in normal use.
    pub fn fault(&self) -> Option<&str> {
        self.fault.as_deref()
    }

    /// Longest wait on another process's per-key lock before the work goes on without it, in
    /// seconds ([`crate::ENV_LOCK_WAIT`], ADR 0033).
    pub fn key_lock_wait(&self) -> std::time::Duration {
        self.key_lock_wait
    }

    /// The read-only site cache looked up after the cache directory ([`crate::ENV_SITE_CACHE`],
    /// ADR 0036), if any.
    pub fn site_cache(&self) -> Option<&Path> {
        self.site_cache.as_deref()
    }

    /// Whether the cache directory is private to this run, so that no per-key lock is taken in
    /// it (the only cache given was read-only, ADR 0036).
    pub fn private_cache(&self) -> bool {
        self.private_cache
    }
}
