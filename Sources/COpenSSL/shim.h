#ifndef PEERLINK_COPENSSL_SHIM_H
#define PEERLINK_COPENSSL_SHIM_H
// OpenSSL 3 for the TLS module, loaded at run time.
//
// Why dlopen: libssl and libcrypto are the largest libraries the binary would load, and loading
// them means relocating thousands of their symbols before main. The package ships one binary that
// is both the daemon and the `peerlink` CLI, which scripts call in loops and which never uses
// TLS: linked, OpenSSL took about half of every CLI start. So no module links it
// (module.modulemap has no `link` line); the TLS module calls OpenSSL through the table below,
// filled by SystemKit's SharedLibrary loader the first time TLS is used (the daemon does that at
// start, so a missing libssl3 is still an error at start). Each entry's type is the header's own
// declaration (__typeof__), so a call through the table is checked exactly as a direct call.
//
// The wrappers below exist because those OpenSSL calls are macros (over SSL_CTX_ctrl,
// BIO_ctrl, CRYPTO_get_ex_new_index, a variadic function...), which Swift cannot import.
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ec.h>
#include <openssl/x509.h>
#include <openssl/pem.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>

/// The soname loaded: OpenSSL 3's ABI (Debian's libssl3). libcrypto.so.3 comes with it.
#define PEERLINK_OPENSSL_SONAME "libssl.so.3"

/// Every OpenSSL function the TLS module calls. A call that is not listed here does not link.
#define PEERLINK_OPENSSL_FUNCTIONS(F) \
    F(BIO_clear_flags) F(BIO_ctrl) F(BIO_ctrl_pending) F(BIO_free) \
    F(BIO_get_data) F(BIO_get_new_index) F(BIO_meth_new) \
    F(BIO_meth_set_ctrl) F(BIO_meth_set_destroy) F(BIO_meth_set_read_ex) F(BIO_meth_set_write_ex) \
    F(BIO_new) F(BIO_read) F(BIO_s_mem) F(BIO_set_data) F(BIO_set_flags) F(BIO_set_init) \
    F(BIO_write) F(BN_bin2bn) \
    F(BN_free) F(BN_to_ASN1_INTEGER) F(CRYPTO_get_ex_new_index) \
    F(ERR_clear_error) F(ERR_error_string_n) F(ERR_get_error) \
    F(EVP_Digest) F(EVP_DigestFinal_ex) F(EVP_DigestInit_ex) \
    F(EVP_DigestUpdate) F(EVP_MD_CTX_free) F(EVP_MD_CTX_new) \
    F(EVP_PKEY_Q_keygen) F(EVP_PKEY_free) F(EVP_PKEY_is_a) \
    F(EVP_sha256) F(PEM_read_bio_PrivateKey) F(PEM_read_bio_X509) \
    F(PEM_write_bio_PrivateKey) F(PEM_write_bio_X509) F(RAND_bytes) \
    F(SSL_CIPHER_get_name) F(SSL_CTX_check_private_key) F(SSL_CTX_ctrl) \
    F(SSL_CTX_free) F(SSL_CTX_new) F(SSL_CTX_set_cert_verify_callback) \
    F(SSL_CTX_set_ciphersuites) F(SSL_CTX_set_num_tickets) F(SSL_CTX_set_verify) F(SSL_CTX_use_PrivateKey) \
    F(SSL_CTX_use_certificate) F(SSL_do_handshake) F(SSL_export_keying_material) \
    F(SSL_free) F(SSL_get0_peer_certificate) F(SSL_get_current_cipher) \
    F(SSL_get_error) F(SSL_get_ex_data) F(SSL_get_ex_data_X509_STORE_CTX_idx) \
    F(SSL_get_version) F(SSL_new) F(SSL_read_ex) \
    F(SSL_set_accept_state) F(SSL_set_bio) F(SSL_set_connect_state) \
    F(SSL_set_ex_data) F(SSL_shutdown) F(SSL_version) \
    F(SSL_write_ex) F(TLS_method) F(X509_NAME_add_entry_by_txt) \
    F(X509_STORE_CTX_get0_cert) F(X509_STORE_CTX_get_ex_data) F(X509_STORE_CTX_set_error) \
    F(X509_check_private_key) F(X509_free) F(X509_get_serialNumber) \
    F(X509_get_subject_name) F(X509_getm_notAfter) F(X509_getm_notBefore) \
    F(X509_gmtime_adj) F(X509_new) F(X509_set_issuer_name) \
    F(X509_set_pubkey) F(X509_set_version) F(X509_sign) \
    F(i2d_X509)

#define PEERLINK_OPENSSL_FIELD(name) __typeof__(&name) _Nonnull name;
/// The functions, each under its own name: `openSSL.SSL_new(ctx)` in Swift.
struct peerlink_openssl {
    PEERLINK_OPENSSL_FUNCTIONS(PEERLINK_OPENSSL_FIELD)
};
#undef PEERLINK_OPENSSL_FIELD

#define PEERLINK_OPENSSL_NAME(name) #name "\0"
/// The same functions' names in the table's order, each ended by a NUL and the list by an
/// empty name: what SystemKit's `SharedLibrary.functions` reads to fill the table.
static inline const char *peerlink_openssl_symbols(void) {
    return PEERLINK_OPENSSL_FUNCTIONS(PEERLINK_OPENSSL_NAME);
}
#undef PEERLINK_OPENSSL_NAME

/// TLS 1.3 as both the lowest and the highest version the context accepts. 1 on success.
static inline int peerlink_ctx_set_tls13_only(const struct peerlink_openssl *api, SSL_CTX *ctx) {
    return api->SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_3_VERSION, NULL) == 1
        && api->SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MAX_PROTO_VERSION, TLS1_3_VERSION, NULL) == 1;
}

/// No session cache: every connection runs a full handshake, so every peer certificate
/// goes through the verify callback.
static inline void peerlink_ctx_disable_session_cache(const struct peerlink_openssl *api, SSL_CTX *ctx) {
    api->SSL_CTX_ctrl(ctx, SSL_CTRL_SET_SESS_CACHE_MODE, SSL_SESS_CACHE_OFF, NULL);
}

/// A new index for SSL_set_ex_data / SSL_get_ex_data (-1 on failure).
static inline int peerlink_ssl_ex_new_index(const struct peerlink_openssl *api) {
    return api->CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_SSL, 0, NULL, NULL, NULL, NULL);
}

/// A fresh ECDSA P-256 key pair (NULL on failure).
static inline EVP_PKEY *peerlink_generate_p256_key(const struct peerlink_openssl *api) {
    return api->EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
}

/// The library and reason parts of a packed error code from ERR_get_error.
static inline int peerlink_err_lib(unsigned long code) { return ERR_GET_LIB(code); }
static inline int peerlink_err_reason(unsigned long code) { return ERR_GET_REASON(code); }

/// A memory BIO over a copy of nothing: reads return "retry" when empty instead of EOF,
/// which is what an SSL object waiting for network bytes must see.
static inline BIO *peerlink_bio_new_mem(const struct peerlink_openssl *api) {
    BIO *bio = api->BIO_new(api->BIO_s_mem());
    if (bio != NULL) api->BIO_ctrl(bio, BIO_C_SET_BUF_MEM_EOF_RETURN, -1, NULL);
    return bio;
}

#endif
