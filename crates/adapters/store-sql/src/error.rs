//! What goes wrong in the database, classified so each failure says what to do, and how a
//! store's URL is shown without its password.

use fabric_core::StoreError;
use thiserror::Error;

/// A database failure, classified. Turned into [`StoreError::Database`] (with the store's
/// safe name and the fix) at the crate's edge.
#[derive(Debug, Error)]
pub enum SqlError {
    /// The SQLite file is not a database (overwritten, truncated, another format).
    #[error("the file is not a database ({0})")]
    Corrupt(String),
    /// The disk (or the database's quota) is full.
    #[error("the disk holding the database is full ({0})")]
    Full(String),
    /// The disk refused a read or write (SQLite's `SQLITE_IOERR`: often a full disk that
    /// SQLite met while growing its write-ahead log, or a failing one).
    #[error("the disk refused a read or write ({0})")]
    DiskIo(String),
    /// Another connection holds the lock past the busy timeout.
    #[error("the database is locked ({0})")]
    Locked(String),
    /// The server cannot be reached.
    #[error("cannot connect to {addr}: {detail}")]
    Unreachable {
        /// `host:port` (or the socket path).
        addr: String,
        /// The system's words.
        detail: String,
    },
    /// The schema was migrated by a newer fabric.
    #[error("its schema is version {found}, newer than this fabric knows (up to {known})")]
    NewerSchema {
        /// The version found in the database.
        found: i64,
        /// The newest version this fabric knows.
        known: i64,
    },
    /// The URL cannot be used.
    #[error("{0}")]
    BadUrl(String),
    /// Anything else, in the driver's words.
    #[error("{0}")]
    Other(String),
}

impl SqlError {
    /// Classifies a driver error; `addr` names the server for connection failures.
    pub(crate) fn from_sqlx(error: &sqlx::Error, addr: &str) -> Self {
        match error {
            sqlx::Error::Database(db) => {
                let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                let message = db.message().to_owned();
                match code.as_str() {
                    // PostgreSQL's SQLSTATEs: disk_full; admin or crash shutdown.
                    "53100" => Self::Full(message),
                    "57P01" | "57P02" | "57P03" => Self::Unreachable {
                        addr: addr.to_owned(),
                        detail: message,
                    },
                    // SQLite's result codes are numbers; the primary one is the low byte of
                    // the extended one.
                    sqlite => match sqlite.parse::<i64>().ok().map(|c| c & 0xff) {
                        Some(26) => Self::Corrupt(message),
                        Some(13) => Self::Full(message),
                        Some(10) => Self::DiskIo(message),
                        Some(5 | 6) => Self::Locked(message),
                        _ => Self::Other(message),
                    },
                }
            }
            sqlx::Error::Io(io) => Self::Unreachable {
                addr: addr.to_owned(),
                detail: io.to_string(),
            },
            sqlx::Error::Tls(tls) => Self::Unreachable {
                addr: addr.to_owned(),
                detail: format!("TLS: {tls}"),
            },
            sqlx::Error::PoolTimedOut => Self::Unreachable {
                addr: addr.to_owned(),
                detail: "timed out waiting for a connection".to_owned(),
            },
            sqlx::Error::PoolClosed => Self::Other("the store was closed".to_owned()),
            other => Self::Other(redact(&other.to_string())),
        }
    }

    /// The port's error, naming the store and the fix.
    pub(crate) fn into_store(self, store: &str) -> StoreError {
        let fix = match &self {
            Self::Corrupt(_) => {
                "move it aside and run `fabric index rebuild` to rebuild it from the runlogs"
            }
            Self::Full(_) => {
                "free space on that disk and retry; runs already written keep their runlogs, and `fabric index rebuild` brings the index up to date"
            }
            Self::DiskIo(_) => {
                "check that the disk holding it has free space (`df -h`) and works; runs already written keep their runlogs, and `fabric index rebuild` brings the index up to date"
            }
            Self::Locked(_) => {
                "another process holds a lock on it past the busy timeout; wait for it to finish (or stop it) and retry"
            }
            Self::Unreachable { .. } => "start PostgreSQL, or fix `store.url` / `FABRIC_STORE_URL`",
            Self::NewerSchema { .. } => "upgrade fabric to a version that knows this schema",
            Self::BadUrl(_) => {
                "use `postgres://user@host:port/database`, or leave `store.url` unset for SQLite"
            }
            Self::Other(_) => {
                "check the database server's log; `fabric index rebuild` rebuilds the index from the runlogs"
            }
        };
        StoreError::Database {
            store: store.to_owned(),
            detail: self.to_string(),
            fix: fix.to_owned(),
        }
    }
}

/// A URL, or text that may hold one, without the password (`user:secret@` → `user@`).
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(scheme) = rest.find("://") {
        let (head, tail) = rest.split_at(scheme + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c == '?' || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                let user = userinfo.split(':').next().unwrap_or_default();
                out.push_str(user);
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgres://fabric:s3cret@db.example:5432/runs?sslmode=require"),
            "postgres://fabric@db.example:5432/runs?sslmode=require"
        );
        assert_eq!(
            redact("error at postgres://a:b@h/d and postgres://h2/d2"),
            "error at postgres://a@h/d and postgres://h2/d2"
        );
        assert_eq!(redact("sqlite:/x/fabric.db"), "sqlite:/x/fabric.db");
    }
}
