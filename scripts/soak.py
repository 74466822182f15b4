"""Soak tests behind a flag (not in the quick suite): `scripts/soak [--kills N] [--requests N] [--mutations N]`.

1. Kill matrix: `sksim run` of the built-in topology; at a random moment one role (queue, store,
   downloader, or an observer) is killed with SIGKILL. Every run must exit 0 with nothing
   pending, no violation, and a log that verifies; and every event an independent subscriber
   (pyzmq, on the run's events endpoint) saw published must be in the log, with the same
   sequence and timestamp (the queue publishes only what is durable).
2. Request fuzzer: random and mutated frames to a real queue's ROUTER socket; the queue must stay
   up and keep answering PING, and valid commands sent afterwards must still be applied.
3. Log mutations: one byte flipped, or the log cut, at a random place of a real log; `log verify`,
   `log cat` and `log project` must exit 0, 1 or 2 (never crash), and `verify` must flag every
   flip inside a record.
4. Load memory (`--load-minutes N`, off by default): `sksim load` of topology/load.yaml at one open-model
   rate (`--load-rate`, default 500/s) for 1 minute and for N minutes; prints the peak RSS of the
   driver, the coordinator and the queue at both. A trial fails when a peak at N minutes exceeds the
   1-minute one by more than a quarter plus 8 MB (memory must not follow the run's length).
Prints one line per trial and a summary; exits 1 if any trial failed.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import struct
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKSIM = os.environ.get("SKSIM", os.path.join(ROOT, ".build", "debug", "sksim"))


def sksim(*arguments, timeout=300):
    return subprocess.run([SKSIM, *arguments], capture_output=True, text=True, timeout=timeout)


def crashed(result):
    return result.returncode not in (0, 1, 2, 3) or "Fatal error" in result.stderr


class PublishedEvents(threading.Thread):
    """Subscribes to a run's events like any client and remembers (sequence, timestamp) of each."""

    def __init__(self, endpoint):
        super().__init__(daemon=True)
        import zmq
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.SUB)
        self.socket.linger = 0
        self.socket.setsockopt(zmq.RCVHWM, 0)  # keep everything: this subscriber must not drop
        self.socket.setsockopt(zmq.SUBSCRIBE, b"evt.")
        self.socket.connect(endpoint)
        self.seen = {}
        self.stopping = False

    def run(self):
        while not self.stopping:
            if not self.socket.poll(50):
                continue
            frames = self.socket.recv_multipart()
            if len(frames) == 3 and len(frames[1]) >= 24:
                _, _, sequence, timestamp = struct.unpack_from("<BB6xQq", frames[1])
                self.seen[sequence] = timestamp

    def stop(self):
        self.stopping = True
        self.join(timeout=5)
        self.socket.close()
        self.context.term()


def missing_from_log(seen, out):
    """The published events that the log does not hold with the same sequence and timestamp."""
    listing = sksim("log", "cat", "--json", out)
    logged = {}
    for line in listing.stdout.splitlines():
        try:
            record = json.loads(line)
            logged[record["sequence"]] = record["timestamp"]
        except (ValueError, KeyError):
            continue
    return [sequence for sequence, timestamp in sorted(seen.items()) if logged.get(sequence) != timestamp]


