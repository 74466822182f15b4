"""The bus wire format, proven from another language (docs/wire-format.md).

Starts a real `sksim queue` process, then, with pyzmq and nothing of the Swift code:
catches up on the log with FETCH, subscribes to live events, sends one valid command
and two invalid ones, and decodes everything by hand.
"""
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import zmq
except ImportError:  # scripts/setup installs pyzmq; say so plainly if it could not.
    zmq = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_text(path):
    with open(path) as file:
        return file.read()


def varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def zigzag(value):
    return varint((value << 1) ^ (value >> 63) if value >= 0 else ((value << 1) ^ -1) & 0xFFFFFFFFFFFFFFFF)


def string(text):
    data = text.encode("utf-8")
    return varint(len(data)) + data


class Reader:
    def __init__(self, data):
        self.data, self.offset = data, 0

    def byte(self):
        value = self.data[self.offset]
        self.offset += 1
        return value

    def varint(self):
        result, shift = 0, 0
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7

    def string(self):
        length = self.varint()
        value = self.data[self.offset:self.offset + length].decode("utf-8")
        self.offset += length
        return value

    def at_end(self):
        return self.offset == len(self.data)


def unzigzag(value):
    return (value >> 1) ^ -(value & 1)


# The first byte of every event and command payload (docs/wire-format.md).
FORMAT_VERSION = 2


def decode_event(payload):
    """Returns (command id or None, event name, fields) for the tags this test meets."""
    reader = Reader(payload)
    assert reader.byte() == FORMAT_VERSION, "event format version"
    command_id = (reader.string(), reader.varint()) if reader.byte() == 1 else None
    tag = reader.byte()
    if tag == 1:
        fields = {"seed": reader.varint(), "sksimVersion": reader.string(), "runtime": reader.string(),
                  "startedAtUnixNanoseconds": unzigzag(reader.varint()), "scenario": reader.string(),
                  "catalogSource": reader.string(), "catalogDigest": reader.string(), "catalog": reader.string()}
        name = "runStarted"
    elif tag == 2:
        fields = {"device": reader.string(), "account": reader.string()}
        name = "deviceRegistered"
    elif tag == 24:
        # The whole rejected command's body: this test meets addPayment (command tag 7) and
        # registerDevice (tag 1).
        command_tag = reader.byte()
        assert command_tag in (1, 7), "unexpected rejected command tag %d" % command_tag
        if command_tag == 7:
            device, product, quantity = reader.string(), reader.string(), reader.varint()
            assert reader.byte() == 0 and reader.byte() == 0, "no applicationUsername, no requestData"
            fields = {"device": device, "command": "addPayment", "product": product}
        else:
            fields = {"device": reader.string(), "account": reader.string(), "command": "registerDevice"}
        fields.update({"code": reader.byte(), "message": reader.string()})
        name = "commandRejected"
    else:
        raise AssertionError("unexpected event tag %d" % tag)
    assert reader.at_end(), "trailing bytes after %s" % name
    return command_id, name, fields


