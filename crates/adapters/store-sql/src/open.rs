//! Opening a store: choosing the backend from the URL, connecting with the right pragmas,
//! migrating, starting the writer and catching up with the runlogs.

use std::path::Path;
use std::sync::Arc;

use fabric_core::StoreError;
use fabric_store_fs::FsRunStore;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use crate::db::{Conn, Db};
use crate::error::{SqlError, redact};
use crate::schema::{self, Migrated, SCHEMA_VERSION};
use crate::{Inner, SQLITE_FILE, SqlStore, StoreOptions, reconcile, vectors, writer};

pub(crate) async fn open(
    url: Option<&str>,
    root: &Path,
    options: StoreOptions,
) -> Result<SqlStore, StoreError> {
    let (db, name, addr) = match url.map(str::trim).filter(|u| !u.is_empty()) {
        None => connect_sqlite(root, &options).await?,
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            connect_postgres(url, &options).await?
        }
        Some(url) if url.starts_with("sqlite:") => {
            return Err(SqlError::BadUrl(format!(
                "`{}`: SQLite is the default and always lives in the workspace root",
                redact(url)
            ))
            .into_store("sqlite"));
        }
        Some(url) => {
            return Err(
                SqlError::BadUrl(format!("`{}` is not a postgres:// URL", redact(url)))
                    .into_store("store"),
            );
        }
    };
    // The version check and the open-time reads of `catch_up` go on one connection (see
    // `Conn`); a schema that is not current is migrated through the pool, then one is taken
    // again.
    let conn = match open_current(&db, &name).await {
        Ok(conn) => conn,
        Err(e) => {
            db.close().await;
            return Err(e);
        }
    };
    let (sender, receiver) = writer::channel(options.queue);
    let store = SqlStore {
        inner: Arc::new(Inner {
            db: db.clone(),
            name: name.clone(),
            addr,
            fs: FsRunStore::new(root),
            root: root.to_path_buf(),
            writer: sender,
            vectors: vectors::VectorCache::default(),
            index_min: options.vector_index_min.max(1),
            tail_max: options.vector_tail_max.max(1),
            listener: tokio::sync::OnceCell::new(),
            prune_hook: std::sync::OnceLock::new(),
        }),
    };
    tokio::spawn(writer::run(
        writer::Writer::new(db, name, root.to_path_buf(), options),
        receiver,
    ));
    reconcile::catch_up(&store, conn).await?;
    Ok(store)
}

/// A connection to a database whose schema is this fabric's: migrated if it was older,
/// refused if it is newer.
async fn open_current(db: &Db, name: &str) -> Result<Conn, StoreError> {
    let sql_error = |e: sqlx::Error| SqlError::from_sqlx(&e, name).into_store(name);
    let mut conn = db.acquire().await.map_err(sql_error)?;
    if schema::current_version(&mut conn)
        .await
        .map_err(sql_error)?
        == SCHEMA_VERSION
    {
        return Ok(conn);
    }
    drop(conn);
    migrate(db, name).await?;
    db.acquire().await.map_err(sql_error)
}

/// Migrates, or refuses a database from a newer fabric.
pub(crate) async fn migrate(db: &Db, name: &str) -> Result<(), StoreError> {
    match schema::migrate(db).await {
        Ok(Migrated::UpToDate(applied)) => {
            if applied > 0 {
                tracing::info!(store = %name, version = SCHEMA_VERSION, applied, "store migrated");
            }
            Ok(())
        }
        Ok(Migrated::Newer(found)) => Err(SqlError::NewerSchema {
            found,
            known: SCHEMA_VERSION,
        }
        .into_store(name)),
        Err(e) => Err(SqlError::from_sqlx(&e, name).into_store(name)),
    }
}

async fn connect_sqlite(
    root: &Path,
    options: &StoreOptions,
) -> Result<(Db, String, String), StoreError> {
    let path = root.join(SQLITE_FILE);
    let name = format!("sqlite:{}", path.display());
    tokio::fs::create_dir_all(root)
        .await
        .map_err(|e| StoreError::Io {
            action: "cannot create",
            path: root.to_path_buf(),
            detail: e.to_string(),
        })?;
    let connect = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // WAL + NORMAL: durable across process crashes; a power cut may lose the last
        // transactions, which the runlogs (the source of truth) restore on reindex.
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(options.busy_timeout)
        .foreign_keys(false);
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .min_connections(1)
        .acquire_timeout(options.connect_timeout.max(options.busy_timeout))
        .connect_with(connect)
        .await
        .map_err(|e| SqlError::from_sqlx(&e, &name).into_store(&name))?;
    Ok((Db::Sqlite(pool), name.clone(), name))
}

async fn connect_postgres(
    url: &str,
    options: &StoreOptions,
) -> Result<(Db, String, String), StoreError> {
    let connect: PgConnectOptions = url.parse().map_err(|e: sqlx::Error| {
        SqlError::BadUrl(format!(
            "not a usable PostgreSQL URL: {}",
            redact(&e.to_string())
        ))
        .into_store(&redact(url))
    })?;
    let connect = connect.application_name("fabric");
    let addr = match connect.get_socket() {
        Some(socket) => socket.display().to_string(),
        None => format!("{}:{}", connect.get_host(), connect.get_port()),
    };
    let name = format!(
        "postgres://{}@{}/{}",
        connect.get_username(),
        addr,
        connect.get_database().unwrap_or_default()
    );
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(options.connect_timeout)
        .connect_with(connect)
        .await
        .map_err(|e| SqlError::from_sqlx(&e, &addr).into_store(&name))?;
    Ok((Db::Postgres(pool), name, addr))
}
