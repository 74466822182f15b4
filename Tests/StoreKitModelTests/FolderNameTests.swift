import Testing
@testable import StoreKitModel

@Suite struct FolderNameTests {
    /// Every string of up to six characters over '.', '/', 'a' and NUL: the byte scans agree with the
    /// plain definitions (split into components; Foundation-free `contains`).
    @Test("staysInside and isSingleComponent agree with their definitions on every short path")
    func agreeWithDefinitions() {
        let alphabet: [Character] = [".", "/", "a", "\0"]
        var paths = [""]
        var frontier = [""]
        for _ in 1...6 {
            frontier = frontier.flatMap { prefix in alphabet.map { prefix + String($0) } }
            paths += frontier
        }
        var refused = 0
        for path in paths {
            let components = path.split(separator: "/", omittingEmptySubsequences: true)
            let expected = !path.unicodeScalars.contains("\0") && !components.contains("..")
            #expect(FolderName.staysInside(path) == expected, "\(path.debugDescription)")
            let single = !path.isEmpty && !path.unicodeScalars.contains("/") && !path.unicodeScalars.contains("\0")
                && path != "." && path != ".."
            #expect(FolderName.isSingleComponent(path) == single, "\(path.debugDescription)")
            if !expected { refused += 1 }
        }
        #expect(refused > 1_000)
        #expect(!FolderName.staysInside("content/../../etc"))
        #expect(FolderName.staysInside("content/device-0001/3/pack-1.0"))
        #expect(FolderName.staysInside("content/..hidden/x"))
    }
}
