/// Which queue partition an account belongs to. Every role, load driver and tool that sends
/// commands routes them with this one function, so all of an account's devices, purchases,
/// re-buys and restores land in one partition (restores read the account's history, R-Q9).
///
/// The function is FNV-1a (64-bit) over the account name's UTF-8 bytes, modulo the number of
/// partitions, and the index counts the topology's queue processes in the order the file lists
/// them. It depends on nothing but its inputs, so processes on different hosts agree without
/// talking; changing the number or order of queues routes accounts differently, so a run keeps
/// the topology it started with.
public enum PartitionRouting {
    public static func partitionIndex(account: String, partitionCount: Int) -> Int {
        precondition(partitionCount >= 1, "a topology has at least one queue partition")
        guard partitionCount > 1 else { return 0 }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in account.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        return Int(hash % UInt64(partitionCount))
    }
}
