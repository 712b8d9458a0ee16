//! [`WorkspaceReader`]: a run's workspace read from outside the run (the MCP server's file
//! resources, issue #29), through the file tools' own confinement: paths normalised by
//! [`crate::paths::normalize`], opened beneath the workspace descriptor, hard links refused
//! (ADR-026). Nothing here is a second path check.

use std::io::Read;
use std::path::Path;

use async_trait::async_trait;
use fabric_engine::{ToolError, WorkspaceFiles};

use crate::files::{Lister, blocking, io_failed, open_regular, relative_path, walk};
use crate::paths::Root;

/// How a client of the MCP server finds a run's files.
const RESOURCE_LISTER: Lister<'static> = Lister {
    files: "the run's `files` resource",
    directory: &|_| "the run's `files` resource lists the files under it".to_owned(),
    reader: "the fabric",
};

/// Reads workspaces for the MCP server; stateless.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkspaceReader;

#[async_trait]
impl WorkspaceFiles for WorkspaceReader {
    async fn list(&self, workspace: &Path, cap: usize) -> Result<(Vec<String>, bool), ToolError> {
        let workspace = workspace.to_path_buf();
        blocking("the listing", move || {
            let root = Root::open(&workspace)?;
            let listing = walk(&root, Path::new(""), "", cap);
            let files = listing
                .entries
                .into_iter()
                .filter(|e| !e.ends_with('/'))
                .collect();
            Ok((files, listing.truncated))
        })
        .await
    }

    async fn read(&self, workspace: &Path, path: &str, max: u64) -> Result<Vec<u8>, ToolError> {
        let relative = relative_path(workspace, path).await?;
        let (workspace, raw) = (workspace.to_path_buf(), path.to_owned());
        blocking("the read", move || {
            let (fd, stat) = open_regular(&workspace, &raw, &relative, &RESOURCE_LISTER)?;
            let size = u64::try_from(stat.st_size).unwrap_or(0);
            if size > max {
                return Err(ToolError::Failed(format!(
                    "`{raw}` is {size} bytes, more than the {max} bytes a resource may hold; read a smaller file, or the run's workspace on disk"
                )));
            }
            let mut bytes = Vec::new();
            // `take`: a file that grew since its size was read still stops at the limit.
            std::fs::File::from(fd)
                .take(max)
                .read_to_end(&mut bytes)
                .map_err(|e| io_failed("read", &raw, &e))?;
            Ok(bytes)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("workspace");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/a.txt"), "A").unwrap();
        std::fs::write(ws.join("b.bin"), [0u8, 159, 146, 150]).unwrap();
        std::fs::write(dir.path().join("secret"), "S").unwrap();
        (dir, ws)
    }

    #[tokio::test]
    async fn issue_29_lists_files_only_and_reads_them_whole() {
        let (_dir, ws) = workspace();
        let (files, cut) = WorkspaceReader.list(&ws, 100).await.unwrap();
        assert_eq!(files, ["b.bin", "src/a.txt"]);
        assert!(!cut);
        assert_eq!(
            WorkspaceReader.read(&ws, "src/a.txt", 10).await.unwrap(),
            b"A"
        );
        assert_eq!(
            WorkspaceReader.read(&ws, "b.bin", 10).await.unwrap(),
            [0u8, 159, 146, 150]
        );
    }

    #[tokio::test]
    async fn issue_29_refuses_paths_out_of_the_workspace_and_big_files() {
        let (dir, ws) = workspace();
        std::os::unix::fs::symlink(dir.path().join("secret"), ws.join("link")).unwrap();
        for (path, words) in [
            ("../secret", "path `../secret` is outside the workspace"),
            ("src/../../secret", "is outside the workspace"),
            ("/etc/passwd", "path `/etc/passwd` is outside the workspace"),
            ("link", "a symbolic link leads out of it"),
            (
                "src",
                "is a directory, not a file; the run's `files` resource",
            ),
            (
                "none.txt",
                "no file `none.txt` in the workspace; the run's `files` resource",
            ),
            ("b.bin", "`b.bin` is 4 bytes, more than the 3 bytes"),
        ] {
            let error = WorkspaceReader.read(&ws, path, 3).await.unwrap_err();
            assert!(error.to_string().contains(words), "{path}: {error}");
        }
    }
}
