//! `-o jsonpath=TEMPLATE`: the part of kubectl's JSONPath templates
//! (k8s.io/client-go `util/jsonpath`, as `kubectl get -o jsonpath` uses it) that
//! reading node states needs. Supported:
//!
//! - text outside braces, printed as is; string literals `{"\n"}` (escapes `\n`,
//!   `\t`, `\"`, `\\`);
//! - paths from the object (`{.status.summary.ready}`, `{$.kind}`): fields `.name`
//!   (a dot inside a name escaped as `\.`: `{.metadata.labels.kuberdma\.io/roce-ready}`),
//!   `['name']`, indexes `[0]` and `[-1]`, every element `[*]` (of a list, or the
//!   values of an object), filters `[?(@.path == "value")]` and `!=` (string,
//!   number or `true`/`false`);
//! - `{range PATH}...{end}`, in which paths are relative to each element.
//!
//! Several results of one path are separated by a space; strings print bare,
//! anything else as JSON. A path that matches nothing prints nothing (kubectl's
//! default `--allow-missing-template-keys=true`). Not supported: recursive descent
//! `..`, slices `[a:b]`, unions `[a,b]`, and other filter operators.

use serde_json::Value;

/// Why a template cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("jsonpath template {template:?}: {what}")]
pub struct JsonPathError {
    /// The template as given.
    pub template: String,
    /// What is wrong, and where.
    pub what: String,
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    nodes: Vec<Node>,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Text(String),
    Path(Vec<Seg>),
    Range(Vec<Seg>, Vec<Node>),
}

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Field(String),
    Index(i64),
    All,
    Filter { path: Vec<Seg>, equal: bool, value: Value },
}

impl std::str::FromStr for Template {
    type Err = JsonPathError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

/// Parses `template` (see the module docs).
pub fn parse(template: &str) -> Result<Template, JsonPathError> {
    let err = |what: String| JsonPathError { template: template.to_string(), what };
    // Flat list of items, then ranges folded.
    enum Item {
        Node(Node),
        Range(Vec<Seg>),
        End,
    }
    let mut items = Vec::new();
    let mut text = String::new();
    let mut chars = template.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '{' {
            text.push(c);
            continue;
        }
        let mut inner = String::new();
        let mut quote: Option<char> = None;
        let mut closed = false;
        while let Some((_, d)) = chars.next() {
            match (quote, d) {
                (Some(_), '\\') => {
                    inner.push(d);
                    if let Some((_, e)) = chars.next() {
                        inner.push(e);
                    }
                }
                (Some(q), _) if d == q => {
                    quote = None;
                    inner.push(d);
                }
                (Some(_), _) => inner.push(d),
                (None, '"' | '\'') => {
                    quote = Some(d);
                    inner.push(d);
                }
                (None, '}') => {
                    closed = true;
                    break;
                }
                (None, _) => inner.push(d),
            }
        }
        if !closed {
            return Err(err(format!("unclosed {{ at byte {i}")));
        }
        if !text.is_empty() {
            items.push(Item::Node(Node::Text(std::mem::take(&mut text))));
        }
        let inner = inner.trim();
        if inner == "end" {
            items.push(Item::End);
        } else if let Some(p) = inner.strip_prefix("range ") {
            items.push(Item::Range(path(p.trim()).map_err(err)?));
        } else if inner.starts_with('"') {
            items.push(Item::Node(Node::Text(literal(inner).map_err(err)?)));
        } else {
            items.push(Item::Node(Node::Path(path(inner).map_err(err)?)));
        }
    }
    if !text.is_empty() {
        items.push(Item::Node(Node::Text(text)));
    }
    // Fold ranges: a stack of (range path, nodes so far).
    let mut stack: Vec<(Option<Vec<Seg>>, Vec<Node>)> = vec![(None, Vec::new())];
    for it in items {
        match it {
            Item::Node(n) => stack.last_mut().map(|s| s.1.push(n)).unwrap_or(()),
            Item::Range(p) => stack.push((Some(p), Vec::new())),
            Item::End => {
                let (Some(p), body) = stack.pop().unwrap_or((None, Vec::new())) else {
                    return Err(err("{end} without {range ...}".into()));
                };
                if let Some(s) = stack.last_mut() {
                    s.1.push(Node::Range(p, body));
                }
            }
        }
    }
    if stack.len() != 1 {
        return Err(err("{range ...} without {end}".into()));
    }
    Ok(Template { nodes: stack.pop().map(|s| s.1).unwrap_or_default() })
}

