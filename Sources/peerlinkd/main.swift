import Daemon
import Glibc

// The composition root: everything lives in the Daemon module, which tests drive directly.
exit(await DaemonCommandLine.main(Array(CommandLine.arguments.dropFirst())))
