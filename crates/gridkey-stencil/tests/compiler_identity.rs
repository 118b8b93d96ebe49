//! The compiler identity in the build key, which also decides whether a kernel library travels
//! between machines: every input changes it (the executable, `--version`, `-dumpmachine`), the
//! directory it lies in does not (ADR 0022).

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
    compiler.resolved = Some(ResolvedCompiler { program: program.to_path_buf() });
    compiler_identity(&compiler, program.parent().unwrap())
}

#[test]
fn every_input_changes_the_identity_and_the_path_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let at = |sub: &str| {
        let d = dir.path().join(sub);
        std::fs::create_dir(&d).unwrap();
        d
    };
    let base = check(&fake(&at("a"), "cc", "fakecc 1.0", "x86_64-linux-gnu", ""));
    assert_eq!(base.len(), 32);
    assert_eq!(base, check(&fake(&at("b"), "cc", "fakecc 1.0", "x86_64-linux-gnu", "")), "another path");
    assert_ne!(base, check(&fake(&at("c"), "cc", "fakecc 1.1", "x86_64-linux-gnu", "")), "--version");
    assert_ne!(base, check(&fake(&at("d"), "cc", "fakecc 1.0", "aarch64-linux-gnu", "")), "-dumpmachine");
    assert_ne!(base, check(&fake(&at("e"), "cc", "fakecc 1.0", "x86_64-linux-gnu", "rebuilt")), "executable");
}
