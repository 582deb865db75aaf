#ifndef PEERLINK_CDBUS_SHIM_H
#define PEERLINK_CDBUS_SHIM_H
// libdbus-1 for the DBus module, loaded at run time (dlopen), as COpenSSL's shim.h explains for
// OpenSSL: the binary is also the `peerlink` CLI, which never uses D-Bus, and loading libdbus-1
// (and libsystemd and the compression and crypto libraries it brings) was most of what the
// dynamic loader still did at every CLI start. No module links it (module.modulemap has no `link`
// line); the DBus module calls libdbus through the table below, filled by SystemKit's
// SharedLibrary loader the first time D-Bus is used (the daemon does that first thing at start,
// so a missing libdbus-1-3 is still an error at start). Each entry's type is the header's own
// declaration (__typeof__), so a call through the table is checked exactly as a direct call, and
// a direct call does not link.
#include <dbus/dbus.h>

/// The soname loaded (Debian's libdbus-1-3).
#define PEERLINK_LIBDBUS_SONAME "libdbus-1.so.3"

/// Every libdbus function the DBus module calls.
#define PEERLINK_LIBDBUS_FUNCTIONS(F) \
    F(dbus_bus_get_private) F(dbus_bus_get_unique_name) \
    F(dbus_bus_register) F(dbus_connection_add_filter) \
    F(dbus_connection_can_send_type) F(dbus_connection_close) \
    F(dbus_connection_dispatch) F(dbus_connection_get_dispatch_status) \
    F(dbus_connection_get_unix_fd) F(dbus_connection_open_private) \
    F(dbus_connection_send) F(dbus_connection_set_dispatch_status_function) \
    F(dbus_connection_set_exit_on_disconnect) F(dbus_connection_set_timeout_functions) \
    F(dbus_connection_set_wakeup_main_function) F(dbus_connection_set_watch_functions) \
    F(dbus_connection_unref) F(dbus_error_free) \
    F(dbus_error_init) F(dbus_error_is_set) \
    F(dbus_free) F(dbus_message_demarshal) \
    F(dbus_message_demarshal_bytes_needed) F(dbus_message_get_allow_interactive_authorization) \
    F(dbus_message_get_destination) F(dbus_message_get_error_name) \
    F(dbus_message_get_interface) F(dbus_message_get_member) \
    F(dbus_message_get_no_reply) F(dbus_message_get_path) \
    F(dbus_message_get_reply_serial) F(dbus_message_get_sender) \
    F(dbus_message_get_serial) F(dbus_message_get_type) \
    F(dbus_message_iter_abandon_container) F(dbus_message_iter_append_basic) \
    F(dbus_message_iter_append_fixed_array) F(dbus_message_iter_close_container) \
    F(dbus_message_iter_get_arg_type) F(dbus_message_iter_get_basic) \
    F(dbus_message_iter_get_fixed_array) F(dbus_message_iter_get_signature) \
    F(dbus_message_iter_init) F(dbus_message_iter_init_append) \
    F(dbus_message_iter_next) F(dbus_message_iter_open_container) \
    F(dbus_message_iter_recurse) F(dbus_message_marshal) \
    F(dbus_message_new) F(dbus_message_set_allow_interactive_authorization) \
    F(dbus_message_set_destination) F(dbus_message_set_error_name) \
    F(dbus_message_set_interface) F(dbus_message_set_member) \
    F(dbus_message_set_no_reply) F(dbus_message_set_path) \
    F(dbus_message_set_reply_serial) F(dbus_message_set_serial) \
    F(dbus_message_unref) F(dbus_signature_validate) \
    F(dbus_signature_validate_single) F(dbus_threads_init_default) \
    F(dbus_timeout_get_data) F(dbus_timeout_get_enabled) \
    F(dbus_timeout_get_interval) F(dbus_timeout_handle) \
    F(dbus_timeout_set_data) F(dbus_validate_bus_name) \
    F(dbus_validate_error_name) F(dbus_validate_interface) \
    F(dbus_validate_member) F(dbus_watch_get_data) \
    F(dbus_watch_get_enabled) F(dbus_watch_get_flags) \
    F(dbus_watch_get_unix_fd) F(dbus_watch_handle) \
    F(dbus_watch_set_data)

#define PEERLINK_LIBDBUS_FIELD(name) __typeof__(&name) _Nonnull name;
/// The functions, each under its own name: `libdbus.dbus_message_new(type)` in Swift.
struct peerlink_libdbus {
    PEERLINK_LIBDBUS_FUNCTIONS(PEERLINK_LIBDBUS_FIELD)
};
#undef PEERLINK_LIBDBUS_FIELD

#define PEERLINK_LIBDBUS_NAME(name) #name "\0"
/// The same functions' names in the table's order, each ended by a NUL and the list by an
/// empty name: what SystemKit's `SharedLibrary.functions` reads to fill the table.
static inline const char *peerlink_libdbus_symbols(void) {
    return PEERLINK_LIBDBUS_FUNCTIONS(PEERLINK_LIBDBUS_NAME);
}
#undef PEERLINK_LIBDBUS_NAME

#endif
