//! Reading a config file safely: whatever the path names, the read ends
//! quickly and the parser gets text it handles in linear time.
//!
//! - The file is opened with `O_NONBLOCK` and must be a regular file: a FIFO
//!   would block `open` until a writer comes, `/dev/zero` would never end.
//!   Links are followed (a ConfigMap's file is a link into `..data/`).
//! - At most [`MAX_BYTES`] are read.
//! - Nesting deeper than [`MAX_DEPTH`] is refused before the text reaches
//!   serde_yaml, whose parser (libyaml) takes time quadratic in the depth of
//!   flow collections (80 000 levels: 23 s) before its own recursion limit.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use super::ConfigError;

/// The largest config read, bytes. A real config is a few KiB (the largest
/// upstream example, with every selector of every pool, is under 4 KiB); 4 MiB
/// is three orders of magnitude above that and still parsed in well under a
/// second.
pub const MAX_BYTES: u64 = 4 << 20;

/// The deepest nesting of collections accepted. Every format we read nests 7
/// levels at most (`resourceList[].selectors[].pfNames[]`); serde_yaml's own
/// limit is 128.
pub const MAX_DEPTH: usize = 64;

/// Reads the config file at `path` (see the module docs).
pub fn read_text(path: &Path) -> Result<String, ConfigError> {
    let io = |source| ConfigError::Io { path: path.to_path_buf(), source };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(io)?;
    if let Some(kind) = nic::sysfs::not_regular(f.metadata().map_err(io)?.file_type()) {
        return Err(ConfigError::NotAFile { path: path.to_path_buf(), kind });
    }
    // One byte more than allowed tells a file at the limit from a longer one
    // (the size stat gave may be stale, or zero as in procfs).
    let mut bytes = Vec::new();
    f.take(MAX_BYTES + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(ConfigError::TooLarge { path: path.to_path_buf(), max: MAX_BYTES });
    }
    String::from_utf8(bytes)
        .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not UTF-8: {e}"))))
}

/// Where the text first nests deeper than `max`, as (line, column), both
/// from 1; `None` when it does not.
///
/// An upper bound, computed in one pass: flow collections (`[`, `{` outside
/// quotes and comments) count one level each, block structure one level per
/// indentation step and per `- ` of a compact sequence (`- - - x`). It may
/// count a level more than YAML does (a sequence at its key's column), never
/// fewer, so a file it lets through nests at most `max` deep. Block scalars
/// (`|`, `>`) are skipped, as their text is not structure.
pub fn too_deep(text: &str, max: usize) -> Option<(usize, usize)> {
    let mut s = Scan::default();
    for (n, line) in text.lines().enumerate() {
        if let Some(col) = s.line(line, max) {
            return Some((n + 1, col + 1));
        }
    }
    None
}

/// The state [`too_deep`] carries from line to line.
#[derive(Default)]
struct Scan {
    /// Open flow collections.
    flow: usize,
    /// Indentation columns of the open block levels.
    block: Vec<usize>,
    /// Inside a quoted scalar that spans lines: its quote.
    quote: Option<u8>,
    /// Inside a block scalar: the indentation of the line that opened it.
    scalar_of: Option<usize>,
}

impl Scan {
    /// Scans one line; returns the column where the depth first exceeds `max`.
    fn line(&mut self, line: &str, max: usize) -> Option<usize> {
        let b = line.as_bytes();
        let indent = b.iter().take_while(|&&c| c == b' ').count();
        let blank = indent == b.len() || b[indent] == b'#';
        if let Some(of) = self.scalar_of {
            if blank || indent > of {
                return None;
            }
            self.scalar_of = None;
        }
        if blank && self.quote.is_none() {
            return None;
        }
        let mut i = 0;
        if self.flow == 0 && self.quote.is_none() {
            while self.block.last().is_some_and(|&c| c >= indent) {
                self.block.pop();
            }
            self.block.push(indent);
            i = indent;
            // A compact sequence: every `- ` opens a level at its column.
            while i < b.len() && b[i] == b'-' && b.get(i + 1).is_none_or(|c| *c == b' ') {
                self.block.push(i + 1);
                i += 2;
            }
            if self.block.len() > max {
                return Some(indent);
            }
        }
        self.rest(b, i, indent, max)
    }

