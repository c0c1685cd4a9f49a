//! What the CDI library makes of a spec file, modelled on
//! tags.cncf.io/container-device-interface v1.1.0 (the version containerd
//! 2.2 and podman use): `pkg/cdi/spec.go` `ReadSpec` → `ParseSpec`
//! (`yaml.UnmarshalStrict`: an unknown field fails the file), `newSpec` →
//! `Spec.validate`, `pkg/cdi/device.go` `Device.validate`,
//! `pkg/cdi/container-edits.go` `ContainerEdits.Validate`, `pkg/parser`
//! names and `specs-go/version.go` `ValidateVersion`. A file that fails is
//! skipped whole by the cache (`cache.go` `refresh`): none of its devices
//! resolves, and every container naming one fails in CreateContainer.

use serde_json::{Map, Value};

fn obj<'a>(v: &'a Value, at: &str, known: &[&str]) -> Result<&'a Map<String, Value>, String> {
    let o = v.as_object().ok_or_else(|| format!("{at}: not an object"))?;
    for k in o.keys() {
        if !known.contains(&k.as_str()) {
            return Err(format!("{at}: unknown field {k:?} (UnmarshalStrict)"));
        }
    }
    Ok(o)
}

fn strings<'a>(v: Option<&'a Value>, at: &str) -> Result<Vec<&'a str>, String> {
    match v {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(a)) => {
            a.iter().map(|x| x.as_str().ok_or_else(|| format!("{at}: {x} is not a string"))).collect()
        }
        Some(other) => Err(format!("{at}: {other} is not a list")),
    }
}

fn list<'a>(v: Option<&'a Value>, at: &str) -> Result<&'a [Value], String> {
    match v {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(format!("{at}: {other} is not a list")),
    }
}

fn is_letter(c: u8) -> bool {
    c.is_ascii_alphabetic()
}

fn is_alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}

/// `parser.validateVendorOrClassName`.
fn vendor_or_class(name: &str, what: &str) -> Result<(), String> {
    let b = name.as_bytes();
    if b.is_empty() {
        return Err(format!("invalid {what}. empty name"));
    }
    if !is_letter(b[0]) {
        return Err(format!("invalid {what}. {name:?}, should start with letter"));
    }
    if b.len() > 1 && !b[1..b.len() - 1].iter().all(|&c| is_alnum(c) || b"_-.".contains(&c)) {
        return Err(format!("invalid {what}. invalid character in name {name:?}"));
    }
    if !is_alnum(b[b.len() - 1]) {
        return Err(format!("invalid {what}. {name:?}, should end with a letter or digit"));
    }
    Ok(())
}

/// `parser.ValidateDeviceName`.
fn device_name(name: &str) -> Result<(), String> {
    let b = name.as_bytes();
    if b.is_empty() {
        return Err("invalid (empty) device name".into());
    }
    if !is_alnum(b[0]) {
        return Err(format!("invalid class {name:?}, should start with a letter or digit"));
    }
    if b.len() == 1 {
        return Ok(());
    }
    if !b[1..b.len() - 1].iter().all(|&c| is_alnum(c) || b"_-.:".contains(&c)) {
        return Err(format!("invalid character in device name {name:?}"));
    }
    if !is_alnum(b[b.len() - 1]) {
        return Err(format!("invalid name {name:?}, should end with a letter or digit"));
    }
    Ok(())
}

/// What one `containerEdits` object holds, for the version rules.
#[derive(Default)]
struct Edits {
    empty: bool,
    host_paths: bool,
    mount_types: bool,
}

/// `ContainerEdits.Validate` (and `isEmpty`, which only devices care about).
fn edits(v: Option<&Value>, at: &str) -> Result<Edits, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(Edits { empty: true, ..Edits::default() }) };
    let o =
        obj(v, at, &["env", "deviceNodes", "netDevices", "hooks", "mounts", "intelRdt", "additionalGids"])?;
    let mut out = Edits::default();
    let env = strings(o.get("env"), &format!("{at}.env"))?;
    for e in &env {
        // ValidateEnv: a '=' after at least one character.
        if e.find('=').is_none_or(|i| i == 0) {
            return Err(format!("{at}: invalid container edits: invalid environment variable {e:?}"));
        }
    }
    let nodes = list(o.get("deviceNodes"), &format!("{at}.deviceNodes"))?;
    for (i, n) in nodes.iter().enumerate() {
        let nat = format!("{at}.deviceNodes[{i}]");
        let n = obj(
            n,
            &nat,
            &["path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"],
        )?;
        let path = n.get("path").and_then(Value::as_str).unwrap_or("");
        if path.is_empty() {
            return Err(format!("{nat}: invalid (empty) device path"));
        }
        let ty = n.get("type").and_then(Value::as_str).unwrap_or("");
        if !["", "b", "c", "u", "p"].contains(&ty) {
            return Err(format!("{nat}: device {path:?}: invalid type {ty:?}"));
        }
        let perms = n.get("permissions").and_then(Value::as_str).unwrap_or("");
        if !perms.chars().all(|c| "rwm".contains(c)) {
            return Err(format!("{nat}: device {path:?}: invalid permissions {perms:?}"));
        }
        out.host_paths |= n.get("hostPath").and_then(Value::as_str).is_some_and(|h| !h.is_empty());
    }
    let mounts = list(o.get("mounts"), &format!("{at}.mounts"))?;
    for (i, m) in mounts.iter().enumerate() {
        let mat = format!("{at}.mounts[{i}]");
        let m = obj(m, &mat, &["hostPath", "containerPath", "options", "type"])?;
        for k in ["hostPath", "containerPath"] {
            if m.get(k).and_then(Value::as_str).unwrap_or("").is_empty() {
                return Err(format!("{mat}: invalid mount, empty {k}"));
            }
        }
        out.mount_types |= m.get("type").and_then(Value::as_str).is_some_and(|t| !t.is_empty());
    }
    // Hooks, netDevices, intelRdt and additionalGids: never written by kube-rdma;
    // present at all, they count as edits (and need versions this model does not check).
    let hooks = list(o.get("hooks"), &format!("{at}.hooks"))?;
    let net = list(o.get("netDevices"), &format!("{at}.netDevices"))?;
    let gids = list(o.get("additionalGids"), &format!("{at}.additionalGids"))?;
    let rdt = o.get("intelRdt").is_some_and(|v| !v.is_null());
    out.empty = env.is_empty()
        && nodes.is_empty()
        && mounts.is_empty()
        && hooks.is_empty()
        && net.is_empty()
        && gids.is_empty()
        && !rdt;
    Ok(out)
}

