//! A throwaway PostgreSQL cluster for tests: `initdb` + `pg_ctl` from
//! `/usr/lib/postgresql/*/bin` in a temporary directory, on a free port of 127.0.0.1, its
//! socket inside the directory. As root (these machines), every PostgreSQL command runs as
//! the unprivileged `postgres` user through `runuser`, since PostgreSQL refuses root.
//!
//! [`PgCluster::shared`] gives one cluster per test binary (tests take a fresh database each
//! with [`PgCluster::create_database`]); a watchdog process stops it and removes its
//! directory when the test binary exits. [`PgCluster::start`] gives an owned cluster, stopped
//! on drop, for tests that stop and restart the server.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use thiserror::Error;

/// Why a cluster could not be had.
#[derive(Debug, Error)]
pub enum PgError {
    /// PostgreSQL's server binaries are not installed.
    #[error(
        "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb); run scripts/install-test-deps.sh"
    )]
    NotInstalled,
    /// A command failed.
    #[error("{command}: {detail}")]
    Command {
        /// What ran.
        command: String,
        /// Its output or error.
        detail: String,
    },
}

/// A running PostgreSQL cluster in a temporary directory.
#[derive(Debug)]
pub struct PgCluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    as_postgres: bool,
    owned: bool,
    /// Keep the directory when dropped (a cluster reused across processes, for benchmarks).
    keep: bool,
}

static SHARED: OnceLock<Result<PgCluster, String>> = OnceLock::new();
static DATABASES: AtomicUsize = AtomicUsize::new(0);

/// The newest installed PostgreSQL's `bin` directory.
pub fn postgres_bin() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// A cluster for this test binary, or why there is none. With `FABRIC_REQUIRE_TEST_DEPS=1`
/// a missing install panics (the test fails, naming scripts/install-test-deps.sh); otherwise
/// the caller should print a loud SKIP and return.
pub fn shared_cluster() -> Result<&'static PgCluster, String> {
    let cluster = SHARED.get_or_init(|| {
        PgCluster::start_inner(false)
            .and_then(|c| c.watch_parent().map(|()| c))
            .map_err(|e| e.to_string())
    });
    match cluster {
        Ok(cluster) => Ok(cluster),
        Err(e) => {
            if std::env::var("FABRIC_REQUIRE_TEST_DEPS").as_deref() == Ok("1") {
                panic!(
                    "FABRIC_REQUIRE_TEST_DEPS=1 but no PostgreSQL for the tests: {e} (run scripts/install-test-deps.sh)"
                );
            }
            Err(e.clone())
        }
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn run(command: &mut Command) -> Result<String, PgError> {
    let text = format!("{command:?}");
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| PgError::Command {
            command: text.clone(),
            detail: e.to_string(),
        })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(PgError::Command {
            command: text,
            detail: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        })
    }
}

fn free_port() -> Result<u16, PgError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| PgError::Command {
            command: "bind 127.0.0.1:0".into(),
            detail: e.to_string(),
        })
}

impl PgCluster {
    /// Starts an owned cluster, stopped (and its directory removed) on drop.
    pub fn start() -> Result<Self, PgError> {
        Self::start_inner(true)
    }

    fn start_inner(owned: bool) -> Result<Self, PgError> {
        let dir = std::env::temp_dir().join(format!(
            "fabric-pg-{}-{}",
            std::process::id(),
            DATABASES.fetch_add(1, Ordering::SeqCst)
        ));
        Self::start_in(dir, owned, false)
    }

    /// Starts a cluster kept in `dir` across processes: created there the first time, reused
    /// (with its databases) afterwards; stopped on drop but not removed. For benchmarks that
    /// fill a database once.
    pub fn start_persistent(dir: &Path) -> Result<Self, PgError> {
        Self::start_in(dir.to_path_buf(), true, true)
    }

    fn start_in(dir: PathBuf, owned: bool, keep: bool) -> Result<Self, PgError> {
        let bin = postgres_bin().ok_or(PgError::NotInstalled)?;
        let existing = dir.join("data").join("PG_VERSION").is_file();
        std::fs::create_dir_all(dir.join("sock")).map_err(|e| PgError::Command {
            command: format!("mkdir {}", dir.display()),
            detail: e.to_string(),
        })?;
        let as_postgres = is_root();
        if as_postgres {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir))?;
        }
        let cluster = Self {
            bin,
            dir,
            port: free_port()?,
            as_postgres,
            owned,
            keep,
        };
        if existing {
            cluster.start_server()?;
            return Ok(cluster);
        }
        run(cluster
            .pg("initdb")
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "-D",
            ])
            .arg(cluster.dir.join("data")))?;
        cluster.start_server()?;
        Ok(cluster)
    }

    /// A PostgreSQL program, run as `postgres` when we are root.
    fn pg(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }

    /// Starts (or restarts) the server and waits until it accepts connections.
    pub fn start_server(&self) -> Result<(), PgError> {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c full_page_writes=off",
            self.port,
            self.dir.join("sock").display()
        );
        run(self
            .pg("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("server.log"))
            .args(["-o", &options, "-w", "-t", "60", "start"]))
        .map(drop)
    }

    /// Stops the server at once (as if it crashed or the network dropped).
    pub fn stop_server(&self) -> Result<(), PgError> {
        run(self
            .pg("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"]))
        .map(drop)
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The URL of database `name` on this cluster (which may not exist yet).
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Creates database `name`; returns its URL.
    pub fn create_named_database(&self, name: &str) -> Result<String, PgError> {
        run(self
            .pg("createdb")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .arg(name))?;
        Ok(self.url(name))
    }

    /// Creates a fresh database; returns its URL (`postgres://postgres@127.0.0.1:PORT/NAME`).
    pub fn create_database(&self) -> Result<String, PgError> {
        let name = format!("fabric_test_{}", DATABASES.fetch_add(1, Ordering::SeqCst));
        run(self
            .pg("createdb")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .arg(&name))?;
        Ok(format!(
            "postgres://postgres@127.0.0.1:{}/{name}",
            self.port
        ))
    }

    /// A process that stops the cluster and removes its directory once this process is gone
    /// (a `static` is never dropped).
    fn watch_parent(&self) -> Result<(), PgError> {
        let stop = format!(
            "{}'{}' -D '{}' -m immediate -w stop",
            if self.as_postgres {
                "runuser -u postgres -- "
            } else {
                ""
            },
            self.bin.join("pg_ctl").display(),
            self.dir.join("data").display()
        );
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            dir = self.dir.display()
        );
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(drop)
            .map_err(|e| PgError::Command {
                command: "sh (cluster watchdog)".into(),
                detail: e.to_string(),
            })
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if self.owned {
            let _ = self.stop_server();
            if !self.keep {
                let _ = std::fs::remove_dir_all(&self.dir);
            }
        }
    }
}
