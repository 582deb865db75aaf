import CLI
import Foundation

exit(PeerlinkCLI.main(CommandLine.arguments))
