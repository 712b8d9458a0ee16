//! A thin layer over the two sqlx drivers, so every query is written once.
//!
//! SQL is written with `$1, $2, …` placeholders, which both SQLite (as named parameters sqlx
//! numbers) and PostgreSQL accept; values travel as [`Arg`]s and come back through [`Row`]'s
//! typed getters. Only fixed SQL fragments and placeholders are ever put together into a
//! statement: user input is always a bound value.

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, PgRow};
use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::{AssertSqlSafe, Postgres, Row as _, Sqlite, Transaction};

/// One bound value.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Int(i64),
    OptInt(Option<i64>),
    Real(f64),
    OptReal(Option<f64>),
    Text(String),
    OptText(Option<String>),
    Blob(Vec<u8>),
}

impl From<&str> for Arg {
    fn from(value: &str) -> Self {
        Self::Text(value.to_owned())
    }
}

impl From<String> for Arg {
    fn from(value: String) -> Self {
        Self::Text(value)
    }
}

impl From<i64> for Arg {
    fn from(value: i64) -> Self {
        Self::Int(value)
    }
}

impl From<f64> for Arg {
    fn from(value: f64) -> Self {
        Self::Real(value)
    }
}

/// Which database the store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

/// A connection pool of either kind.
#[derive(Debug, Clone)]
pub(crate) enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// One connection of either kind, taken from the pool for queries in a row. A query through
/// the pool hands its connection back in a task of its own (sqlx pings it first), so the next
/// query, sent at once, finds none idle and opens another: on SQLite a thread, the file and
/// a parse of the schema, about half a millisecond on the way to a cold `fabric run`'s first
/// model call (issue #26).
pub(crate) enum Conn {
    Sqlite(PoolConnection<Sqlite>),
    Postgres(PoolConnection<Postgres>),
}

/// An open transaction of either kind.
pub(crate) enum Tx {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
}

/// A result row of either kind.
pub(crate) enum Row {
    Sqlite(SqliteRow),
    Postgres(PgRow),
}

/// Statements with more values than this are not kept prepared: they are the multi-row
/// inserts, one text per row count, and each kept statement holds its whole program (with
/// 10,000 runs in flight, the cache of a hundred of them cost more than the runs' state).
const PREPARED_MAX_ARGS: usize = 32;

macro_rules! bind_all {
    ($query:expr, $args:expr) => {{
        let persistent = $args.len() <= PREPARED_MAX_ARGS;
        let mut query = $query.persistent(persistent);
        for arg in $args {
            query = match arg {
                Arg::Int(v) => query.bind(v),
                Arg::OptInt(v) => query.bind(v),
                Arg::Real(v) => query.bind(v),
                Arg::OptReal(v) => query.bind(v),
                Arg::Text(v) => query.bind(v),
                Arg::OptText(v) => query.bind(v),
                Arg::Blob(v) => query.bind(v),
            };
        }
        query
    }};
}

impl Db {
    pub(crate) fn backend(&self) -> Backend {
        match self {
            Self::Sqlite(_) => Backend::Sqlite,
            Self::Postgres(_) => Backend::Postgres,
        }
    }

    /// Runs one statement; returns the rows it changed.
    pub(crate) async fn execute(&self, sql: &str, args: Vec<Arg>) -> Result<u64, sqlx::Error> {
        let sql = AssertSqlSafe(for_backend(self.backend(), sql));
        Ok(match self {
            Self::Sqlite(pool) => bind_all!(sqlx::query::<Sqlite>(sql), args)
                .execute(pool)
                .await?
                .rows_affected(),
            Self::Postgres(pool) => bind_all!(sqlx::query::<Postgres>(sql), args)
                .execute(pool)
                .await?
                .rows_affected(),
        })
    }

    /// Runs one query; returns its rows.
    pub(crate) async fn fetch_all(
        &self,
        sql: &str,
        args: Vec<Arg>,
    ) -> Result<Vec<Row>, sqlx::Error> {
        let sql = AssertSqlSafe(for_backend(self.backend(), sql));
        Ok(match self {
            Self::Sqlite(pool) => bind_all!(sqlx::query::<Sqlite>(sql), args)
                .fetch_all(pool)
                .await?
                .into_iter()
                .map(Row::Sqlite)
                .collect(),
            Self::Postgres(pool) => bind_all!(sqlx::query::<Postgres>(sql), args)
                .fetch_all(pool)
                .await?
                .into_iter()
                .map(Row::Postgres)
                .collect(),
        })
    }

