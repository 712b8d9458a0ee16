//! Tokens on disk: one file per server and URL under the token directory
//! (`$XDG_STATE_HOME/agent-fabric/mcp-oauth`), mode 0600 in a 0700 directory, written whole
//! and renamed into place so a reader never sees half a file. The file also names the server
//! and URL, and a file whose URL is not the server's is not used: tokens go only where they
//! were issued for.

use async_trait::async_trait;
use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The token file of one server at one URL.
#[derive(Debug, Clone)]
pub(crate) struct TokenFile {
    path: PathBuf,
    server: String,
    url: String,
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    server: String,
    url: String,
    credentials: StoredCredentials,
}

impl TokenFile {
    /// `<dir>/<server>-<first 16 hex digits of sha256(url)>.json`: the name shows whose
    /// tokens they are, the digest keeps two URLs of one name apart.
    pub(crate) fn new(dir: &Path, server: &str, url: &str) -> Self {
        let digest = Sha256::digest(url.as_bytes());
        let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        Self {
            path: dir.join(format!("{server}-{hex}.json")),
            server: server.to_owned(),
            url: url.to_owned(),
        }
    }

    /// Where the tokens are.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The stored credentials, `None` when there are none for this URL.
    pub(crate) fn read(&self) -> std::io::Result<Option<StoredCredentials>> {
        let text = match std::fs::read(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let on_disk: OnDisk = serde_json::from_slice(&text).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is not a token file: {e}", self.path.display()),
            )
        })?;
        Ok((on_disk.url == self.url).then_some(on_disk.credentials))
    }

    fn write(&self, credentials: StoredCredentials) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let text = serde_json::to_vec_pretty(&OnDisk {
            server: self.server.clone(),
            url: self.url.clone(),
            credentials,
        })
        .map_err(std::io::Error::other)?;
        let temp = self.path.with_extension("json.tmp");
        let _ = std::fs::remove_file(&temp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&temp, &self.path)
    }

    /// Removes the tokens; whether there were any.
    pub(crate) fn remove(&self) -> std::io::Result<bool> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn store_error(&self, e: std::io::Error) -> AuthError {
        AuthError::CredentialStoreError(format!("{}: {e}", self.path.display()))
    }
}

#[async_trait]
impl CredentialStore for TokenFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.read().map_err(|e| self.store_error(e))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.write(credentials).map_err(|e| self.store_error(e))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.remove().map(drop).map_err(|e| self.store_error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[tokio::test]
    async fn tokens_are_kept_private_per_server_and_url() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let tokens = dir.path().join("mcp-oauth");
        let file = TokenFile::new(&tokens, "gh", "https://x/mcp");
        assert!(file.load().await.unwrap_or_default().is_none());
        let creds = StoredCredentials::new("client".into(), None, vec!["repo".into()], Some(1));
        file.save(creds).await.unwrap_or_else(|e| panic!("{e}"));
        let mode = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or_default()
        };
        assert_eq!(mode(file.path()), 0o600);
        assert_eq!(mode(&tokens), 0o700);
        let loaded = file.load().await.unwrap_or_default();
        assert_eq!(loaded.map(|c| c.client_id).as_deref(), Some("client"));
        // Another URL of the same name is another file; a file moved to another URL's name
        // is not used for it.
        let other = TokenFile::new(&tokens, "gh", "https://y/mcp");
        assert_ne!(other.path(), file.path());
        let _ = std::fs::copy(file.path(), other.path());
        assert!(other.load().await.unwrap_or_default().is_none());
        assert!(file.remove().unwrap_or_default());
        assert!(!file.remove().unwrap_or(true));
    }
}