def command(origin, number, tag, body):
    return bytes([FORMAT_VERSION, 1]) + string(origin) + varint(number) + bytes([tag]) + body


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@unittest.skipIf(zmq is None, "pyzmq is not installed (scripts/setup installs it)")
class WireFormatTest(unittest.TestCase):
    def setUp(self):
        self.directory = tempfile.mkdtemp(prefix="sksim-wire-")
        events, requests = free_port(), free_port()
        self.events = "tcp://127.0.0.1:%d" % events
        self.requests = "tcp://127.0.0.1:%d" % requests
        topology = os.path.join(self.directory, "wire.yaml")
        with open(topology, "w") as file:
            file.write(
                "name: wire\nseed: 4711\nscenario: {devices: 1}\nprocesses:\n"
                '  - {name: queue, role: queue, events: "%s", requests: "%s"}\n'
                "  - {name: store, role: store}\n  - {name: downloader, role: downloader}\n"
                '  - {name: apps, role: observer, devices: "1-1"}\n' % (self.events, self.requests))
        binary = os.environ.get("SKSIM") or os.path.join(ROOT, ".build", "debug", "sksim")
        self.assertTrue(os.access(binary, os.X_OK), "build sksim first (swift build), or set SKSIM")
        self.queue_log = open(os.path.join(self.directory, "queue.log"), "w")
        self.queue = subprocess.Popen(
            [binary, "queue", "--topology", topology, "--name", "queue", "--run-directory", self.directory],
            stderr=self.queue_log)
        self.context = zmq.Context()
        self.dealer = self.context.socket(zmq.DEALER)
        self.dealer.linger = 0
        self.dealer.connect(self.requests)
        self.subscriber = self.context.socket(zmq.SUB)
        self.subscriber.linger = 0
        self.subscriber.setsockopt(zmq.SUBSCRIBE, b"evt.")
        self.subscriber.setsockopt(zmq.SUBSCRIBE, b"hb")
        self.subscriber.connect(self.events)

    def tearDown(self):
        self.dealer.close()
        self.subscriber.close()
        self.context.term()
        for role in getattr(self, "roles", []):
            if role.poll() is None:
                role.send_signal(signal.SIGTERM)
                role.wait(timeout=10)
        if self.queue.poll() is None:
            self.queue.send_signal(signal.SIGTERM)
            self.queue.wait(timeout=10)
        self.queue_log.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def request(self, frames, timeout_ms=5000):
        self.dealer.send_multipart(frames)
        while True:
            self.assertTrue(self.dealer.poll(timeout_ms), "no reply to %r within %d ms" % (frames[0], timeout_ms))
            reply = self.dealer.recv_multipart()
            # wait_for_queue may have sent several PINGs before the queue was up: their late PONGs
            # are answers to those, not to this request.
            if reply[0] != b"PONG" or frames[0] == b"PING":
                return reply

    def wait_for_queue(self):
        deadline = time.time() + 15
        while time.time() < deadline:
            self.dealer.send_multipart([b"PING"])
            if self.dealer.poll(200):
                reply = self.dealer.recv_multipart()
                self.assertEqual(reply[0], b"PONG")
                return
        self.fail("the queue did not answer PING within 15 s")

    def next_event(self, timeout_ms=5000):
        deadline = time.time() + timeout_ms / 1000
        while time.time() < deadline:
            if not self.subscriber.poll(100):
                continue
            topic, header, payload = self.subscriber.recv_multipart()
            version, kind, sequence, timestamp = struct.unpack_from("<BB6xQq", header)
            self.assertEqual(version, 1)
            if kind == 2:  # heartbeat
                self.assertEqual(topic, b"hb")
                continue
            self.assertEqual(kind, 1)
            return topic, sequence, decode_event(payload)
        self.fail("no event within %d ms" % timeout_ms)

    def test_catch_up_subscribe_and_send_commands(self):
        self.wait_for_queue()

        # Catch up from the log: the run's first record records the seed.
        batch = self.request([b"FETCH", struct.pack("<QI", 1, 100)])
        self.assertEqual(batch[0], b"BATCH")
        first, count, published = struct.unpack("<QIQ", batch[1])
        self.assertEqual((first, count), (1, 1))
        self.assertGreaterEqual(published, 1)
        version, kind, sequence, _ = struct.unpack_from("<BB6xQq", batch[2])
        self.assertEqual((version, kind, sequence), (1, 1, 1))
        _, name, fields = decode_event(batch[2][24:])
        self.assertEqual((name, fields["seed"], fields["runtime"]), ("runStarted", 4711, "live"))
        self.assertGreater(fields["startedAtUnixNanoseconds"], 1_600_000_000 * 10**9)  # the wall-clock start

        # A valid command: registerDevice("py-device", "py-account") as ("py", 1).
        time.sleep(0.3)  # let the subscription reach the publisher (ZeroMQ's slow joiner)
        acknowledgement = self.request([b"CMD", command("py", 1, 1, string("py-device") + string("py-account"))])
        self.assertEqual(acknowledgement[0], b"ACK")
        self.assertEqual(acknowledgement[1], b"\x00", acknowledgement[5])  # accepted
        self.assertEqual(acknowledgement[2], b"py")
        self.assertEqual(struct.unpack("<Q", acknowledgement[3])[0], 1)
        last_sequence = struct.unpack("<Q", acknowledgement[4])[0]
        topic, sequence, (command_id, name, fields) = self.next_event()
        self.assertEqual(topic, b"evt.py-device")
        self.assertEqual(sequence, last_sequence)
        self.assertEqual(command_id, ("py", 1))
        self.assertEqual((name, fields["device"], fields["account"]), ("deviceRegistered", "py-device", "py-account"))

        # Sent again with the same id: a duplicate, no effect.
        again = self.request([b"CMD", command("py", 1, 1, string("py-device") + string("py-account"))])
        self.assertEqual(again[1], b"\x02")

        # An invalid command: a payment for a device that is not registered is rejected,
        # and the rejection is logged and published.
        payment = string("ghost") + string("com.example.sksim.coins.small") + zigzag(1) + b"\x00" + b"\x00"
        rejected = self.request([b"CMD", command("py", 2, 7, payment)])
        self.assertEqual(rejected[1], b"\x01")
        self.assertIn("not registered", rejected[5].decode())
        _, _, (_, name, fields) = self.next_event()
        self.assertEqual((name, fields["command"], fields["device"], fields["code"]), ("commandRejected", "addPayment", "ghost", 7))

        # A device name that is a path is refused: the downloader keeps content under
        # content/<device>/, and "../../escape" once had it write outside the run directory.
        escape = self.request([b"CMD", command("py", 3, 1, string("../../escape") + string("py-account"))])
        self.assertEqual(escape[1], b"\x01", escape[5])
        self.assertIn("cannot name a folder", escape[5].decode())
        _, _, (_, name, fields) = self.next_event()
        self.assertEqual((name, fields["command"], fields["device"]), ("commandRejected", "registerDevice", "../../escape"))

        # Garbage is malformed: answered, never logged.
        garbage = self.request([b"CMD", bytes([FORMAT_VERSION, 1, 0xFF])])
        self.assertEqual(garbage[1], b"\x03")
        self.assertTrue(garbage[5].startswith(b"undecodablePayload") or garbage[5].startswith(b"malformedBody"), garbage[5])
        pong = self.request([b"PING"])
        self.assertEqual(struct.unpack("<Q", pong[2])[0], last_sequence + 2)  # only the two rejections were added

        # The queue stops cleanly on SIGTERM.
        self.queue.send_signal(signal.SIGTERM)
        self.assertEqual(self.queue.wait(timeout=10), 0)


    def test_version_2_handshake_batched_commands_answers_and_events(self):
        """docs/wire-format.md's "Version 2: batches", from the page alone."""
        self.wait_for_queue()
        self.assertEqual(self.request([b"HELLO"]), [b"HELLO", b"\x01\x02"])
        batches = self.context.socket(zmq.SUB)
        batches.linger = 0
        batches.setsockopt(zmq.SUBSCRIBE, b"all")
        batches.setsockopt(zmq.SUBSCRIBE, b"hb")
        batches.connect(self.events)
        # A heartbeat heard means the queue has both subscriptions (sent in order on one connection).
        self.assertTrue(batches.poll(5000), "no heartbeat within 5 s")
        self.assertEqual(batches.recv_multipart()[0], b"hb")
        commands = [command("py2", number, 1, string("py2-device-%d" % number) + string("py2-account")) for number in (1, 2, 3)]
        body = bytes([2]) + varint(len(commands)) + b"".join(varint(len(entry)) + entry for entry in commands)
        answers = []
        reply = self.request([b"CMDS", body])
        while True:
            self.assertEqual(reply[0], b"ACKS")
            reader = Reader(reply[1])
            self.assertEqual(reader.byte(), 2)
            for _ in range(reader.varint()):
                status, has_id = reader.byte(), reader.byte()
                command_id = (reader.string(), reader.varint()) if has_id else None
                answers.append((status, command_id, reader.varint(), reader.string()))
            self.assertTrue(reader.at_end())
            if len(answers) >= 3:
                break
            self.assertTrue(self.dealer.poll(5000), "the rest of the answers")
            reply = self.dealer.recv_multipart()
        self.assertEqual([(status, command_id) for status, command_id, _, _ in answers], [(0, ("py2", n)) for n in (1, 2, 3)])
        records = []
        while len(records) < 3:
            self.assertTrue(batches.poll(5000), "no event batch within 5 s")
            message = batches.recv_multipart()
            if message[0] == b"hb":
                continue
            topic, body = message
            self.assertEqual(topic, b"all")
            reader = Reader(body)
            self.assertEqual(reader.byte(), 2)
            for _ in range(reader.varint()):
                sequence, timestamp, device = reader.varint(), unzigzag(reader.varint()), reader.string()
                length = reader.varint()
                payload = reader.data[reader.offset:reader.offset + length]
                reader.offset += length
                records.append((sequence, device, decode_event(payload)))
            self.assertTrue(reader.at_end())
        self.assertEqual([sequence for sequence, _, _ in records], [last for _, _, last, _ in answers])
        self.assertEqual([(device, event[1], event[0]) for _, device, event in records],
                         [("py2-device-%d" % n, "deviceRegistered", ("py2", n)) for n in (1, 2, 3)])
        batches.close()

    def read_acks(self, reply, count):
        answers = []
        while True:
            self.assertEqual(reply[0], b"ACKS")
            reader = Reader(reply[1])
            self.assertEqual(reader.byte(), 2)
            for _ in range(reader.varint()):
                status, has_id = reader.byte(), reader.byte()
                command_id = (reader.string(), reader.varint()) if has_id else None
                answers.append((status, command_id, reader.varint(), reader.string()))
            self.assertTrue(reader.at_end())
            if len(answers) >= count:
                return answers
            self.assertTrue(self.dealer.poll(5000), "the rest of the answers")
            reply = self.dealer.recv_multipart()

    def test_version_2_sender_report_is_optional(self):
        """docs/wire-format.md's "Sender reports": a CMDS may carry a third frame, or not."""
        self.wait_for_queue()
        def batch(origin, numbers):
            entries = [command(origin, n, 1, string("%s-device-%d" % (origin, n)) + string("py3-account")) for n in numbers]
            return bytes([2]) + varint(len(entries)) + b"".join(varint(len(entry)) + entry for entry in entries)
        # Without a report, as before: the queue records what the sender heard as unknown.
        answers = self.read_acks(self.request([b"CMDS", batch("py3", [1, 2])]), 2)
        self.assertEqual([(status, command_id) for status, command_id, _, _ in answers], [(0, ("py3", 1)), (0, ("py3", 2))])
        # With one: lowest unanswered 3, one partition, a run of 2 commands that heard sequence 2 and 3.
        report = varint(3) + varint(1) + varint(1) + varint(2) + varint(1) + varint(3)
        answers = self.read_acks(self.request([b"CMDS", batch("py3", [3, 4]), report]), 2)
        self.assertEqual([(status, command_id) for status, command_id, _, _ in answers], [(0, ("py3", 3)), (0, ("py3", 4))])
        # Runs that cover more commands than the batch holds: malformed, and the batch has no effect.
        overrun = varint(0) + varint(1) + varint(3) + varint(0)
        answers = self.read_acks(self.request([b"CMDS", batch("py3", [5, 6]), overrun]), 1)
        self.assertEqual([(status, command_id) for status, command_id, _, _ in answers], [(3, None)])
        self.assertIn("report", answers[0][3])
        answers = self.read_acks(self.request([b"CMDS", batch("py3", [5, 6])]), 2)
        self.assertEqual([(status, command_id) for status, command_id, _, _ in answers], [(0, ("py3", 5)), (0, ("py3", 6))])

    def fetch_events(self, start):
        """Every event from sequence `start` on that the queue has published: (sequence, tag, id, first fields)."""
        batch = self.request([b"FETCH", struct.pack("<QI", start, 0)])
        self.assertEqual(batch[0], b"BATCH")
        events = []
        for frame in batch[2:]:
            _, _, sequence, _ = struct.unpack_from("<BB6xQq", frame)
            reader = Reader(frame[24:])
            self.assertEqual(reader.byte(), FORMAT_VERSION)
            command_id = (reader.string(), reader.varint()) if reader.byte() == 1 else None
            tag = reader.byte()
            # Only the leading fields this test needs: a transaction key (device, number) or a device.
            first = (reader.string(), reader.varint()) if tag in (10, 13, 16, 21) else None
            events.append((sequence, tag, command_id, first))
        return events

    def wait_for_event(self, predicate, what, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for event in self.fetch_events(1):
                if predicate(event):
                    return event
            time.sleep(0.05)  # polling the queue's log for a condition, bounded by the deadline
        self.fail("no %s within %d s" % (what, timeout))

    def test_an_app_buys_downloads_finishes_and_restores_against_the_store_and_downloader(self):
        """docs/wire-format.md's "An app of your own": the Swift store and downloader serve a Python app."""
        binary = os.environ.get("SKSIM") or os.path.join(ROOT, ".build", "debug", "sksim")
        topology = os.path.join(self.directory, "wire.yaml")
        self.roles = [subprocess.Popen([binary, role, "--topology", topology, "--name", role, "--run-directory", self.directory],
                                       stderr=self.queue_log) for role in ("store", "downloader")]
        self.wait_for_queue()
        origin, device, account = "py-app", "py-phone", "py-account"
        numbers = iter(range(1, 100))

        def send(tag, body):
            reply = self.request([b"CMD", command(origin, next(numbers), tag, body)], timeout_ms=15000)
            self.assertEqual(reply[1], b"\x00", reply[5])  # accepted
            return struct.unpack("<Q", reply[4])[0]

        send(1, string(device) + string(account))         # registerDevice
        send(2, string(device))                            # launchApp
        send(4, string(device) + string("py-observer"))    # attachObserver: the queue syncs with the store only now (R-Q3)
        product = "com.example.sksim.levelpack.forest"     # non-consumable with one piece of hosted content
        send(7, string(device) + string(product) + zigzag(1) + b"\x01" + string(account) + b"\x00")  # addPayment
        _, _, _, key = self.wait_for_event(lambda e: e[1] == 10 and e[3][0] == device, "transactionPurchased")
        key_bytes = string(key[0]) + varint(key[1])
        send(10, varint(1) + key_bytes + varint(0))        # startDownloads of download 0
        self.wait_for_event(lambda e: e[1] == 21 and e[3] == key, "downloadFinished")
        package = os.path.join(self.directory, "content", device, str(key[1]), product + ".levels-1.0")
        self.assertTrue(os.path.exists(os.path.join(package, "ContentInfo.plist")), package)
        self.assertEqual(os.path.getsize(os.path.join(package, "Contents", product + ".levels")), 24576)
        send(8, key_bytes)                                 # finishTransaction
        send(9, string(device) + b"\x01" + string(account))  # restoreCompletedTransactions
        _, _, _, restored = self.wait_for_event(lambda e: e[1] == 13 and e[3][0] == device, "transactionRestored")
        send(8, string(restored[0]) + varint(restored[1]))  # finish the restored copy
        self.wait_for_event(lambda e: e[1] == 14, "restoreFinished")
        tags = [event[1] for event in self.fetch_events(1)]
        self.assertEqual(tags.count(16), 2)                # both transactions finished

@unittest.skipIf(zmq is None, "pyzmq is not installed (scripts/setup installs it)")
class HostilePublisherTest(unittest.TestCase):
    """A role process facing a "queue" that publishes garbage: it stays up and its log stays small."""

    def test_a_role_reports_malformed_frames_at_most_once_a_second_per_reason(self):
        directory = tempfile.mkdtemp(prefix="sksim-hostile-")
        context = zmq.Context()
        publisher, router = context.socket(zmq.PUB), context.socket(zmq.ROUTER)
        publisher.linger = router.linger = 0
        events, requests = free_port(), free_port()
        publisher.bind("tcp://127.0.0.1:%d" % events)
        router.bind("tcp://127.0.0.1:%d" % requests)
        topology = os.path.join(directory, "hostile.yaml")
        with open(topology, "w") as file:
            file.write("name: hostile\nscenario: {devices: 1}\nprocesses:\n"
                       '  - {name: queue, role: queue, events: "tcp://127.0.0.1:%d", requests: "tcp://127.0.0.1:%d"}\n'
                       "  - {name: store, role: store}\n  - {name: downloader, role: downloader}\n"
                       '  - {name: apps, role: observer, devices: "1-1"}\n' % (events, requests))
        binary = os.environ.get("SKSIM") or os.path.join(ROOT, ".build", "debug", "sksim")
        log_path = os.path.join(directory, "store.log")
        with open(log_path, "w") as log:
            store = subprocess.Popen([binary, "store", "--topology", topology, "--name", "store", "--run-directory", directory], stderr=log)
        try:
            garbage = [b"evt.d1", struct.pack("<BB6xQq", 1, 3, 1, 0), b""]  # message kind 3 does not exist
            # Until the store's subscription is up, its first report shows it hears the garbage.
            deadline = time.time() + 20
            while "dropped a malformed event frame" not in read_text(log_path):
                self.assertLess(time.time(), deadline, "the store never reported the garbage")
                publisher.send_multipart(garbage)
                while router.poll(0):  # FETCH/PING: an empty partition
                    frames = router.recv_multipart()
                    reply = [b"BATCH", struct.pack("<QIQ", 1, 0, 0)] if frames[1] == b"FETCH" else [b"PONG", b"queue", struct.pack("<Q", 0)]
                    router.send_multipart([frames[0]] + reply)
                time.sleep(0.01)
            started = time.time()
            for _ in range(3000):  # 3,000 bad frames over about 1.5 s
                publisher.send_multipart(garbage)
                time.sleep(0.0005)
            elapsed = time.time() - started
            self.assertIsNone(store.poll(), "the store died")
            store.send_signal(signal.SIGTERM)
            store.wait(timeout=10)
            reports = read_text(log_path).count("dropped a malformed event frame")
            # One a second, plus the first: once one line per frame.
            self.assertLessEqual(reports, int(elapsed) + 3, "%d reports in %.1f s" % (reports, elapsed))
        finally:
            if store.poll() is None:
                store.kill()
                store.wait(timeout=10)
            publisher.close()
            router.close()
            context.term()
            shutil.rmtree(directory, ignore_errors=True)

if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    print("wire-format: %d passed, %d failed, %d skipped" % (result.testsRun - failed - len(result.skipped), failed, len(result.skipped)))
    sys.exit(1 if failed else 0)