    /// Runs one query; returns its first row, if any.
    pub(crate) async fn fetch_optional(
        &self,
        sql: &str,
        args: Vec<Arg>,
    ) -> Result<Option<Row>, sqlx::Error> {
        let sql = AssertSqlSafe(for_backend(self.backend(), sql));
        Ok(match self {
            Self::Sqlite(pool) => bind_all!(sqlx::query::<Sqlite>(sql), args)
                .fetch_optional(pool)
                .await?
                .map(Row::Sqlite),
            Self::Postgres(pool) => bind_all!(sqlx::query::<Postgres>(sql), args)
                .fetch_optional(pool)
                .await?
                .map(Row::Postgres),
        })
    }

    /// Starts a write transaction. SQLite takes the write lock at once (`BEGIN IMMEDIATE`), so
    /// a busy database is reported at the start, after the busy timeout, not half-way.
    pub(crate) async fn begin(&self) -> Result<Tx, sqlx::Error> {
        Ok(match self {
            Self::Sqlite(pool) => Tx::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?),
            Self::Postgres(pool) => Tx::Postgres(pool.begin().await?),
        })
    }

    /// Takes one connection from the pool for several queries in a row.
    pub(crate) async fn acquire(&self) -> Result<Conn, sqlx::Error> {
        Ok(match self {
            Self::Sqlite(pool) => Conn::Sqlite(pool.acquire().await?),
            Self::Postgres(pool) => Conn::Postgres(pool.acquire().await?),
        })
    }

    /// Closes every connection.
    pub(crate) async fn close(&self) {
        match self {
            Self::Sqlite(pool) => pool.close().await,
            Self::Postgres(pool) => pool.close().await,
        }
    }
}

/// One connection of either kind, borrowed from a [`Conn`] or a [`Tx`] (a transaction is a
/// connection underneath): the queries both run, written once.
enum On<'a> {
    Sqlite(&'a mut sqlx::SqliteConnection),
    Postgres(&'a mut sqlx::PgConnection),
}

impl On<'_> {
    fn backend(&self) -> Backend {
        match self {
            Self::Sqlite(_) => Backend::Sqlite,
            Self::Postgres(_) => Backend::Postgres,
        }
    }

    async fn execute(self, sql: &str, args: Vec<Arg>) -> Result<u64, sqlx::Error> {
        let sql = AssertSqlSafe(for_backend(self.backend(), sql));
        Ok(match self {
            Self::Sqlite(conn) => bind_all!(sqlx::query::<Sqlite>(sql), args)
                .execute(conn)
                .await?
                .rows_affected(),
            Self::Postgres(conn) => bind_all!(sqlx::query::<Postgres>(sql), args)
                .execute(conn)
                .await?
                .rows_affected(),
        })
    }

    async fn fetch_all(self, sql: &str, args: Vec<Arg>) -> Result<Vec<Row>, sqlx::Error> {
        let sql = AssertSqlSafe(for_backend(self.backend(), sql));
        Ok(match self {
            Self::Sqlite(conn) => bind_all!(sqlx::query::<Sqlite>(sql), args)
                .fetch_all(conn)
                .await?
                .into_iter()
                .map(Row::Sqlite)
                .collect(),
            Self::Postgres(conn) => bind_all!(sqlx::query::<Postgres>(sql), args)
                .fetch_all(conn)
                .await?
                .into_iter()
                .map(Row::Postgres)
                .collect(),
        })
    }

    async fn fetch_optional(self, sql: &str, args: Vec<Arg>) -> Result<Option<Row>, sqlx::Error> {
        let sql = AssertSqlSafe(for_backend(self.backend(), sql));
        Ok(match self {
            Self::Sqlite(conn) => bind_all!(sqlx::query::<Sqlite>(sql), args)
                .fetch_optional(conn)
                .await?
                .map(Row::Sqlite),
            Self::Postgres(conn) => bind_all!(sqlx::query::<Postgres>(sql), args)
                .fetch_optional(conn)
                .await?
                .map(Row::Postgres),
        })
    }
}

impl Conn {
    fn on(&mut self) -> On<'_> {
        match self {
            Self::Sqlite(conn) => On::Sqlite(conn),
            Self::Postgres(conn) => On::Postgres(conn),
        }
    }

    pub(crate) fn backend(&self) -> Backend {
        match self {
            Self::Sqlite(_) => Backend::Sqlite,
            Self::Postgres(_) => Backend::Postgres,
        }
    }

    /// Runs one query on this connection; returns its rows.
    pub(crate) async fn fetch_all(
        &mut self,
        sql: &str,
        args: Vec<Arg>,
    ) -> Result<Vec<Row>, sqlx::Error> {
        self.on().fetch_all(sql, args).await
    }

    /// Runs one query on this connection; returns its first row, if any.
    pub(crate) async fn fetch_optional(
        &mut self,
        sql: &str,
        args: Vec<Arg>,
    ) -> Result<Option<Row>, sqlx::Error> {
        self.on().fetch_optional(sql, args).await
    }
}