    /// Flow collections and quotes from byte `i` of the line on.
    fn rest(&mut self, b: &[u8], mut i: usize, indent: usize, max: usize) -> Option<usize> {
        while i < b.len() {
            let c = b[i];
            if let Some(q) = self.quote {
                if c == b'\\' && q == b'"' {
                    i += 1;
                } else if c == q {
                    // `''` inside single quotes is an escaped quote.
                    if q == b'\'' && b.get(i + 1) == Some(&b'\'') {
                        i += 1;
                    } else {
                        self.quote = None;
                    }
                }
                i += 1;
                continue;
            }
            let after_space = i == 0 || matches!(b[i - 1], b' ' | b'\t');
            match c {
                b'#' if after_space => break,
                b'"' | b'\''
                    if i == 0 || matches!(b[i - 1], b' ' | b'\t' | b'[' | b'{' | b',' | b':' | b'-') =>
                {
                    self.quote = Some(c);
                }
                b'[' | b'{' => {
                    self.flow += 1;
                    if self.flow + self.block.len() > max {
                        return Some(i);
                    }
                }
                b']' | b'}' => self.flow = self.flow.saturating_sub(1),
                b'|' | b'>' if self.flow == 0 && after_space && is_scalar_header(&b[i + 1..]) => {
                    self.scalar_of = Some(indent);
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        None
    }
}

/// What may follow `|` or `>` to make it a block scalar's header: chomping and
/// indentation indicators, then nothing but a comment.
fn is_scalar_header(rest: &[u8]) -> bool {
    let ind = rest.iter().take_while(|c| matches!(c, b'+' | b'-' | b'0'..=b'9')).count();
    let rest = &rest[ind..];
    let sp = rest.iter().take_while(|c| matches!(c, b' ' | b'\t')).count();
    sp == rest.len() || (sp > 0 && rest[sp] == b'#')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_configs_are_shallow() {
        let native = "pools:\n  - name: a\n    selectors:\n      - vendors: [\"15b3\"]\n        pfNames: [\"ens1f0#0-3\"]\n";
        assert_eq!(too_deep(native, 8), None);
        let json = r#"{"resourceList": [{"resourceName": "a", "selectors": [{"vendors": ["15b3"]}]}]}"#;
        assert_eq!(too_deep(json, 7), None);
        assert_eq!(too_deep(json, 6), Some((1, 67)));
    }

    #[test]
    fn flow_nesting_counts_outside_quotes_and_comments_only() {
        assert_eq!(too_deep("a: [[[[x]]]]", 5), None);
        assert_eq!(too_deep("a: [[[[[x]]]]]", 5), Some((1, 8)));
        assert_eq!(too_deep("a: \"[[[[[[[[\" # {{{{{{{{{{\nb: '[[[['' [[[['", 3), None);
        // A quote inside a plain scalar starts nothing.
        assert_eq!(too_deep("a: don't [[[[", 3), Some((1, 12)));
        // A double-quoted scalar over two lines, with an escaped quote.
        assert_eq!(too_deep("a: \"x \\\" [[[[\n [[[[[[ \"\nb: [x]", 3), None);
    }

    #[test]
    fn block_nesting_counts_indentation_and_compact_sequences() {
        let deep: String = (0..10).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect();
        assert_eq!(too_deep(&deep, 10), None);
        assert_eq!(too_deep(&deep, 9), Some((10, 10)));
        assert_eq!(too_deep("- - - - - - x", 6), Some((1, 1)));
        assert_eq!(too_deep("- - - - - - x", 7), None);
        // Back out to the top: the levels closed are not counted again.
        assert_eq!(too_deep("a:\n  b:\n    c: 1\nd:\n  e: 1\n", 3), None);
    }

    #[test]
    fn block_scalars_are_text() {
        let t = "a: |\n  [[[[[[[[[[\n  {{{{{{{{\n\n  more\nb: >-\n  [[[[[[\nc: [x]\n";
        assert_eq!(too_deep(t, 3), None);
        assert_eq!(too_deep("a: |x [[[[", 3), Some((1, 9)), "not a block scalar header");
    }
}