def kill_matrix(trials, rng, scratch):
    roles = ["queue", "store", "downloader", "observer-1"]
    failures = 0
    for trial in range(trials):
        victim = roles[trial % len(roles)]
        out = os.path.join(scratch, f"kill-{trial}")
        process = subprocess.Popen([SKSIM, "run", "--devices", "10", "--seed", str(trial + 1), "--out", out, "--json",
                                    "--duration", "2m"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        run_file = os.path.join(out, "run.json")
        deadline = time.time() + 30
        while not os.path.exists(run_file) and time.time() < deadline and process.poll() is None:
            time.sleep(0.02)
        subscriber = PublishedEvents(f"ipc://{out}/queue-events.ipc")
        subscriber.start()
        time.sleep(rng.uniform(0.05, 1.0))
        pid = None
        try:
            with open(run_file) as handle:
                pid = next(entry["pid"] for entry in json.load(handle)["processes"] if entry["name"] == victim)
            os.kill(pid, signal.SIGKILL)
        except (OSError, StopIteration, ValueError):
            pass  # the run may already be over: still checked below
        output, errors = process.communicate(timeout=300)
        subscriber.stop()
        verify = sksim("log", "verify", out)
        problems = []
        missing = missing_from_log(subscriber.seen, out)
        if missing:
            problems.append(f"{len(missing)} published events not in the log (first {missing[:5]})")
        if not subscriber.seen:
            problems.append("the independent subscriber heard nothing")
        try:
            summary = json.loads(output)
            # Declined Ask to Buy requests stay deferred for ever (F-A1): an end state, not work left.
            awaiting = summary["transactions"]["pending"] - summary["transactions"].get("declined", 0)
            if awaiting != 0:
                problems.append(f"{awaiting} pending")
            if summary["violationCount"] != 0:
                problems.append(f"violations {summary['violations']}")
        except (ValueError, KeyError):
            problems.append("no summary")
        if process.returncode != 0:
            problems.append(f"exit {process.returncode}: {errors.strip().splitlines()[-1:] }")
        if verify.returncode != 0:
            problems.append("log does not verify")
        failures += bool(problems)
        print(f"kill {trial + 1}/{trials} {victim} (pid {pid}): {'ok' if not problems else '; '.join(problems)}", flush=True)
        if not problems:
            shutil.rmtree(out, ignore_errors=True)
    return failures


def request_fuzzer(count, rng, scratch):
    import zmq
    out = os.path.join(scratch, "fuzz")
    os.makedirs(out)
    queue = subprocess.Popen([SKSIM, "queue", "--name", "queue", "--run-directory", out],
                             stdout=subprocess.DEVNULL, stderr=open(os.path.join(out, "queue.log"), "w"))
    endpoint = f"ipc://{out}/queue-requests.ipc"
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.SNDHWM, 100000)
    dealer.connect(endpoint)
    verbs = [b"CMD", b"FETCH", b"PING", b"", b"XYZ"]
    seed_frames = [b"\x02", b"\x02\x05queue", bytes(range(32)), b"\xff" * 64]
    failures = 0
    try:
        deadline = time.time() + 20
        while not os.path.exists(os.path.join(out, "queue.ready")) and time.time() < deadline:
            time.sleep(0.02)
        for index in range(count):
            frames = [rng.choice(verbs)]
            for _ in range(rng.randrange(0, 4)):
                base = bytearray(rng.choice(seed_frames) + os.urandom(rng.randrange(0, 48)))
                for _ in range(rng.randrange(0, 4)):
                    if base:
                        base[rng.randrange(len(base))] = rng.randrange(256)
                frames.append(bytes(base))
            dealer.send_multipart(frames)
            while dealer.poll(0):
                dealer.recv_multipart()
            if index % 10000 == 9999:
                alive = ping(dealer)
                print(f"fuzz {index + 1}/{count}: queue {'answers PING' if alive else 'DOES NOT ANSWER'}", flush=True)
                failures += not alive
        if queue.poll() is not None:
            print(f"fuzz: the queue exited with {queue.returncode}", flush=True)
            failures += 1
        elif not ping(dealer):
            print("fuzz: the queue does not answer PING at the end", flush=True)
            failures += 1
        else:
            print(f"fuzz: {count} requests, the queue is up and answering", flush=True)
    finally:
        queue.send_signal(signal.SIGTERM)
        queue.wait(timeout=10)
        context.destroy(0)
    verify = sksim("log", "verify", out)
    if verify.returncode != 0:
        print("fuzz: the log does not verify afterwards", flush=True)
        failures += 1
    return failures


def ping(dealer):
    dealer.send_multipart([b"PING"])
    deadline = time.time() + 5
    while time.time() < deadline:
        if dealer.poll(100):
            if dealer.recv_multipart()[0] == b"PONG":
                return True
    return False


def log_mutations(count, rng, scratch):
    original = os.path.join(scratch, "mutation-original")
    if sksim("simulate", "--devices", "5", "--seed", "3", "--out", original).returncode != 0:
        print("mutations: could not make a log to mutate", flush=True)
        return 1
    segment_directory = os.path.join(original, "log", "queue")
    segment = sorted(name for name in os.listdir(segment_directory) if name.endswith(".segment"))[0]
    size = os.path.getsize(os.path.join(segment_directory, segment))
    failures = 0
    for trial in range(count):
        copy = os.path.join(scratch, f"mutation-{trial}")
        shutil.copytree(original, copy)
        path = os.path.join(copy, "log", "queue", segment)
        with open(path, "r+b") as handle:
            if rng.random() < 0.8:
                offset = rng.randrange(size)
                handle.seek(offset)
                byte = handle.read(1)[0]
                handle.seek(offset)
                handle.write(bytes([byte ^ (1 << rng.randrange(8))]))
                kind = f"flip at {offset}"
            else:
                offset = rng.randrange(size)
                handle.truncate(offset)
                kind = f"cut at {offset}"
        results = {name: sksim("log", *arguments) for name, arguments in
                   [("verify", ["verify", copy]), ("cat", ["cat", copy, "--json"]), ("project", ["project", copy])]}
        problems = [f"{name} crashed ({result.returncode})" for name, result in results.items() if crashed(result)]
        if kind.startswith("flip") and results["verify"].returncode == 0:
            problems.append("verify called a flipped log intact")
        failures += bool(problems)
        if problems or trial % 100 == 99:
            print(f"mutation {trial + 1}/{count} {kind}: {'ok' if not problems else '; '.join(problems)}", flush=True)
        shutil.rmtree(copy, ignore_errors=True)
    return failures


def load_memory(minutes, rate, scratch):
    """Peak RSS of a load's processes after 1 and after `minutes` minutes of the same rate."""
    peaks = {}
    for length in (1, minutes):
        out = os.path.join(scratch, f"load-{length}m")
        result = sksim("load", os.path.join(ROOT, "topology", "load.yaml"), "--model", "open", "--rate", str(rate),
                       "--duration", f"{length}m", "--out", out, "--json", timeout=length * 60 + 300)
        if result.returncode != 0:
            print(f"load memory: the {length}-minute load exited {result.returncode}: {result.stderr.strip()[-300:]}", flush=True)
            return 1
        summary = json.loads(result.stdout)
        with open(os.path.join(out, "queue-stats.json")) as handle:
            queue = json.load(handle).get("peakMemoryBytes", 0) / 1048576
        peaks[length] = {"driver": summary["driverPeakMemoryMegabytes"], "coordinator": summary["coordinatorPeakMemoryMegabytes"],
                         "queue": round(queue, 1), "lifecycles": summary["lifecycles"]}
        print(f"load memory: {length:>3} min at {rate}/s, {summary['lifecycles']} lifecycles: peak RSS driver {peaks[length]['driver']:.1f} MB, "
              f"coordinator {peaks[length]['coordinator']:.1f} MB, queue {peaks[length]['queue']:.1f} MB", flush=True)
    grown = [name for name in ("driver", "coordinator", "queue") if peaks[minutes][name] > peaks[1][name] * 1.25 + 8]
    print(f"load memory: {'grew with the length: ' + ', '.join(grown) if grown else 'independent of the length'}", flush=True)
    return 1 if grown else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100, help="kill -9 trials, cycling through queue, store, downloader, observer")
    parser.add_argument("--requests", type=int, default=200000, help="fuzzed requests to a real queue")
    parser.add_argument("--mutations", type=int, default=2000, help="mutated copies of a real log")
    parser.add_argument("--seed", type=int, default=1, help="seed of the soak's own random choices")
    parser.add_argument("--load-minutes", type=int, default=0, help="also measure a load's memory at 1 and at N minutes (0: skip)")
    parser.add_argument("--load-rate", type=int, default=500, help="open-model lifecycle starts per second of the load-memory trial")
    arguments = parser.parse_args()
    rng = random.Random(arguments.seed)
    scratch = tempfile.mkdtemp(prefix="sksim-soak-")
    failures = 0
    try:
        if arguments.kills:
            failures += kill_matrix(arguments.kills, rng, scratch)
        if arguments.requests:
            failures += request_fuzzer(arguments.requests, rng, scratch)
        if arguments.mutations:
            failures += log_mutations(arguments.mutations, rng, scratch)
        if arguments.load_minutes:
            failures += load_memory(arguments.load_minutes, arguments.load_rate, scratch)
    finally:
        if failures == 0:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"soak: {failures} failed trials" + (f"; evidence kept in {scratch}" if failures else ""))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
