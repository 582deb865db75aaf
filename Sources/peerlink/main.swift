import CLI
import Glibc

exit(PeerlinkCLI.main(CommandLine.arguments))
