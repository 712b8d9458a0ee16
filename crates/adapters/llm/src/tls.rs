//! The TLS set-up of every model client: reqwest's own rustls configuration (the platform
//! verifier over the system's roots, TLS 1.2 and 1.3, SNI, `http/1.1` by ALPN), except that
//! the system's root certificates are read on the first handshake that needs them, once per
//! process, instead of by every client as it is built.
//!
//! Reading them (about 150 files under `/etc/ssl/certs`, parsed) took about 3.5 ms per
//! client, and `fabric run` builds two (model discovery and the chat client) before its first
//! model call, for a plain `http://` local server that never shakes hands (issue #26). Building
//! a client whose base URL is `https://` still reads them (if no client has yet), so a host
//! without roots fails there, as before; for `http://` that failure, if a redirect ever led
//! to `https://`, is the handshake's.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// The rustls configuration of a client for `base_url`: the roots are read now when it is an
/// `https://` address (so a host without them fails as the client is built), else on the
/// first handshake.
pub(crate) fn client_config(base_url: &str) -> Result<rustls::ClientConfig, rustls::Error> {
    // As reqwest does: a provider the program installed, else aws-lc-rs.
    let provider = CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    let verifier = LazyVerifier {
        provider: Arc::clone(&provider),
    };
    if base_url.starts_with("https://") {
        verifier.platform()?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(rustls::ALL_VERSIONS)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    // reqwest's defaults for a client without HTTP/2 (the feature is off).
    config.enable_sni = true;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The platform verifier, made on first use and shared by every client of the process.
#[derive(Debug)]
struct LazyVerifier {
    provider: Arc<CryptoProvider>,
}

/// The process's platform verifier (or why it could not be made: no roots on this host).
static PLATFORM: OnceLock<Result<Arc<rustls_platform_verifier::Verifier>, rustls::Error>> =
    OnceLock::new();

impl LazyVerifier {
    fn platform(&self) -> Result<&rustls_platform_verifier::Verifier, rustls::Error> {
        PLATFORM
            .get_or_init(|| {
                rustls_platform_verifier::Verifier::new(Arc::clone(&self.provider)).map(Arc::new)
            })
            .as_deref()
            .map_err(Clone::clone)
    }
}

impl ServerCertVerifier for LazyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.platform()?.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.platform()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.platform()?.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        // What the platform verifier answers (its WebPKI verifier's provider's schemes),
        // known without the roots: the ClientHello needs it before any certificate.
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schemes offered before the roots are read are the platform verifier's own.
    #[test]
    fn lazy_schemes_match_the_platform_verifier() {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let lazy = LazyVerifier {
            provider: Arc::clone(&provider),
        };
        let Ok(platform) = rustls_platform_verifier::Verifier::new(provider) else {
            // A host without roots: nothing to compare with.
            return;
        };
        assert_eq!(
            lazy.supported_verify_schemes(),
            platform.supported_verify_schemes()
        );
    }

    /// Certificates are still checked: the lazy verifier hands them to the platform's, which
    /// refuses one no root vouches for.
    #[test]
    fn lazy_verifier_still_refuses_a_bad_certificate() {
        let lazy = LazyVerifier {
            provider: Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
        };
        let Ok(name) = ServerName::try_from("example.com") else {
            panic!("a valid name");
        };
        let verdict = lazy.verify_server_cert(
            &CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00]),
            &[],
            &name,
            &[],
            UnixTime::now(),
        );
        assert!(verdict.is_err(), "{verdict:?}");
    }

    /// An `http://` client is configured as reqwest configures its own.
    #[test]
    fn config_keeps_reqwests_defaults() {
        let Ok(config) = client_config("http://127.0.0.1:9/v1") else {
            panic!("an http:// configuration needs no roots");
        };
        assert!(config.enable_sni);
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
