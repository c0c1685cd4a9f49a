//! Certificates and kubeconfigs for a test control plane: one CA (ECDSA P-256,
//! rcgen's ring signer) signs the API server's serving certificate and the
//! client certificates each component authenticates with (the Kubernetes
//! x509 authenticator takes the user from CN and the group from O), and a
//! separate key pair signs service-account tokens, as `kubeadm` lays it out
//! (https://kubernetes.io/docs/setup/best-practices/certificates/).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate authority that can issue certificates.
pub struct Ca {
    params: CertificateParams,
    key: KeyPair,
    /// The CA certificate, PEM.
    pub cert_pem: String,
}

/// A certificate and its private key, both PEM.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The certificate.
    pub cert_pem: String,
    /// Its PKCS#8 private key.
    pub key_pem: String,
}

/// What a certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// TLS server (API server, kubelet).
    Server,
    /// TLS client (components, users).
    Client,
}

impl Ca {
    /// A new self-signed CA named `cn`.
    pub fn new(cn: &str) -> Result<Ca> {
        let key = KeyPair::generate().context("generating the CA key")?;
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.self_signed(&key).context("self-signing the CA")?;
        Ok(Ca { params, key, cert_pem: cert.pem() })
    }

    /// The CA's private key, PKCS#8 PEM (the controller-manager's CSR signer needs it).
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// Issues a certificate for `cn` in group `org` (if any) with `sans`
    /// (IP addresses or DNS names; servers only).
    pub fn issue(&self, cn: &str, org: Option<&str>, sans: &[String], usage: Usage) -> Result<Pair> {
        let key = KeyPair::generate().with_context(|| format!("generating the key of {cn}"))?;
        let mut params = CertificateParams::new(sans.to_vec())
            .with_context(|| format!("subject alternative names {sans:?} of {cn}"))?;
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![match usage {
            Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).with_context(|| format!("signing the certificate of {cn}"))?;
        Ok(Pair { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

/// A key pair for signing service-account tokens: (private PKCS#8 PEM,
/// public SubjectPublicKeyInfo PEM). ES256 is one of the algorithms
/// kube-apiserver's `--service-account-signing-key-file` accepts.
pub fn signing_key() -> Result<(String, String)> {
    let key = KeyPair::generate().context("generating the service-account signing key")?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

/// How a kubeconfig user authenticates.
pub enum Credentials<'a> {
    /// A client certificate (files referenced by path, as kubeadm writes them).
    Cert {
        /// Certificate file.
        cert: &'a Path,
        /// Key file.
        key: &'a Path,
    },
    /// A bearer token.
    Token(&'a str),
}

/// A kubeconfig with one cluster, one user and one context named `context`.
pub fn kubeconfig(server: &str, ca_file: &Path, user: &str, creds: Credentials<'_>, context: &str) -> String {
    let user_entry = match creds {
        Credentials::Cert { cert, key } => serde_json::json!({
            "client-certificate": cert, "client-key": key,
        }),
        Credentials::Token(t) => serde_json::json!({ "token": t }),
    };
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server, "certificate-authority": ca_file}}],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
        "current-context": context,
        "preferences": {},
    });
    serde_yaml::to_string(&doc).expect("a kubeconfig built from strings serializes")
}

/// Writes `text` to `dir/name` with mode 0600 (keys) and returns the path.
pub fn write_private(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let p = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&p)
        .with_context(|| format!("writing {}", p.display()))?;
    f.write_all(text.as_bytes()).with_context(|| format!("writing {}", p.display()))?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issued_client_certificate_carries_its_user_and_group() {
        let ca = Ca::new("test CA").unwrap();
        let p = ca.issue("system:node:n1", Some("system:nodes"), &[], Usage::Client).unwrap();
        assert!(p.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(p.key_pem.contains("PRIVATE KEY"));
        assert_ne!(p.cert_pem, ca.cert_pem);
    }

    #[test]
    fn a_kubeconfig_names_its_context_and_credentials() {
        let y = kubeconfig(
            "https://127.0.0.1:6443",
            Path::new("/pki/ca.crt"),
            "admin",
            Credentials::Token("t0k"),
            "e2e",
        );
        let v: serde_json::Value = serde_yaml::from_str(&y).unwrap();
        assert_eq!(v["current-context"], "e2e");
        assert_eq!(v["users"][0]["user"]["token"], "t0k");
        assert_eq!(v["clusters"][0]["cluster"]["certificate-authority"], "/pki/ca.crt");
    }
}
