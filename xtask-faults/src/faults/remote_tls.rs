//! The shared tier's TLS rows of the fault matrix (ADR 0037): nodes over `rediss://` with the
//! site's CA file, a CA file of another authority, a certificate for another host, and a plain
//! server behind a `rediss://` URL. The servers are Debian's `redis-server` with a TLS port, and
//! the certificates are made for each run by `openssl`.

use std::os::unix::fs::PermissionsExt;

use anyhow::Result;

use super::super::{s, Matrix, Seen};
use super::{lost, names, Client, Shared};
use crate::redis_server::{certificates, RedisServer};

/// Runs the TLS rows.
pub(super) fn rows(m: &mut Matrix, sh: &mut Shared) -> Result<()> {
    let dir = m.fresh("remote-tls-certs");
    std::fs::create_dir_all(&dir)?;
    // The CA file is a trust anchor: its directory may be writable by no one else (ADR 0031).
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let ca = certificates(&dir, "site", Some("IP:127.0.0.1,DNS:localhost"))?;
    let other_ca = certificates(&dir, "other", None)?;
    certificates(&dir, "elsewhere", Some("DNS:cache.elsewhere.example"))?;
    let server = RedisServer::start_tls(&sh.binary, None, &["127.0.0.1"], &dir, "site")?;
    let url = server.tls_url("127.0.0.1").unwrap_or_default();
    let all = sh.reference.len();

    m.row("shared tier: rediss:// with the site's CA file", "a writer fills it, a reader hits every key", |m| {
        let ns = sh.ns("tls");
        let writer = Client::writer(&url, &ns).with("GRIDKEY_REMOTE_CA_FILE", s(&ca).to_owned());
        let seeded = m.seed(&writer)?;
        let cache = m.fresh("remote-tls-reader");
        let n = m.node(&cache, &Client::reader(&url, &ns).with("GRIDKEY_REMOTE_CA_FILE", s(&ca).to_owned()))?;
        // The plain port of the same server is the witness of what crossed over TLS.
        let stored = names(&server, &ns, "obj-v1:te:*")?.len();
        let ok = n.run.ok()
            && n.warnings() == 0
            && n.remote_hits() == all
            && n.run.translations() == 0
            && stored == all
            && server.tls_port().is_some();
        Ok(Seen::new(
            ok,
            &lost(&sh.reference, &[(cache, &n)]),
            format!(
                "{} remote hits of {all}, {stored} entries on the server (seeded from {})",
                n.remote_hits(),
                seeded.display()
            ),
        ))
    });

    let refused = |m: &mut Matrix, url: &str, ca: &std::path::Path, said: &[&str]| -> Result<Seen> {
        let cache = m.fresh("remote-tls-refused");
        let n = m.node(&cache, &Client::writer(url, "x").with("GRIDKEY_REMOTE_CA_FILE", s(ca).to_owned()))?;
        let ok = n.run.code == Some(2)
            && said.iter().all(|w| n.run.stderr.contains(w))
            && !cache.join(gridkey_fingerprint::TRANSLATION_DIR).exists();
        let last = n.run.stderr.lines().last().unwrap_or("").chars().take(110).collect::<String>();
        Ok(Seen::new(ok, &[], format!("exit {:?}: {last}", n.run.code)))
    };

    m.row("shared tier: rediss:// with another authority's CA file", "error at start naming the CA file", |m| {
        refused(m, &url, &other_ca, &["TLS handshake failed", s(&other_ca), "127.0.0.1"])
    });

    let elsewhere = RedisServer::start_tls(&sh.binary, None, &["127.0.0.1"], &dir, "elsewhere")?;
    let elsewhere_url = elsewhere.tls_url("127.0.0.1").unwrap_or_default();
    let elsewhere_ca = dir.join("elsewhere-ca.pem");
    m.row("shared tier: rediss:// to a certificate for another host", "error at start saying so", |m| {
        refused(m, &elsewhere_url, &elsewhere_ca, &["TLS handshake failed", "host name", "127.0.0.1"])
    });

    m.row("shared tier: plain server behind a rediss:// URL", "refused or off, nothing sent in plain text", |m| {
        let plain = format!("rediss://writer:s3cret-pw@127.0.0.1:{}/", sh.server.port());
        let ns = sh.ns("tls-plain");
        let cache = m.fresh("remote-tls-plain");
        let n = m.node(&cache, &Client::writer(&plain, &ns).with("GRIDKEY_REMOTE_CA_FILE", s(&ca).to_owned()))?;
        let written = names(&sh.server, &ns, "*")?.len();
        // Redis reads the ClientHello as an inline command: it answers an error (not TLS,
        // refused at start) or waits for the rest of the line (the handshake's deadline).
        let refused = n.run.code == Some(2) && n.run.stderr.contains("a plain server takes a redis:// URL");
        let off = n.run.ok() && n.warnings() == 1 && n.run.stderr.contains("no complete TLS handshake");
        let ok = (refused || off) && written == 0 && !n.run.stderr.contains("s3cret-pw");
        let last = n.run.stderr.lines().last().unwrap_or("").chars().take(110).collect::<String>();
        let lost = if off { lost(&sh.reference, &[(cache, &n)]) } else { Vec::new() };
        Ok(Seen::new(ok, &lost, format!("exit {:?}, {written} keys written: {last}", n.run.code)))
    });
    drop(elsewhere);
    drop(server);
    Ok(())
}
