// The default topologies of `sksim run` and `sksim load`, built in so neither needs a checkout.
// Kept byte for byte equal to topology/local.yaml and topology/load.yaml (tests compare them).

public enum BuiltInTopology {
    public static let local = """
# The default topology of `sksim run` (built into the binary: `sksim topology show` prints it):
# every role on this machine over ipc://, ten devices on five accounts, two observers per
# device, two observer processes.
name: local
seed: 20261121
durability: group            # always (fsync each command) | group (fsync batches: every 256 records or at once when idle)
heartbeatMilliseconds: 250
scenario:
  devices: 10
  devicesPerAccount: 2         # the second device of each account restores on launch (R-Q9)
  purchasesPerDevice: 8
  catalog: sample              # or a path to a .storekit or sksim catalog, relative to this file
  observers: [downloadThenFinish, audit]
  restoreProbability: 0.05
  relaunchProbability: 0.05
  thinkTimeMilliseconds: {minimum: 5, mean: 40}
  store:
    failureProbability: 0.05
    deferralProbability: 0.05
    cancellationProbability: 0.05
    approvalProbability: 0.7
    restoreFailureProbability: 0.02
    latencyMilliseconds: {minimum: 2, mean: 20}
  downloader:
    minimumBytesPerSecond: 2000000
    maximumBytesPerSecond: 8000000
    tickMilliseconds: 20
    failureProbabilityPerTick: 0.002
processes:
  - {name: queue, role: queue, events: "ipc://{run}/queue-events.ipc", requests: "ipc://{run}/queue-requests.ipc"}
  - {name: store, role: store}
  - {name: downloader, role: downloader}
  - {name: observer-1, role: observer, devices: "1-5"}
  - {name: observer-2, role: observer, devices: "6-10"}

"""

    /// The default topology of `sksim load` and `sksim driver`, byte for byte topology/load.yaml.
    public static let load = """
# The default topology of `sksim load`: a queue, a store and a downloader on this machine;
# load drivers play the devices (the observer below is not started by `sksim load`; it keeps
# this file usable by `sksim run` too). Settings under `load:` are defaults the command
# line overrides; see docs/load-testing.md.
name: load
seed: 1
durability: group
heartbeatMilliseconds: 250
scenario:
  devices: 1
  purchasesPerDevice: 0
  store: {failureProbability: 0.02, deferralProbability: 0, cancellationProbability: 0.01, latencyMilliseconds: {minimum: 0, mean: 1}}
processes:
  - {name: queue, role: queue, events: "ipc://{run}/e.ipc", requests: "ipc://{run}/r.ipc"}
  - {name: store, role: store}
  - {name: downloader, role: downloader}
  - {name: apps, role: observer, devices: "1-1"}
load:
  model: open
  rate: 500/s
  duration: 10s
  thresholds:
    - violations==0

"""
}
