//! The shared tier's row "writer miscompile then fixed" (ADR 0030): a writer whose compiler
//! miscompiles one kernel once must share nothing of that program, so that at most one run (its
//! own) loses it; every later run of the writer and of two readers verifies every program.

use std::path::Path;

use anyhow::Result;

use super::{check_final_files, s, Matrix, Seen};

/// A compiler script that, while `mark` exists, turns the first `acc += ` of the kernel it
/// builds into `acc -= ` (a kernel that runs and computes wrong numbers) and removes `mark`;
/// `gcc` otherwise. Its text never changes, so neither does its compiler identity.
fn flaky_compiler(dir: &Path, mark: &Path) -> Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    let path = dir.join("cc-flaky");
    let m = s(mark);
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nif [ -f '{m}' ] && [ -f kernel.c ] && grep -q 'acc += ' kernel.c; then\n  rm -f '{m}'\n  sed -i '0,/acc += /s//acc -= /' kernel.c\nfi\nexec gcc \"$@\"\n"
        ),
    )?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

/// The row, on the server at `url` in namespace `ns`; `reference` holds the keys of a run
/// without a shared tier.
pub(super) fn rows(m: &mut Matrix, url: &str, ns: &str, reference: &[String]) {
    m.row("shared tier: writer miscompile then fixed", "at most one run loses it; later runs verify all", |m| {
        let tools = m.fresh("miscompile-tools");
        let mark = tools.join("miscompile-once");
        let cc = flaky_compiler(&tools, &mark)?;
        std::fs::write(&mark, b"")?;
        let vars = [("GRIDKEY_REMOTE_NAMESPACE", ns), ("GRIDKEY_REMOTE_TIMEOUT", "2"), ("CC", s(&cc))];
        let writer = m.fresh("miscompile-writer");
        let readers = [m.fresh("miscompile-reader-a"), m.fresh("miscompile-reader-b")];
        let mut runs = Vec::new();
        runs.push((writer.clone(), m.run(&writer, &["--remote", url, "--remote-writer"], &vars)?));
        for _ in 0..2 {
            for r in &readers {
                runs.push((r.clone(), m.run(r, &["--remote", url], &vars)?));
            }
            runs.push((writer.clone(), m.run(&writer, &["--remote", url, "--remote-writer"], &vars)?));
        }
        let losing = runs.iter().filter(|(_, r)| r.verified < r.programs).count();
        let mut problems = Vec::new();
        for (cache, r) in &runs {
            if r.keys != reference {
                problems.push(format!("{}: keys differ from a run without a shared tier", cache.display()));
            }
            if r.code == Some(0) && r.verified != r.programs {
                problems.push(format!("{}: exit 0 with {}/{} verified", cache.display(), r.verified, r.programs));
            }
        }
        for cache in std::iter::once(&writer).chain(&readers) {
            problems.extend(check_final_files(cache));
        }
        let fired = !mark.exists();
        let first_lost = runs[0].1.verified + 1 == runs[0].1.programs;
        let ok = fired && first_lost && losing == 1 && runs[1..].iter().all(|(_, r)| r.ok());
        let summary: Vec<String> = runs.iter().map(|(_, r)| format!("{}/{}", r.verified, r.programs)).collect();
        Ok(Seen::new(
            ok,
            &problems,
            format!("{} of {} runs lost a program (verified: {})", losing, runs.len(), summary.join(", ")),
        ))
    });
}
