#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import SystemKit

/// SharedLibrary fills the function tables of the C libraries the daemon loads at run time
/// (OpenSSL, libdbus-1, Avahi). Here it loads the C library itself, whose functions can be
/// called directly too, to check that each slot holds the function of that name.
@Suite struct SharedLibraryTests {
    /// Two of libc's functions, in the order of the name list below.
    struct LibcTable {
        var strlen: @convention(c) (UnsafePointer<CChar>) -> Int
        var abs: @convention(c) (Int32) -> Int32
    }

    private func load(_ soname: String, _ names: String) -> Result<LibcTable, SharedLibrary.LoadFailure> {
        names.withCString { SharedLibrary.functions(LibcTable.self, soname: soname, symbols: $0) }
    }

    @Test func eachSlotHoldsTheFunctionOfItsName() throws {
        let table = try load("libc.so.6", "strlen\0abs\0").get()
        #expect(table.strlen("seven c") == 7)
        #expect(table.abs(-42) == 42)
    }

    @Test func aMissingFunctionIsNamed() {
        let result = load("libc.so.6", "strlen\0peerlink_no_such_function\0")
        #expect(result.failure == SharedLibrary.LoadFailure(reason: "libc.so.6 has no function peerlink_no_such_function"))
    }

    @Test func aMissingLibraryGivesTheLoadersMessage() {
        let result = load("libpeerlink-absent.so.9", "strlen\0abs\0")
        let reason = result.failure?.reason ?? ""
        #expect(reason.hasPrefix("libpeerlink-absent.so.9: cannot open shared object file"), "\(reason)")
    }

    @Test func theNameListEndsAtTheEmptyName() {
        "a\0bc\0\0ignored\0".withCString { list in
            #expect(SharedLibrary.nameList(list) == ["a", "bc"])
        }
        "".withCString { list in
            #expect(SharedLibrary.nameList(list).isEmpty)
        }
    }
}

private extension Result {
    var failure: Failure? {
        if case .failure(let failure) = self { return failure }
        return nil
    }
}