fn literal(s: &str) -> Result<String, String> {
    let body = s
        .strip_prefix('"')
        .and_then(|b| b.strip_suffix('"'))
        .ok_or_else(|| format!("bad string literal {s}"))?;
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(e @ ('"' | '\\')) => out.push(e),
            other => {
                return Err(format!(
                    "unknown escape \\{} in {s}",
                    other.map(String::from).unwrap_or_default()
                ))
            }
        }
    }
    Ok(out)
}

/// A path: `$`? then `.name`, `[...]` segments; `@` starts a filter's path.
fn path(s: &str) -> Result<Vec<Seg>, String> {
    let s = s.strip_prefix('$').or_else(|| s.strip_prefix('@')).unwrap_or(s);
    let chars: Vec<char> = s.chars().collect();
    let mut segs = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                if chars.get(i) == Some(&'.') {
                    return Err(format!("recursive descent (..) is not supported in {s}"));
                }
                let mut name = String::new();
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    }
                    name.push(chars[i]);
                    i += 1;
                }
                match name.as_str() {
                    "" => {}
                    "*" => segs.push(Seg::All),
                    _ => segs.push(Seg::Field(name)),
                }
            }
            '[' => {
                let close = matching_bracket(&chars, i).ok_or_else(|| format!("unclosed [ in {s}"))?;
                let inner: String = chars[i + 1..close].iter().collect();
                segs.push(bracket(inner.trim())?);
                i = close + 1;
            }
            c => return Err(format!("unexpected {c:?} in {s} (paths start with . or [)")),
        }
    }
    Ok(segs)
}

fn matching_bracket(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (j, &c) in chars.iter().enumerate().skip(open) {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

fn bracket(inner: &str) -> Result<Seg, String> {
    if inner == "*" {
        return Ok(Seg::All);
    }
    if let Some(q) = quoted(inner) {
        return Ok(Seg::Field(q));
    }
    if let Ok(n) = inner.parse::<i64>() {
        return Ok(Seg::Index(n));
    }
    if let Some(f) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
        let (lhs, equal, rhs) = if let Some((l, r)) = f.split_once("==") {
            (l, true, r)
        } else if let Some((l, r)) = f.split_once("!=") {
            (l, false, r)
        } else {
            return Err(format!("filter [{inner}]: only == and != are supported"));
        };
        let lhs = lhs.trim();
        if !lhs.starts_with('@') {
            return Err(format!("filter [{inner}]: the left side must be a path from @"));
        }
        let rhs = rhs.trim();
        let value = match quoted(rhs) {
            Some(s) => Value::String(s),
            None => serde_json::from_str(rhs).map_err(|_| format!("filter [{inner}]: bad value {rhs}"))?,
        };
        return Ok(Seg::Filter { path: path(lhs)?, equal, value });
    }
    if inner.contains(':') || inner.contains(',') {
        return Err(format!("[{inner}]: slices and unions are not supported"));
    }
    Err(format!("[{inner}]: not an index, a quoted name, * or a filter"))
}

fn quoted(s: &str) -> Option<String> {
    for q in ['\'', '"'] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return Some(s[1..s.len() - 1].to_string());
        }
    }
    None
}

