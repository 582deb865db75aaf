#ifndef PEERLINK_CDBUS_SHIM_H
#define PEERLINK_CDBUS_SHIM_H
#include <dbus/dbus.h>
#endif
