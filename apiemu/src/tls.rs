//! TLS: a fresh self-signed CA and a server certificate for `127.0.0.1`,
//! `::1` and `localhost` per emulator (ECDSA P-256 via rcgen's ring signer),
//! served with rustls' ring provider, the same provider the workspace's
//! `kube` client uses.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::StartError;

/// The emulator's certificates.
pub(crate) struct Certs {
    /// The CA certificate, PEM (goes into the kubeconfig).
    pub(crate) ca_pem: String,
    pub(crate) server_config: Arc<rustls::ServerConfig>,
}

fn tls_err(what: &str, e: impl std::fmt::Display) -> StartError {
    StartError::Tls(format!("{what}: {e}"))
}

/// Generates the CA and server certificate and the rustls server config
/// (HTTP/1.1 ALPN, as kube's client offers).
pub(crate) fn generate() -> Result<Certs, StartError> {
    let ca_key = KeyPair::generate().map_err(|e| tls_err("generating the CA key", e))?;
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "kube-rdma-apiemu CA");
    ca_params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(|e| tls_err("self-signing the CA", e))?;

    let server_key = KeyPair::generate().map_err(|e| tls_err("generating the server key", e))?;
    let mut server_params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "::1".to_string(), "localhost".to_string()])
            .map_err(|e| tls_err("server certificate names", e))?;
    server_params.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    server_params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let server_cert = server_params
        .signed_by(&server_key, &issuer)
        .map_err(|e| tls_err("signing the server certificate", e))?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err("TLS versions", e))?
        .with_no_client_auth()
        .with_single_cert(
            vec![server_cert.der().clone(), CertificateDer::from(ca_cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
        )
        .map_err(|e| tls_err("server certificate", e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Certs { ca_pem: ca_cert.pem(), server_config: Arc::new(config) })
}
