//! Which directories a run asked for from outside the machine may work on (issue #39,
//! ADR-090). `fabric serve` (HTTP, `/mcp`, A2A), `fabric mcp` and `fabric worker` build their
//! service with the config's `server.project_roots`; a `project` is then accepted only when
//! its real path (symlinks and `..` resolved) is inside one of those roots, also resolved.
//! `fabric run --project` builds its service without roots: its user may name any directory
//! they can read.

use std::path::{Component, Path, PathBuf};

use super::{ProjectError, ServiceError};

/// `project`, resolved, when it is inside one of `roots`; the refusal naming the key and the
/// fix otherwise. The resolved path is what the run then works on, so a link changed after
/// this check cannot lead it elsewhere.
pub(super) fn confine(project: &Path, roots: &[PathBuf]) -> Result<PathBuf, ServiceError> {
    if roots.is_empty() {
        return Err(ProjectError::NoRoots {
            project: project.to_path_buf(),
        }
        .into());
    }
    let roots: Vec<PathBuf> = roots
        .iter()
        .filter_map(|root| std::fs::canonicalize(root).ok())
        .collect();
    match std::fs::canonicalize(project) {
        Ok(real) if roots.iter().any(|root| real.starts_with(root)) => Ok(real),
        // A path inside a root that does not exist is a typo: say so. Outside the roots,
        // the same refusal whether it exists or not, so the answer tells nothing about the
        // server's other files.
        Err(e) if roots.iter().any(|root| lexical(project).starts_with(root)) => {
            Err(ProjectError::Unresolvable {
                project: project.to_path_buf(),
                detail: e.to_string(),
            }
            .into())
        }
        _ => Err(ProjectError::OutsideRoots {
            project: project.to_path_buf(),
            roots: listed(&roots),
        }
        .into()),
    }
}

/// `path` with `.` and `..` taken away without reading the disk.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn listed(roots: &[PathBuf]) -> String {
    if roots.is_empty() {
        return "none of them exists on this machine".to_owned();
    }
    roots
        .iter()
        .map(|r| format!("`{}`", r.display()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    struct Dirs {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
    }

    fn dirs() -> Dirs {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repos");
        let outside = tmp.path().join("secrets");
        std::fs::create_dir_all(root.join("app/src")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        Dirs {
            root,
            outside,
            _tmp: tmp,
        }
    }

    fn refused(result: Result<PathBuf, ServiceError>) -> String {
        match result {
            Err(e @ ServiceError::InvalidProject(_)) => e.to_string(),
            other => panic!("not refused as an invalid project: {other:?}"),
        }
    }

    #[test]
    fn issue_39_a_project_inside_a_root_is_accepted_as_its_real_path() {
        let d = dirs();
        let roots = [d.root.clone()];
        let real = std::fs::canonicalize(d.root.join("app")).unwrap();
        assert_eq!(confine(&d.root.join("app"), &roots).unwrap(), real);
        assert_eq!(confine(&d.root.join("app/src/.."), &roots).unwrap(), real);
        // The root itself is inside.
        assert!(confine(&d.root, &roots).is_ok());
    }

    #[test]
    fn issue_39_no_roots_refuses_every_project_naming_the_key() {
        let d = dirs();
        let m = refused(confine(&d.root.join("app"), &[]));
        assert!(
            m.contains("server.project_roots") && m.contains("empty"),
            "{m}"
        );
    }

    #[test]
    fn issue_39_outside_dotdot_and_links_leading_out_are_refused() {
        let d = dirs();
        let roots = [d.root.clone()];
        let link = d.root.join("app/escape");
        std::os::unix::fs::symlink(&d.outside, &link).unwrap();
        for path in [
            d.outside.clone(),
            d.root.join("../secrets"),
            d.root.join("app/../../secrets"),
            link,
            PathBuf::from("/etc"),
        ] {
            let m = refused(confine(&path, &roots));
            assert!(
                m.contains("outside") && m.contains("server.project_roots"),
                "{m}"
            );
        }
        // A root with a sibling sharing its prefix (`repos` and `repos-old`) is no way out.
        let sibling = d.root.with_file_name("repos-old");
        std::fs::create_dir_all(&sibling).unwrap();
        assert!(refused(confine(&sibling, &roots)).contains("outside"));
    }

    #[test]
    fn issue_39_a_missing_path_says_whether_it_is_a_typo_only_inside_a_root() {
        let d = dirs();
        let roots = [d.root.clone()];
        let inside = refused(confine(&d.root.join("nope"), &roots));
        assert!(inside.contains("cannot be used"), "{inside}");
        let outside = refused(confine(&d.outside.join("nope"), &roots));
        let exists = refused(confine(&d.outside, &roots));
        assert_eq!(
            outside.replace("secrets/nope", "secrets"),
            exists,
            "the same refusal whether it exists or not"
        );
    }

    #[test]
    fn issue_39_a_root_reached_through_a_link_is_resolved_too() {
        let d = dirs();
        let via = d.outside.with_file_name("via");
        std::os::unix::fs::symlink(&d.root, &via).unwrap();
        let real = std::fs::canonicalize(d.root.join("app")).unwrap();
        assert_eq!(
            confine(&via.join("app"), std::slice::from_ref(&via)).unwrap(),
            real
        );
        assert_eq!(confine(&d.root.join("app"), &[via]).unwrap(), real);
    }
}
