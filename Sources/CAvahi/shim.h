#ifndef PEERLINK_CAVAHI_SHIM_H
#define PEERLINK_CAVAHI_SHIM_H
// libavahi-client for the DNSSD module, loaded at run time (dlopen), as COpenSSL's shim.h
// explains for OpenSSL: the binary is also the `peerlink` CLI, which never uses Avahi. No module
// links it (module.modulemap has no `link` line); the DNSSD module calls Avahi through the table
// below, filled by SystemKit's SharedLibrary loader the first time DNS-SD is used. Each entry's
// type is the header's own declaration (__typeof__), so a call through the table is checked
// exactly as a direct call, and a direct call does not link.
#include <avahi-client/client.h>
#include <avahi-client/publish.h>
#include <avahi-client/lookup.h>
#include <avahi-common/error.h>
#include <avahi-common/malloc.h>
#include <avahi-common/strlst.h>
#include <avahi-common/alternative.h>
#include <avahi-common/watch.h>

/// The soname loaded (Debian's libavahi-client3); libavahi-common.so.3 comes with it.
#define PEERLINK_LIBAVAHI_SONAME "libavahi-client.so.3"

/// Every Avahi function the DNSSD module calls (libavahi-client's and libavahi-common's: dlsym
/// on the client library's handle finds both).
#define PEERLINK_LIBAVAHI_FUNCTIONS(F) \
    F(avahi_address_snprint) F(avahi_alternative_service_name) \
    F(avahi_client_errno) F(avahi_client_free) \
    F(avahi_client_get_version_string) F(avahi_client_new) \
    F(avahi_entry_group_add_service_strlst) F(avahi_entry_group_add_service_subtype) \
    F(avahi_entry_group_commit) F(avahi_entry_group_free) \
    F(avahi_entry_group_get_client) F(avahi_entry_group_new) \
    F(avahi_entry_group_reset) F(avahi_entry_group_update_service_txt_strlst) \
    F(avahi_free) F(avahi_service_browser_free) \
    F(avahi_service_browser_new) F(avahi_service_resolver_free) \
    F(avahi_service_resolver_new) F(avahi_service_type_browser_free) \
    F(avahi_service_type_browser_new) F(avahi_strerror) \
    F(avahi_string_list_add_arbitrary) F(avahi_string_list_free) \
    F(avahi_string_list_get_next) F(avahi_string_list_get_size) \
    F(avahi_string_list_get_text)

#define PEERLINK_LIBAVAHI_FIELD(name) __typeof__(&name) _Nonnull name;
/// The functions, each under its own name: `libavahi.avahi_client_new(...)` in Swift.
struct peerlink_libavahi {
    PEERLINK_LIBAVAHI_FUNCTIONS(PEERLINK_LIBAVAHI_FIELD)
};
#undef PEERLINK_LIBAVAHI_FIELD

#define PEERLINK_LIBAVAHI_NAME(name) #name "\0"
/// The same functions' names in the table's order, each ended by a NUL and the list by an
/// empty name: what SystemKit's `SharedLibrary.functions` reads to fill the table.
static inline const char *peerlink_libavahi_symbols(void) {
    return PEERLINK_LIBAVAHI_FUNCTIONS(PEERLINK_LIBAVAHI_NAME);
}
#undef PEERLINK_LIBAVAHI_NAME

#endif
