//! A line diff in the unified format, for the critic to read the staged changes.
//!
//! Common lines at both ends are set aside, and the rest is aligned by a longest common
//! subsequence when it is small enough (at most [`MAX_CELLS`] line pairs); beyond that the
//! middle is shown as removed and added whole, which is still a correct diff, only a longer
//! one.

/// Most line pairs the LCS table compares (its `u32` cells take 8 MB at most).
const MAX_CELLS: usize = 2_000_000;
/// Unchanged lines shown around each change.
const CONTEXT: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same,
    Removed,
    Added,
}

/// The hunks (`@@ -a,b +c,d @@` and their lines) turning `old` into `new`; empty when equal.
pub(super) fn hunks(old: &str, new: &str) -> String {
    // Lines keep their ends, so a change of line ending or of the last newline shows.
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    let ops = edit_script(&a, &b);
    render(&a, &b, &ops)
}

/// The operations, in order, that turn `a` into `b`.
fn edit_script(a: &[&str], b: &[&str]) -> Vec<Op> {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let mut ops = vec![Op::Same; prefix];
    if ma.len().saturating_mul(mb.len()) <= MAX_CELLS {
        ops.extend(lcs_ops(ma, mb));
    } else {
        ops.extend(std::iter::repeat_n(Op::Removed, ma.len()));
        ops.extend(std::iter::repeat_n(Op::Added, mb.len()));
    }
    ops.extend(std::iter::repeat_n(Op::Same, suffix));
    ops
}

/// An LCS alignment of two short slices.
fn lcs_ops(a: &[&str], b: &[&str]) -> Vec<Op> {
    let (n, m) = (a.len(), b.len());
    // table[i][j]: LCS length of a[i..] and b[j..], row-major in one vector.
    let width = m + 1;
    let mut table = vec![0u32; (n + 1) * width];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            table[i * width + j] = if a[i] == b[j] {
                table[(i + 1) * width + j + 1] + 1
            } else {
                table[(i + 1) * width + j].max(table[i * width + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut ops = Vec::with_capacity(n + m);
    while i < n && j < m {
        if a[i] == b[j] {
            ops.push(Op::Same);
            i += 1;
            j += 1;
        } else if table[(i + 1) * width + j] >= table[i * width + j + 1] {
            ops.push(Op::Removed);
            i += 1;
        } else {
            ops.push(Op::Added);
            j += 1;
        }
    }
    ops.extend(std::iter::repeat_n(Op::Removed, n - i));
    ops.extend(std::iter::repeat_n(Op::Added, m - j));
    ops
}

/// Groups the operations into hunks with [`CONTEXT`] lines around each change.
fn render(a: &[&str], b: &[&str], ops: &[Op]) -> String {
    // Positions (in `ops`) of the changes, grouped when their context touches.
    let changes: Vec<usize> = (0..ops.len()).filter(|&k| ops[k] != Op::Same).collect();
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for &k in &changes {
        match groups.last_mut() {
            Some((_, end)) if k <= *end + 2 * CONTEXT + 1 => *end = k,
            _ => groups.push((k, k)),
        }
    }
    // Line numbers in `a` and `b` before each op.
    let mut at = Vec::with_capacity(ops.len() + 1);
    let (mut i, mut j) = (0usize, 0usize);
    for op in ops {
        at.push((i, j));
        match op {
            Op::Same => {
                i += 1;
                j += 1;
            }
            Op::Removed => i += 1,
            Op::Added => j += 1,
        }
    }
    at.push((i, j));
    let mut out = String::new();
    for (first, last) in groups {
        let start = first.saturating_sub(CONTEXT);
        let end = (last + CONTEXT + 1).min(ops.len());
        let (a0, b0) = at[start];
        let (a1, b1) = at[end];
        let range = |from: usize, to: usize| {
            let len = to - from;
            // The unified format numbers an empty range by the line before it.
            let first = if len == 0 { from } else { from + 1 };
            format!("{first},{len}")
        };
        out.push_str(&format!("@@ -{} +{} @@\n", range(a0, a1), range(b0, b1)));
        for (k, op) in ops.iter().enumerate().take(end).skip(start) {
            let (i, j) = at[k];
            let (mark, line) = match op {
                Op::Same => (' ', a[i]),
                Op::Removed => ('-', a[i]),
                Op::Added => ('+', b[j]),
            };
            out.push(mark);
            let text = line.strip_suffix('\n');
            let body = text.unwrap_or(line);
            match body.strip_suffix('\r') {
                Some(rest) => {
                    out.push_str(rest);
                    out.push_str("\\r");
                }
                None => out.push_str(body),
            }
            out.push('\n');
            if text.is_none() {
                out.push_str("\\ No newline at end of file\n");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_have_no_hunks() {
        assert_eq!(hunks("a\nb\n", "a\nb\n"), "");
    }

    #[test]
    fn a_changed_line_is_shown_with_its_context() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let new = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
        assert_eq!(
            hunks(old, new),
            "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
        );
    }

    #[test]
    fn new_and_deleted_files_are_one_hunk() {
        assert_eq!(hunks("", "x\ny\n"), "@@ -0,0 +1,2 @@\n+x\n+y\n");
        assert_eq!(hunks("x\n", ""), "@@ -1,1 +0,0 @@\n-x\n");
    }

    #[test]
    fn distant_changes_are_separate_hunks() {
        let old: String = (0..30).map(|i| format!("{i}\n")).collect();
        let new: String = (0..30)
            .map(|i| match i {
                2 => "two\n".to_owned(),
                25 => "twenty-five\n".to_owned(),
                _ => format!("{i}\n"),
            })
            .collect();
        let text = hunks(&old, &new);
        assert_eq!(text.matches("@@ -").count(), 2, "{text}");
        assert!(text.contains("-25\n+twenty-five\n"), "{text}");
    }

    #[test]
    fn line_endings_and_the_last_newline_show() {
        assert_eq!(
            hunks("a\nb", "a\nb\n"),
            "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"
        );
        assert_eq!(hunks("a\n", "a\r\n"), "@@ -1,1 +1,1 @@\n-a\n+a\\r\n");
    }

    #[test]
    fn large_middles_fall_back_to_replace_whole() {
        let old: String = (0..2000).map(|i| format!("a{i}\n")).collect();
        let new: String = (0..2000).map(|i| format!("b{i}\n")).collect();
        let text = hunks(&old, &new);
        assert_eq!(text.lines().filter(|l| l.starts_with('-')).count(), 2000);
        assert_eq!(text.lines().filter(|l| l.starts_with('+')).count(), 2000);
    }
}
