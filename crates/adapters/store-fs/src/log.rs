//! The append-only JSONL runlog of one run.

use async_trait::async_trait;
use fabric_domain::RunEvent;
use fabric_engine::{RunLog, StoreError};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::io_error;

/// A runlog file opened for appending, and claimed: while it is open, this process holds an
/// exclusive `flock` on it, which the kernel drops when the process dies however it dies.
/// That lock is how a run's owner is told from a run whose process is gone
/// ([`FileRunLog::claimed`]; docs/DURABILITY.md).
#[derive(Debug, Clone)]
pub struct FileRunLog {
    path: PathBuf,
    // One writer at a time: the mutex makes concurrent appends (parallel task forces) land
    // as whole lines in some order, never interleaved.
    file: Arc<Mutex<File>>,
}

impl FileRunLog {
    /// Creates (or opens for appending) the runlog at `path`, and claims it:
    /// [`StoreError::Claimed`] when another process (or another open log in this one) holds
    /// it.
    pub async fn create(path: PathBuf) -> Result<Self, StoreError> {
        let opened = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || {
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .read(true)
                    .open(&path)?;
                // A reader probing the lock ([`FileRunLog::probe`]) holds a shared lock for
                // the moment of one `flock` call: a claim that meets one tries again
                // shortly, so listing runs never makes a run's start or resumption fail.
                // A run really held elsewhere is refused after these few tries.
                let mut tries = 0;
                loop {
                    match file.try_lock() {
                        Ok(()) => return Ok(Ok(file)),
                        Err(std::fs::TryLockError::WouldBlock) if tries < CLAIM_TRIES => {
                            tries += 1;
                            std::thread::sleep(CLAIM_RETRY);
                        }
                        Err(std::fs::TryLockError::WouldBlock) => return Ok(Err(())),
                        Err(std::fs::TryLockError::Error(e)) => return Err(e),
                    }
                }
            })
            .await
        };
        let file = match opened {
            Ok(Ok(Ok(file))) => file,
            Ok(Ok(Err(()))) => return Err(StoreError::Claimed(run_name(&path))),
            Ok(Err(e)) => return Err(io_error("cannot create", &path, &e)),
            Err(join) => {
                return Err(io_error(
                    "cannot create",
                    &path,
                    &std::io::Error::other(join),
                ));
            }
        };
        Ok(Self {
            path,
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Where the runlog is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Cuts a last line without its newline (what a process killed in the middle of a
    /// write, or a full disk, leaves), so appends start on a line of their own. Readers skip
    /// such a line already; this makes the file whole again.
    pub async fn trim_torn_tail(&self) -> Result<(), StoreError> {
        let file = Arc::clone(&self.file);
        let path = self.path.clone();
        let trimmed = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            use std::io::{Read, Seek, SeekFrom};
            let mut file = file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let len = file.metadata()?.len();
            if len == 0 {
                return Ok(());
            }
            // Read backwards in blocks to the last newline.
            let mut end = len;
            let mut block = vec![0u8; 4096];
            loop {
                let start = end.saturating_sub(block.len() as u64);
                let n = usize::try_from(end - start).unwrap_or(block.len());
                file.seek(SeekFrom::Start(start))?;
                file.read_exact(&mut block[..n])?;
                if let Some(i) = block[..n].iter().rposition(|b| *b == b'\n') {
                    let keep = start + i as u64 + 1;
                    if keep < len {
                        file.set_len(keep)?;
                    }
                    return Ok(());
                }
                if start == 0 {
                    // No newline at all: nothing whole was ever written.
                    return file.set_len(0);
                }
                end = start;
            }
        })
        .await;
        match trimmed {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(io_error("cannot repair", &path, &e)),
            Err(join) => Err(io_error(
                "cannot repair",
                &path,
                &std::io::Error::other(join),
            )),
        }
    }

    /// Whether a process holds the runlog at `path` open for writing (its run is going on
    /// there). A runlog that does not exist is not claimed. Blocking: one `open` and one
    /// `flock`, for the blocking pool or a one-off check.
    pub fn claimed(path: &Path) -> bool {
        Self::probe(path) == Some(true)
    }

    /// Whether a process holds the runlog at `path` (`Some(true)`), or none does
    /// (`Some(false)`: the process that ran it is gone); `None` when there is no runlog here
    /// to ask (a run on another machine sharing the database), so nothing is claimed.
    /// Blocking: one `open` and one non-blocking `flock`.
    ///
    /// The probe never keeps the lock: it takes a *shared* lock, which is refused only while
    /// someone holds the exclusive one (checkers never block each other), and drops it at
    /// once with the file. A claim that meets it in that instant tries again
    /// ([`FileRunLog::create`]).
    pub fn probe(path: &Path) -> Option<bool> {
        let file = File::open(path).ok()?;
        match file.try_lock_shared() {
            Ok(()) => Some(false),
            Err(std::fs::TryLockError::WouldBlock) => Some(true),
            // A file system that cannot lock cannot tell either.
            Err(std::fs::TryLockError::Error(_)) => None,
        }
    }

    /// The runlog line of `event`, without its newline (what [`FileRunLog::append_line`]
    /// takes): a store that indexes the line too encodes it once.
    pub fn encode(&self, event: &RunEvent) -> Result<String, StoreError> {
        serde_json::to_string(event).map_err(|e| StoreError::Io {
            action: "cannot encode an event for",
            path: self.path.clone(),
            detail: e.to_string(),
        })
    }

    /// Appends one encoded line (from [`FileRunLog::encode`]) and its newline.
    pub fn append_line(&self, line: &str) -> Result<(), StoreError> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        // Written inline rather than on the blocking pool: one capped line (a few KiB at most)
        // appended to the page cache takes microseconds, while a round trip through
        // `spawn_blocking` costs two thread wake-ups per event, which was most of the loop's
        // own cost per step (docs/BENCHMARKS.md, ADR-013). The lock is never held across an
        // await. A poisoned lock only means another append panicked mid-way; the file handle
        // is still usable, and every line is written whole by the one call below.
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        file.write_all(&bytes)
            .map_err(|e| io_error("cannot write", &self.path, &e))
    }
}

