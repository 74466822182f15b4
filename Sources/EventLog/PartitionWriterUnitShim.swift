// TEMPORARY until the format-2 writer lands: appends a unit record by record (not atomic).
extension PartitionWriter {
    @discardableResult
    public func appendUnit(_ payloads: [[UInt8]], timestampNanoseconds: Int64) throws(LogError) -> UInt64 {
        var first: UInt64 = 0
        for payload in payloads {
            let sequence = try append(payload: payload, timestampNanoseconds: timestampNanoseconds)
            if first == 0 { first = sequence }
        }
        return first
    }
}