impl Tx {
    fn on(&mut self) -> On<'_> {
        match self {
            Self::Sqlite(tx) => On::Sqlite(tx),
            Self::Postgres(tx) => On::Postgres(tx),
        }
    }

    /// Runs one statement in the transaction; returns the rows it changed.
    pub(crate) async fn execute(&mut self, sql: &str, args: Vec<Arg>) -> Result<u64, sqlx::Error> {
        self.on().execute(sql, args).await
    }

    /// Runs several statements without values (migrations).
    pub(crate) async fn execute_script(&mut self, sql: &'static str) -> Result<(), sqlx::Error> {
        match self {
            Self::Sqlite(tx) => sqlx::raw_sql(sql).execute(&mut **tx).await.map(drop),
            Self::Postgres(tx) => sqlx::raw_sql(sql).execute(&mut **tx).await.map(drop),
        }
    }

    /// Runs one query in the transaction; returns its rows.
    pub(crate) async fn fetch_all(
        &mut self,
        sql: &str,
        args: Vec<Arg>,
    ) -> Result<Vec<Row>, sqlx::Error> {
        self.on().fetch_all(sql, args).await
    }

    /// Makes the transaction's writes durable.
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Self::Sqlite(tx) => tx.commit().await,
            Self::Postgres(tx) => tx.commit().await,
        }
    }
}

macro_rules! getter {
    ($name:ident, $ty:ty) => {
        pub(crate) fn $name(&self, column: &str) -> Result<$ty, sqlx::Error> {
            match self {
                Self::Sqlite(row) => row.try_get(column),
                Self::Postgres(row) => row.try_get(column),
            }
        }
    };
}

impl Row {
    getter!(int, i64);
    getter!(real, f64);
    getter!(opt_real, Option<f64>);
    getter!(text, String);
    getter!(opt_text, Option<String>);
    getter!(blob, Vec<u8>);
}

/// The statement as the backend gets it. On SQLite, a statement whose placeholders are
/// exactly `$1, $2, …, $N` in order, each once (every multi-row insert), gets anonymous `?`s:
/// sqlx asks SQLite for each numbered parameter's name, and SQLite finds a name by walking
/// the statement's list of them, so binding N numbered values costs N² (14 % of the writer's
/// time with 10,000 runs in flight); anonymous ones bind in order for free.
fn for_backend(backend: Backend, sql: &str) -> String {
    if backend == Backend::Postgres {
        return sql.to_owned();
    }
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let (mut next, mut at, mut copied) = (1u64, 0usize, 0usize);
    while at < bytes.len() {
        if bytes[at] != b'$' {
            at += 1;
            continue;
        }
        let digits = bytes[at + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let number = sql[at + 1..at + 1 + digits].parse::<u64>().ok();
        if number != Some(next) {
            // Reused, skipped or out of order: keep the numbers.
            return sql.to_owned();
        }
        out.push_str(&sql[copied..at]);
        out.push('?');
        next += 1;
        at += 1 + digits;
        copied = at;
    }
    out.push_str(&sql[copied..]);
    out
}

/// `$first, $first+1, …` for `count` values: the placeholders of an `IN (…)` list.
pub(crate) fn placeholders(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|n| format!("${n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_gets_anonymous_placeholders_only_when_they_are_in_order() {
        let sqlite = |sql: &str| for_backend(Backend::Sqlite, sql);
        assert_eq!(
            sqlite("INSERT INTO t VALUES ($1, $2), ($3, $4)"),
            "INSERT INTO t VALUES (?, ?), (?, ?)"
        );
        assert_eq!(sqlite("SELECT 1"), "SELECT 1");
        assert_eq!(sqlite("x = $10"), "x = $10");
        // Reused: the numbers stay.
        let reused = "SELECT $1, $2 FROM e WHERE model = $1";
        assert_eq!(sqlite(reused), reused);
        let out_of_order = "a = $2 AND b = $1";
        assert_eq!(sqlite(out_of_order), out_of_order);
        // Ten and beyond are whole numbers, not $1 followed by a digit.
        let many: Vec<String> = (1..=12).map(|n| format!("${n}")).collect();
        assert_eq!(sqlite(&many.join(",")), ["?"; 12].join(","));
        let pg = "INSERT INTO t VALUES ($1, $2)";
        assert_eq!(for_backend(Backend::Postgres, pg), pg);
    }
}
