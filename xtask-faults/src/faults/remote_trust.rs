//! The shared tier's trust rows of the fault matrix (ADR 0031): forged and replayed objects, a
//! reader without trusted keys, and `cache push` from a tampered or world-writable cache (the
//! TLS rows are in `remote_tls.rs`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{bail, Context, Result};
use gridkey_remote::trust::generate_signing_key;

use super::super::{s, Matrix, Seen};
use super::{lost, names, Client, Shared};
use crate::redis_server::ServerCommands as _;

/// Runs the trust rows.
pub(super) fn rows(m: &mut Matrix, sh: &mut Shared) -> Result<()> {
    let keys = m.fresh("remote-trust-keys");
    std::fs::create_dir_all(&keys)?;
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o700))?;
    let writer_key = keys.join("writer.key");
    let public = generate_signing_key(&writer_key)?;
    let trusted = keys.join("trusted");
    std::fs::write(&trusted, format!("{public} ci\n"))?;
    let all = sh.reference.len();
    forgery_rows(m, sh, &writer_key, &trusted, all)?;
    push_rows(m, sh, &writer_key, &trusted)
}

/// Forged objects for a reader without trusted keys, and signed objects replayed under another
/// key and kind: `writer_key` signs, `trusted` lists its public key, `all` is the programs' count.
fn forgery_rows(m: &mut Matrix, sh: &mut Shared, writer_key: &Path, trusted: &Path, all: usize) -> Result<()> {
    m.row(
        "shared tier: forged objects, reader without trusted keys (no opt-in)",
        "nothing downloaded, translated and built here",
        |m| {
            let url = sh.server.url();
            let ns = sh.ns("forged");
            // Unsigned objects, as any client with the password can write them.
            m.seed(&Client::writer(&url, &ns))?;
            let cache = m.fresh("remote-forged");
            let n = m.node(&cache, &Client::reader(&url, &ns).with("GRIDKEY_REMOTE_TRUST", "signed"))?;
            let st = n.remote();
            let said = n.run.stderr.contains("no trusted keys: nothing is taken from the shared tier");
            let ok = n.run.ok()
                && said
                && n.remote_hits() == 0
                && st.bytes_in == 0
                && n.run.translations() == all
                && n.builds() == all;
            Ok(Seen::new(
                ok,
                &lost(&sh.reference, &[(cache, &n)]),
                format!("{} bytes in, {} built, start line {said}, {}", st.bytes_in, n.builds(), n.run.summary()),
            ))
        },
    );

    m.row("shared tier: signed objects replayed under another key and kind", "rejected, same results", |m| {
        let url = sh.server.url();
        let ns = sh.ns("replay");
        m.seed(&Client::writer(&url, &ns).with("GRIDKEY_REMOTE_SIGNING_KEY", s(writer_key).to_owned()))?;
        let entries = names(&sh.server, &ns, "obj-v1:te:*")?;
        let libraries = names(&sh.server, &ns, "obj-v1:kl:*")?;
        let (Some(first), Some(second), Some(library)) = (entries.first(), entries.get(1), libraries.first()) else {
            bail!("the seed left fewer than two entries or no library");
        };
        let signed = sh.server.get_raw(second)?.context("object missing")?;
        // A validly signed translation entry under another key, and as a kernel library.
        sh.server.set_raw(first, &signed)?;
        sh.server.set_raw(library, &signed)?;
        let cache = m.fresh("remote-replay");
        let n =
            m.node(&cache, &Client::reader(&url, &ns).with("GRIDKEY_REMOTE_TRUSTED_KEYS", s(trusted).to_owned()))?;
        let st = n.remote();
        let ok = n.run.ok() && st.rejected >= 1 && n.remote_hits() == all - 1 && n.run.translations() == 1;
        Ok(Seen::new(
            ok,
            &lost(&sh.reference, &[(cache, &n)]),
            format!("{} rejected, {} remote hits, {}", st.rejected, n.remote_hits(), n.run.summary()),
        ))
    });
    Ok(())
}

/// `cache push` from a cache with a tampered library and from a world-writable cache.
fn push_rows(m: &mut Matrix, sh: &mut Shared, writer_key: &Path, trusted: &Path) -> Result<()> {
    m.row(
        "shared tier: cache push from a cache with a tampered library",
        "that library and its entry not pushed",
        |m| {
            let url = sh.server.url();
            let ns = sh.ns("push-tampered");
            let cache = m.fresh("remote-push-tampered");
            let first = m.run(&cache, &[], &[])?;
            if !first.ok() {
                bail!("filling the cache failed: {}", first.why());
            }
            let build = cache.join(gridkey_stencil::BUILD_DIR);
            let mut libs: Vec<_> = std::fs::read_dir(&build)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
            libs.retain(|p| p.extension().is_some_and(|e| e == "so"));
            libs.sort();
            let victim = libs.first().context("no library in the cache")?;
            let mut bytes = std::fs::read(victim)?;
            let i = bytes.len() / 2;
            bytes[i] ^= 0x01;
            std::fs::write(victim, &bytes)?;
            let writer = Client::writer(&url, &ns).with("GRIDKEY_REMOTE_SIGNING_KEY", s(writer_key).to_owned());
            let mut args = vec!["cache", "push", "--json", "--cache-dir", s(&cache)];
            args.extend(writer.args());
            let out = m.gridkey(&args, &writer.vars())?;
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let pushed = names(&sh.server, &ns, "obj-v1:kl:*")?.len();
            let named = stderr.contains(&victim.display().to_string());
            // A reader that trusts the writer still runs everything, building the left-out one.
            let fresh = m.fresh("remote-push-reader");
            let n =
                m.node(&fresh, &Client::reader(&url, &ns).with("GRIDKEY_REMOTE_TRUSTED_KEYS", s(trusted).to_owned()))?;
            let ok = out.status.success()
                && named
                && report["skipped"].as_u64() == Some(1)
                && pushed == libs.len() - 1
                && n.run.ok()
                && n.builds() >= 1;
            Ok(Seen::new(
                ok,
                &lost(&sh.reference, &[(fresh, &n)]),
                format!("{pushed}/{} libraries pushed, victim named {named}, reader {}", libs.len(), n.run.summary()),
            ))
        },
    );

    m.row("shared tier: cache push from a world-writable cache", "refused, nothing pushed", |m| {
        let url = sh.server.url();
        let ns = sh.ns("push-open");
        let cache = m.filled("remote-push-open")?;
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777))?;
        let writer = Client::writer(&url, &ns);
        let mut args = vec!["cache", "push", "--json", "--cache-dir", s(&cache)];
        args.extend(writer.args());
        let out = m.gridkey(&args, &writer.vars())?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let written = names(&sh.server, &ns, "*")?;
        let ok = out.status.code() == Some(2) && stderr.contains("cannot push from") && written.is_empty();
        let first = stderr.lines().next().unwrap_or("").chars().take(90).collect::<String>();
        Ok(Seen::new(ok, &[], format!("exit {:?}, {} keys written: {first}", out.status.code(), written.len())))
    });
    Ok(())
}