fn eval<'a>(segs: &[Seg], root: &'a Value) -> Vec<&'a Value> {
    let mut cur = vec![root];
    for seg in segs {
        let mut next = Vec::new();
        for v in cur {
            match seg {
                Seg::Field(name) => next.extend(v.get(name.as_str())),
                Seg::Index(n) => {
                    if let Some(a) = v.as_array() {
                        let idx = if *n < 0 { a.len() as i64 + n } else { *n };
                        next.extend(usize::try_from(idx).ok().and_then(|i| a.get(i)));
                    }
                }
                Seg::All => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Seg::Filter { path, equal, value } => {
                    if let Some(a) = v.as_array() {
                        next.extend(a.iter().filter(|item| {
                            let is = eval(path, item).first().is_some_and(|f| *f == value);
                            is == *equal
                        }));
                    }
                }
            }
        }
        cur = next;
    }
    cur
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn render_nodes(nodes: &[Node], v: &Value, out: &mut String) {
    for n in nodes {
        match n {
            Node::Text(t) => out.push_str(t),
            Node::Path(p) => out.push_str(&eval(p, v).into_iter().map(text).collect::<Vec<_>>().join(" ")),
            Node::Range(p, body) => {
                for item in eval(p, v) {
                    render_nodes(body, item, out);
                }
            }
        }
    }
}

impl Template {
    /// The template applied to `v`.
    pub fn render(&self, v: &Value) -> String {
        let mut out = String::new();
        render_nodes(&self.nodes, v, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn list() -> Value {
        json!({"kind": "List", "items": [
            {"metadata": {"name": "n1", "labels": {"kuberdma.io/roce-ready": "true"}},
             "status": {"summary": {"ready": "True"}, "conditions": [
                {"type": "RoceReady", "status": "True"}, {"type": "Stale", "status": "False"}]}},
            {"metadata": {"name": "n2"},
             "status": {"summary": {"ready": "False"}, "conditions": [{"type": "RoceReady", "status": "False"}]}},
        ]})
    }

    fn r(t: &str) -> String {
        parse(t).unwrap().render(&list())
    }

    #[test]
    fn paths_indexes_wildcards_and_literals_render_as_kubectl_does() {
        assert_eq!(r("{.kind}"), "List");
        assert_eq!(r("{$.kind}"), "List");
        assert_eq!(r("{.items[*].metadata.name}"), "n1 n2");
        assert_eq!(r("{.items[0].status.summary.ready}"), "True");
        assert_eq!(r("{.items[-1].metadata.name}"), "n2");
        assert_eq!(r("names: {.items[*].metadata.name}{\"\\n\"}"), "names: n1 n2\n");
        assert_eq!(r("{.items[0].metadata.labels.kuberdma\\.io/roce-ready}"), "true");
        assert_eq!(r("{.items[0].metadata.labels['kuberdma.io/roce-ready']}"), "true");
        assert_eq!(r("{.items[0].status.summary}"), "{\"ready\":\"True\"}", "objects print as JSON");
        assert_eq!(r("{.items[5].metadata.name}{.nope}"), "", "missing prints nothing");
    }

    #[test]
    fn filters_and_ranges_select_per_element() {
        assert_eq!(r("{.items[?(@.metadata.name==\"n2\")].status.summary.ready}"), "False");
        assert_eq!(r("{.items[0].status.conditions[?(@.type=='Stale')].status}"), "False");
        assert_eq!(r("{.items[*].status.conditions[?(@.type!=\"RoceReady\")].type}"), "Stale");
        assert_eq!(
            r("{range .items[*]}{.metadata.name}={.status.summary.ready}{\"\\n\"}{end}"),
            "n1=True\nn2=False\n"
        );
        assert_eq!(
            r("{range .items[*]}{.metadata.name}:{range .status.conditions[*]} {.type}{end};{end}"),
            "n1: RoceReady Stale;n2: RoceReady;"
        );
    }

    #[test]
    fn unsupported_or_broken_templates_are_errors_that_say_what() {
        for (t, want) in [
            ("{.items[0]", "unclosed {"),
            ("{range .items[*]}{.a}", "without {end}"),
            ("{.a}{end}", "{end} without"),
            ("{..name}", "recursive descent"),
            ("{.items[0:1]}", "slices"),
            ("{.items[?(@.a > 1)]}", "only == and !="),
            ("{items}", "paths start with"),
            ("{\"\\q\"}", "unknown escape"),
        ] {
            let e = parse(t).unwrap_err();
            assert!(e.to_string().contains(want), "{t}: {e}");
        }
    }
}