#[async_trait]
impl RunLog for FileRunLog {
    async fn append(&self, event: &RunEvent) -> Result<(), StoreError> {
        self.append_line(&self.encode(event)?)
    }
}

/// How many more times a claim tries a runlog whose lock it met taken, and how long it
/// waits before each: enough to outlast a probe (one `flock` call), short enough that
/// refusing a run held elsewhere stays quick (0.1 s).
const CLAIM_TRIES: u32 = 20;
const CLAIM_RETRY: std::time::Duration = std::time::Duration::from_millis(5);

/// The run a runlog belongs to, by its directory's name, for messages.
fn run_name(path: &Path) -> String {
    path.parent().and_then(Path::file_name).map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Parses a whole runlog. A last line without its newline is what a process killed
/// mid-write (or a full disk) leaves; it is skipped with a warning instead of failing the
/// read, even when it happens to be whole JSON: continuing the run cuts it
/// ([`FileRunLog::trim_torn_tail`]) and writes another event at its `seq`, so a reader that
/// took it (the store's index, issue #26) would keep an event the runlog does not have. An
/// event is in the runlog once its newline is.
pub(crate) fn parse_runlog(path: &Path, text: &str) -> Result<Vec<RunEvent>, StoreError> {
    Ok(parse_runlog_lines(path, text)?
        .into_iter()
        .map(|(event, _)| event)
        .collect())
}

/// [`parse_runlog`], each event with its line as written (without its newline): a store
/// that indexes the runlog keeps the very line.
pub fn parse_runlog_lines<'a>(
    path: &Path,
    text: &'a str,
) -> Result<Vec<(RunEvent, &'a str)>, StoreError> {
    // Everything after the last newline is not (yet) a line of the runlog.
    let (whole, torn) = match text.rfind('\n') {
        Some(end) => text.split_at(end + 1),
        None => ("", text),
    };
    if !torn.trim().is_empty() {
        tracing::warn!(path = %path.display(), "skipping a last runlog line without its newline");
    }
    let mut events = Vec::new();
    for (index, line) in whole.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<RunEvent>(line) {
            Ok(event) => events.push((event, line)),
            Err(e) => {
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    line: index + 1,
                    detail: e.to_string(),
                });
            }
        }
    }
    Ok(events)
}
