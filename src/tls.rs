//! The process's TLS crypto provider, for the clients that speak TLS: the HTTP upstreams (code
//! mode) and the session store's `rediss://`.

/// Installs ring as the process's default rustls crypto provider, unless one is installed already.
///
/// The HTTP upstreams' client (reqwest, built with rustls but no provider, so that aws-lc-rs, a C
/// build, stays out) takes the process's default and panics building a client when there is none,
/// for http:// as for https://; so does the session store's TLS connection (`rediss://`).
/// Whoever else builds a reqwest client in a process that links this crate (the tests' rmcp
/// clients) calls this first. Idempotent and cheap after the first call.
pub fn install_crypto_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // An error means another provider was installed first, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
