//! The Redis server process of `xtask-common` and, on top of it, what the drivers send it with
//! the `redis` crate: commands that plant, flush, pause and count, from outside the client under
//! test.

pub use xtask_common::redis_server::*;

use std::time::Duration;

use anyhow::Result;

/// Commands to a [`RedisServer`] over connections of the `redis` crate.
pub trait ServerCommands {
    /// A connection to the server with 5 s timeouts, for driving it from outside the client
    /// under test.
    ///
    /// Errors: the server cannot be reached.
    fn connection(&self) -> Result<redis::Connection>;

    /// One command over a fresh connection: its reply as a `redis::Value`.
    ///
    /// Errors: the server cannot be reached or answers with an error.
    fn command(&self, words: &[&str]) -> Result<redis::Value>;

    /// Sets the raw bytes of `name` (what a hostile or broken writer could do).
    ///
    /// Errors: as [`ServerCommands::command`].
    fn set_raw(&self, name: &str, value: &[u8]) -> Result<()>;

    /// The raw bytes of `name`, if any.
    ///
    /// Errors: as [`ServerCommands::command`].
    fn get_raw(&self, name: &str) -> Result<Option<Vec<u8>>>;
}

impl ServerCommands for RedisServer {
    fn connection(&self) -> Result<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        let con = client.get_connection_with_timeout(Duration::from_secs(1))?;
        con.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(con)
    }

    fn command(&self, words: &[&str]) -> Result<redis::Value> {
        let mut cmd = redis::cmd(words[0]);
        for w in &words[1..] {
            cmd.arg(*w);
        }
        Ok(cmd.query(&mut self.connection()?)?)
    }

    fn set_raw(&self, name: &str, value: &[u8]) -> Result<()> {
        redis::cmd("SET").arg(name).arg(value).query::<()>(&mut self.connection()?)?;
        Ok(())
    }

    fn get_raw(&self, name: &str) -> Result<Option<Vec<u8>>> {
        Ok(redis::cmd("GET").arg(name).query(&mut self.connection()?)?)
    }
}
