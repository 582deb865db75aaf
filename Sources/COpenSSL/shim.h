#ifndef PEERLINK_COPENSSL_SHIM_H
#define PEERLINK_COPENSSL_SHIM_H
// OpenSSL 3 for the TLS module. The wrappers below exist because these OpenSSL calls are
// macros (over SSL_CTX_ctrl, BIO_ctrl, CRYPTO_get_ex_new_index, a variadic function...),
// which Swift cannot import.
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

/// TLS 1.3 as both the lowest and the highest version the context accepts. 1 on success.
static inline int peerlink_ctx_set_tls13_only(SSL_CTX *ctx) {
    return SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) == 1
        && SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) == 1;
}

/// No session cache: every connection runs a full handshake, so every peer certificate
/// goes through the verify callback.
static inline void peerlink_ctx_disable_session_cache(SSL_CTX *ctx) {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
}

/// A new index for SSL_set_ex_data / SSL_get_ex_data (-1 on failure).
static inline int peerlink_ssl_ex_new_index(void) {
    return SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

/// A fresh ECDSA P-256 key pair (NULL on failure).
static inline EVP_PKEY *peerlink_generate_p256_key(void) {
    return EVP_EC_gen("P-256");
}

/// The bytes held by a memory BIO (not copied; valid until the BIO changes). Returns the length.
static inline long peerlink_bio_mem_data(BIO *bio, char **data) {
    return BIO_get_mem_data(bio, data);
}

/// The library and reason parts of a packed error code from ERR_get_error.
static inline int peerlink_err_lib(unsigned long code) { return ERR_GET_LIB(code); }
static inline int peerlink_err_reason(unsigned long code) { return ERR_GET_REASON(code); }

/// A memory BIO over a copy of nothing: reads return "retry" when empty instead of EOF,
/// which is what an SSL object waiting for network bytes must see.
static inline BIO *peerlink_bio_new_mem(void) {
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio != NULL) BIO_set_mem_eof_return(bio, -1);
    return bio;
}

#endif
