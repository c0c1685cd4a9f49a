//! Label and field selectors (`labelSelector=`, `fieldSelector=`), parsed
//! once per request and matched against objects. Pure.
//!
//! Grammar as in `k8s.io/apimachinery/pkg/labels` (selector.go) and
//! `pkg/fields`: comma-separated requirements; labels accept `k`, `!k`,
//! `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k>n`, `k<n`;
//! fields accept `path=v`, `path==v`, `path!=v`.

use serde_json::Value;

use crate::object::meta_str;

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Exists(String),
    NotExists(String),
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Gt(String, i64),
    Lt(String, i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector {
    reqs: Vec<LabelReq>,
}

impl LabelSelector {
    /// Parses `labelSelector` syntax.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top_level(s)? {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            reqs.push(parse_label_req(part)?);
        }
        Ok(LabelSelector { reqs })
    }

    /// Whether `obj`'s `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.reqs.iter().all(|r| match r {
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelReq::Gt(k, n) => get(k).and_then(|x| x.parse::<i64>().ok()).is_some_and(|x| x > *n),
            LabelReq::Lt(k, n) => get(k).and_then(|x| x.parse::<i64>().ok()).is_some_and(|x| x < *n),
        })
    }
}

/// Splits on commas outside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("unbalanced ')' at byte {i}"));
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".to_string());
    }
    out.push(&s[start..]);
    Ok(out)
}

fn check_key(k: &str, whole: &str) -> Result<String, String> {
    let k = k.trim();
    if k.is_empty() || k.chars().any(|c| c.is_whitespace() || "=!(),<>".contains(c)) {
        return Err(format!("invalid label key {k:?} in {whole:?}"));
    }
    Ok(k.to_string())
}

fn check_value(v: &str, whole: &str) -> Result<String, String> {
    let v = v.trim();
    if v.chars().any(|c| c.is_whitespace() || "=!(),<>".contains(c)) {
        return Err(format!("invalid label value {v:?} in {whole:?}"));
    }
    Ok(v.to_string())
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised value list in {whole:?}"))?;
    inner.split(',').map(|v| check_value(v, whole)).collect()
}

fn parse_label_req(part: &str) -> Result<LabelReq, String> {
    if let Some(k) = part.strip_prefix('!') {
        return Ok(LabelReq::NotExists(check_key(k, part)?));
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(LabelReq::NotEq(check_key(k, part)?, check_value(v, part)?));
    }
    if let Some((k, v)) = part.split_once("==") {
        return Ok(LabelReq::Eq(check_key(k, part)?, check_value(v, part)?));
    }
    if let Some((k, v)) = part.split_once('=') {
        return Ok(LabelReq::Eq(check_key(k, part)?, check_value(v, part)?));
    }
    for (op, gt) in [('>', true), ('<', false)] {
        if let Some((k, v)) = part.split_once(op) {
            let n: i64 = v.trim().parse().map_err(|_| format!("{:?} needs an integer in {part:?}", op))?;
            let k = check_key(k, part)?;
            return Ok(if gt { LabelReq::Gt(k, n) } else { LabelReq::Lt(k, n) });
        }
    }
    let mut words = part.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default();
    let rest = words.next().unwrap_or_default().trim_start();
    if rest.is_empty() {
        return Ok(LabelReq::Exists(check_key(key, part)?));
    }
    if let Some(set) = rest.strip_prefix("notin") {
        return Ok(LabelReq::NotIn(check_key(key, part)?, parse_set(set, part)?));
    }
    if let Some(set) = rest.strip_prefix("in") {
        return Ok(LabelReq::In(check_key(key, part)?, parse_set(set, part)?));
    }
    Err(format!("cannot parse label requirement {part:?}"))
}

/// A parsed field selector.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses `fieldSelector` syntax; `supported` lists the field paths the
    /// resource accepts besides `metadata.name` and `metadata.namespace`
    /// (the real server refuses others with 400).
    pub fn parse(s: &str, supported: &[String]) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid field selector requirement {part:?}: expected field=value or field!=value"
                ));
            };
            let field = field.trim();
            if field != "metadata.name"
                && field != "metadata.namespace"
                && !supported.iter().any(|s| s == field)
            {
                return Err(format!("field label not supported: {field}"));
            }
            reqs.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector { reqs })
    }

    /// Whether `obj` satisfies every requirement; a missing field reads as
    /// the empty string, as in the real server's field sets.
    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|(field, eq, want)| {
            let got = field_value(obj, field);
            (got == *want) == *eq
        })
    }

    /// The one name a `metadata.name=` requirement selects, if any.
    pub(crate) fn required_name(&self) -> Option<&str> {
        self.reqs.iter().find(|(f, eq, _)| *eq && f == "metadata.name").map(|(_, _, v)| v.as_str())
    }

    /// Adds a `metadata.name=<name>` requirement.
    pub(crate) fn and_name(mut self, name: &str) -> Self {
        self.reqs.push(("metadata.name".into(), true, name.to_string()));
        self
    }
}

fn field_value(obj: &Value, field: &str) -> String {
    match field {
        "metadata.name" => meta_str(obj, "name").unwrap_or_default().to_string(),
        "metadata.namespace" => meta_str(obj, "namespace").unwrap_or_default().to_string(),
        _ => {
            let mut cur = obj;
            for seg in field.split('.') {
                match cur.get(seg) {
                    Some(v) => cur = v,
                    None => return String::new(),
                }
            }
            match cur {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "n1", "namespace": "ns", "labels": labels}, "spec": {"nodeName": "w1", "unschedulable": true}})
    }

    #[test]
    fn label_selectors_follow_the_apimachinery_grammar() {
        let o = obj(json!({"a": "1", "b": "x", "n": "5"}));
        let cases = [
            ("", true),
            ("a", true),
            ("!a", false),
            ("!zz", true),
            ("a=1", true),
            ("a==1", true),
            ("a!=1", false),
            ("zz!=1", true),
            ("a in (1, 2)", true),
            ("a in (2,3)", false),
            ("a notin (2,3)", true),
            ("zz notin (2)", true),
            ("zz in (2)", false),
            ("a=1,b=x", true),
            ("a=1,b=y", false),
            ("a in (1,2),b notin (y)", true),
            ("n>4", true),
            ("n<5", false),
        ];
        for (sel, want) in cases {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(&o), want, "{sel}");
        }
        for bad in ["a in 1", "a in (1", "=x", "a>b", "a b c"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selectors_accept_only_supported_fields() {
        let o = obj(json!({}));
        let sup = vec!["spec.nodeName".to_string(), "spec.unschedulable".to_string()];
        for (sel, want) in [
            ("metadata.name=n1", true),
            ("metadata.name==n2", false),
            ("metadata.name!=n2,metadata.namespace=ns", true),
            ("spec.nodeName=w1", true),
            ("spec.unschedulable=true", true),
        ] {
            assert_eq!(FieldSelector::parse(sel, &sup).unwrap().matches(&o), want, "{sel}");
        }
        assert_eq!(
            FieldSelector::parse("metadata.name=a,spec.nodeName=b", &sup).unwrap().required_name(),
            Some("a")
        );
        assert_eq!(FieldSelector::parse("metadata.name!=a", &sup).unwrap().required_name(), None);
        let err = FieldSelector::parse("spec.other=1", &sup).unwrap_err();
        assert!(err.contains("spec.other"), "{err}");
        assert!(FieldSelector::parse("metadata.name", &sup).is_err());
    }
}
