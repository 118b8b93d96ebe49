//! The compiler identity that decides whether a kernel library travels between machines: every
//! input changes it (the executable, `--version`, `-dumpmachine`), the path does not.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use gridkey_settings::{CompilerSettings, ResolvedCompiler};
use gridkey_stencil::compiler_identity;

/// A fake compiler at `dir/name` answering `--version` and `-dumpmachine`.
fn fake(dir: &Path, name: &str, version: &str, machine: &str, padding: &str) -> PathBuf {
    let path = dir.join(name);
    let script = format!(
        "#!/bin/sh\n# {padding}\ncase \"$1\" in --version) echo '{version}';; -dumpmachine) echo '{machine}';; *) exit 1;; esac\n"
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn check(program: &Path) -> String {
    let mut compiler = CompilerSettings::from_command(program.to_str().unwrap(), |_| None).unwrap();
    compiler.resolved = Some(ResolvedCompiler { program: program.to_path_buf(), identity: String::new() });
    compiler_identity(&compiler).unwrap()
}

#[test]
fn every_input_changes_the_identity_and_the_path_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let base = check(&fake(dir.path(), "a", "fakecc 1.0", "x86_64-linux-gnu", ""));
    assert_eq!(base.len(), 32);
    assert_eq!(base, check(&fake(dir.path(), "b", "fakecc 1.0", "x86_64-linux-gnu", "")), "another path");
    assert_ne!(base, check(&fake(dir.path(), "c", "fakecc 1.1", "x86_64-linux-gnu", "")), "--version");
    assert_ne!(base, check(&fake(dir.path(), "d", "fakecc 1.0", "aarch64-linux-gnu", "")), "-dumpmachine");
    assert_ne!(base, check(&fake(dir.path(), "e", "fakecc 1.0", "x86_64-linux-gnu", "rebuilt")), "executable");
}

#[test]
fn a_compiler_that_cannot_run_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nocc");
    let mut compiler = CompilerSettings::from_command(missing.to_str().unwrap(), |_| None).unwrap();
    compiler.resolved = Some(ResolvedCompiler { program: missing.clone(), identity: String::new() });
    let err = compiler_identity(&compiler).unwrap_err().to_string();
    assert!(err.contains("nocc"), "{err}");
}