fn version_tuple(v: &str) -> Option<(u32, u32, u32)> {
    let mut p = v.strip_prefix('v').unwrap_or(v).split('.');
    let t = (p.next()?.parse().ok()?, p.next()?.parse().ok()?, p.next()?.parse().ok()?);
    p.next().is_none().then_some(t)
}

/// The CDI library's verdict on a JSON spec: `Ok(device names)` or the error
/// that makes the cache skip the file.
pub fn validate(spec: &Value) -> Result<Vec<String>, String> {
    let o = obj(spec, "spec", &["cdiVersion", "kind", "annotations", "devices", "containerEdits"])?;
    let version = o.get("cdiVersion").and_then(Value::as_str).unwrap_or("");
    const KNOWN: [&str; 10] =
        ["0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"];
    if !KNOWN.contains(&version.strip_prefix('v').unwrap_or(version)) {
        return Err(format!("invalid version {version:?}"));
    }
    let kind = o.get("kind").and_then(Value::as_str).unwrap_or("");
    // ParseQualifier: "vendor/class", else vendor "" and class = kind.
    let (vendor, class) = match kind.split_once('/') {
        Some((v, c)) if !v.is_empty() && !c.is_empty() => (v, c),
        _ => ("", kind),
    };
    let spec_annotations = o.get("annotations").and_then(Value::as_object).is_some_and(|a| !a.is_empty());
    let spec_edits = edits(o.get("containerEdits"), "spec.containerEdits")?;
    let devices = list(o.get("devices"), "spec.devices")?;
    let mut names: Vec<String> = Vec::new();
    let mut need = (0, 3, 0);
    let mut bump = |v: (u32, u32, u32)| need = need.max(v);
    if spec_annotations || class.contains('.') {
        bump((0, 6, 0));
    }
    if spec_edits.host_paths {
        bump((0, 5, 0));
    }
    if spec_edits.mount_types {
        bump((0, 4, 0));
    }
    let mut device_errors = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        let at = format!("spec.devices[{i}]");
        let d = obj(d, &at, &["name", "annotations", "containerEdits"])?;
        let name = d.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        if name.as_bytes().first().is_some_and(u8::is_ascii_digit) {
            bump((0, 5, 0));
        }
        if d.get("annotations").and_then(Value::as_object).is_some_and(|a| !a.is_empty()) {
            bump((0, 6, 0));
        }
        let e = edits(d.get("containerEdits"), &format!("{at}.containerEdits"))?;
        if e.host_paths {
            bump((0, 5, 0));
        }
        if e.mount_types {
            bump((0, 4, 0));
        }
        // Device.validate, in its order.
        let verdict = device_name(&name).and_then(|()| {
            if e.empty {
                Err("invalid device, empty device edits".to_string())
            } else {
                Ok(())
            }
        });
        match verdict {
            Err(err) => device_errors.push(format!("failed add device {name:?}: {err}")),
            Ok(()) if names.contains(&name) => {
                device_errors.push(format!("invalid spec, multiple device {name:?}"));
            }
            Ok(()) => names.push(name),
        }
    }
    // Spec.validate, in its order: version, vendor, class, edits, then devices.
    let have = version_tuple(version).ok_or_else(|| format!("invalid version {version:?}"))?;
    if need > have {
        return Err(format!("the spec version must be at least v{}.{}.{}", need.0, need.1, need.2));
    }
    vendor_or_class(vendor, "vendor")?;
    vendor_or_class(class, "class")?;
    if let Some(e) = device_errors.into_iter().next() {
        return Err(format!("invalid CDI Spec: {e}"));
    }
    if names.is_empty() {
        return Err("invalid CDI Spec: invalid spec, no devices".into());
    }
    Ok(names)
}

/// Every spec file in `dir`, validated.
pub fn validate_dir(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Result<Vec<String>, String>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect()
        })
        .unwrap_or_else(|_| Vec::new());
    out.sort();
    out.into_iter()
        .map(|p| {
            let v = std::fs::read(&p)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
                .and_then(|v: Value| validate(&v));
            (p, v)
        })
        .collect()
}
