/// The bus's protocol logic (sender, endpoint rules, roles) has no socket and no clock, so the
/// deterministic runtime runs it too; users of `Bus` see it as part of the bus.
@_exported import BusProtocol
