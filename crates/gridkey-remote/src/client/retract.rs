//! Taking objects back from the shared tier (ADR 0030): a writer retracts an object that failed
//! its check after it was downloaded, an operator deletes what `gridkey cache retract` names,
//! and a reader asks for the checksum of an object without downloading it, to quarantine it.

use redis::Value;

use super::{add, Remote};
use crate::object::{Kind, CHECKSUM_BYTES, HEADER_BYTES, SIGNATURE_BYTES};
use crate::ObjectKey;

/// The trailing checksum of an object (its last [`CHECKSUM_BYTES`], the xxh3_128 over every
/// byte before it, ADR 0019): it names one object under a key, whoever wrote it.
pub type ObjectChecksum = [u8; CHECKSUM_BYTES];

/// The object under KEYS[1] holds exactly the payload ARGV[1] (an unsigned or signed object of
/// that payload): with ARGV[2] = `del`, deletes it and returns 1; otherwise returns its trailing
/// checksum. Returns 0 when there is no object or another one.
const HOLDS: &str = "local o = redis.call('GET', KEYS[1]) if not o then return 0 end \
    local p = ARGV[1] local h = tonumber(ARGV[3]) \
    if (#o ~= h + #p + tonumber(ARGV[4]) and #o ~= h + #p + tonumber(ARGV[5])) \
    or string.sub(o, h + 1, h + #p) ~= p then return 0 end \
    if ARGV[2] == 'del' then redis.call('DEL', KEYS[1]) return 1 end \
    return string.sub(o, -tonumber(ARGV[4]))";

/// What [`Remote::retract_many`] or [`Remote::delete_many`] did to one object: the shared-tier
/// protocol's [`gridkey_fingerprint::shared::Retracted`] (ADR 0041).
pub use gridkey_fingerprint::shared::Retracted;

impl Remote {
    /// Retracts the objects of `kind` for `items` (key, the payload this client fetched and
    /// rejected), in one round trip: each is deleted only while the object under its key still
    /// holds exactly that payload (a compare-and-delete in one Lua script), so a writer never
    /// deletes an object that another writer uploaded since it fetched. Read-only clients delete
    /// nothing.
    pub fn retract_many(&self, kind: Kind, items: &[(ObjectKey, &[u8])]) -> Vec<Retracted> {
        if !self.is_writer() {
            return vec![Retracted::ReadOnly; items.len()];
        }
        let Some(replies) = self.holds(kind, items, "del") else { return vec![Retracted::Off; items.len()] };
        replies
            .iter()
            .map(|r| if matches!(r, Value::Int(1)) { Retracted::Deleted } else { Retracted::NotThere })
            .collect()
    }

    /// Deletes the objects of `kind` under `keys`, whatever they hold, in one round trip: what
    /// an operator asks for (`gridkey cache retract`). Read-only clients delete nothing.
    pub fn delete_many(&self, kind: Kind, keys: &[ObjectKey]) -> Vec<Retracted> {
        if keys.is_empty() {
            return Vec::new();
        }
        if !self.is_writer() {
            return vec![Retracted::ReadOnly; keys.len()];
        }
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("DEL").arg(self.object_name(kind, key));
        }
        let Some(replies) = self.query::<i64>("deleting objects", &pipe) else {
            return vec![Retracted::Off; keys.len()];
        };
        replies.iter().map(|&n| if n > 0 { Retracted::Deleted } else { Retracted::NotThere }).collect()
    }

    /// The trailing checksum of the object under each key of `items` (key, payload) while it
    /// still holds exactly that payload, else `None`; in one round trip, downloading only the
    /// checksums. A reader quarantines a rejected object under this checksum. `None` for every
    /// item when the tier is off.
    pub fn checksums_holding(&self, kind: Kind, items: &[(ObjectKey, &[u8])]) -> Vec<Option<ObjectChecksum>> {
        let Some(replies) = self.holds(kind, items, "sum") else { return vec![None; items.len()] };
        replies.iter().map(checksum).collect()
    }

    /// The trailing checksum of the object of `kind` under each of `keys` (`None`: no object, or
    /// one too short to have one), in one round trip that downloads only the checksums: a
    /// quarantined object is recognised without fetching it. `None` when the tier is off.
    pub fn checksums(&self, kind: Kind, keys: &[ObjectKey]) -> Option<Vec<Option<ObjectChecksum>>> {
        if keys.is_empty() {
            return Some(Vec::new());
        }
        let mut pipe = redis::pipe();
        let tail = -(CHECKSUM_BYTES as i64);
        for key in keys {
            pipe.cmd("GETRANGE").arg(self.object_name(kind, key)).arg(tail).arg(-1);
        }
        // Each reply is at most one checksum: the bytes asked for are known before any arrive.
        let asked = (keys.len() * CHECKSUM_BYTES) as u64;
        let replies = self.request("reading object checksums", &pipe, asked, self.shared.deadline())?;
        Some(replies.iter().map(checksum).collect())
    }

    /// Counts `n` objects rejected after they were downloaded and passed their checks (a kernel
    /// that fails the reference, a library that does not load): they are
    /// [`crate::TierStats::rejected`] too.
    pub fn count_rejected(&self, n: u64) {
        add(&self.shared.counters.rejected, n);
    }

    /// One [`HOLDS`] per item, in one round trip; `None` when the tier is off.
    fn holds(&self, kind: Kind, items: &[(ObjectKey, &[u8])], mode: &str) -> Option<Vec<Value>> {
        if items.is_empty() {
            return Some(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (key, payload) in items {
            pipe.cmd("EVAL")
                .arg(HOLDS)
                .arg(1)
                .arg(self.object_name(kind, key))
                .arg(*payload)
                .arg(mode)
                .arg(HEADER_BYTES)
                .arg(CHECKSUM_BYTES)
                .arg(SIGNATURE_BYTES + CHECKSUM_BYTES);
        }
        let asked = (items.len() * CHECKSUM_BYTES) as u64;
        self.request("retracting objects", &pipe, asked, self.shared.deadline())
    }
}

/// A reply of 16 bytes as a checksum.
fn checksum(reply: &Value) -> Option<ObjectChecksum> {
    match reply {
        Value::BulkString(bytes) => bytes.as_slice().try_into().ok(),
        _ => None,
    }
}
