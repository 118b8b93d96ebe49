//! The objects of the shared tier that this node quarantined (ADR 0030): the shared-tier
//! protocol's quarantine, [`gridkey_fingerprint::shared::quarantine`], named here for the
//! commands and tests that read the file.

pub use gridkey_fingerprint::shared::quarantine::{hex, Quarantine, Quarantined, QUARANTINE_FILE};
