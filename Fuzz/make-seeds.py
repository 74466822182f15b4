#!/usr/bin/env python3
"""Writes the seed corpora under Fuzz/corpus/<target>/ from real data: the codec's golden encodings
(Tests/StoreKitModelTests/Golden/codec-v2.txt), the wire format of docs/wire-format.md, a log written by
`sksim simulate`, the .storekit fixtures, the topology files, the native catalog example of
docs/catalog-format.md and a reproduce file written by `sksim explore`.
Usage: Fuzz/make-seeds.py SIMULATED_SEGMENT REPRODUCE_JSON (see docs/fuzzing.md)."""
import glob, hashlib, os, re, shutil, struct, sys

repository = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
corpus = os.path.join(repository, "Fuzz", "corpus")
SEPARATOR = b"\xf5\xf5\xf5"  # FuzzInput.frameSeparator


def write(target, data):
    os.makedirs(os.path.join(corpus, target), exist_ok=True)
    with open(os.path.join(corpus, target, hashlib.sha1(data).hexdigest()[:16]), "wb") as file:
        file.write(data)


def frames(*parts):
    return SEPARATOR.join(parts)


def header(kind, sequence, timestamp):
    return struct.pack("<BB6xQq", 1, kind, sequence, timestamp)


golden = [line.split() for line in open(os.path.join(repository, "Tests/StoreKitModelTests/Golden/codec-v2.txt")) if line.strip()]
commands = [bytes.fromhex(hexadecimal) for kind, _, hexadecimal in golden if kind == "command"]
events = [bytes.fromhex(hexadecimal) for kind, _, hexadecimal in golden if kind == "event"]

for command in commands:
    write("FuzzCommand", command)
    write("FuzzQueueRequests", frames(b"CMD", command))
for event in events:
    write("FuzzEvent", event)
for index, event in enumerate(events[:8]):
    # Even first byte: a published message; odd: the BATCH answering the subscriber's FETCH.
    write("FuzzSubscriber", b"\x00" + frames(b"evt.d", header(1, 1, index), event))
    write("FuzzSubscriber", b"\x01" + frames(b"BATCH", struct.pack("<QIQ", 1, 2, 2), header(1, 1, 0) + event, header(1, 2, 0) + events[index + 1]))
write("FuzzSubscriber", b"\x00" + frames(b"hb", header(2, 3, 0), b"queue"))
write("FuzzSubscriber", b"\x01" + frames(b"BATCH", struct.pack("<QIQ", 1, 0, 0)))
write("FuzzQueueRequests", frames(b"FETCH", struct.pack("<QI", 1, 10)))
write("FuzzQueueRequests", frames(b"FETCH", struct.pack("<QI", 2, 0)))
write("FuzzQueueRequests", b"PING")
write("FuzzQueueRequests", frames(b"XYZ", b""))

origin = b"observer-1"
for status in range(5):
    number = struct.pack("<Q", 7) if status != 3 else b""
    message = b"" if status in (0, 2) else b"malformedBody: bad"
    write("FuzzAcknowledgement", frames(b"ACK", bytes([status]), origin, number, struct.pack("<Q", 12), message))
write("FuzzAcknowledgement", header(1, 5, 99))

if len(sys.argv) == 3:
    segment = open(sys.argv[1], "rb").read()
    write("FuzzSegment", segment)
    # A torn tail, as a crash mid-write leaves: recovery truncates it.
    write("FuzzSegment", segment[: len(segment) - 7])
    write("FuzzReproduce", open(sys.argv[2], "rb").read())
for path in sorted(glob.glob(os.path.join(repository, "Tests/StoreKitModelTests/Fixtures/*.storekit"))):
    write("FuzzStoreKit", open(path, "rb").read())
for path in sorted(glob.glob(os.path.join(repository, "topology/*.yaml"))):
    write("FuzzTopology", open(path, "rb").read())
catalog_doc = open(os.path.join(repository, "docs/catalog-format.md")).read()
for block in re.findall(r"```json\n(.*?)```", catalog_doc, re.S):
    write("FuzzCatalog", block.encode())
for path in sorted(glob.glob(os.path.join(repository, "Tests/StoreKitModelTests/Fixtures/*.storekit")))[:3]:
    write("FuzzCatalog", open(path, "rb").read())  # a .json file is sniffed: StoreKit content too

# A driver's REPORT body as LoadWire.frames encodes it (sorted keys; histograms as StageHistograms.encoded(),
# base64): clamped 0, stage 0 with buckets 100 µs ×3 and 250 µs ×1, stage 2 with 1,000 µs ×1.
import base64, json
histograms = bytes([0, 0, 2, 100, 3, 0x96, 0x01, 1, 2, 1, 0xe8, 0x07, 1])
counters = {"completed": 4, "errors": 0, "incomplete": 0, "missedStarts": 0, "rejections": 1, "started": 5}
report = {"counters": counters, "cpuNanoseconds": 120000000, "driver": "driver-1", "histograms": base64.b64encode(histograms).decode(),
          "inFlight": 1, "interval": 3, "isFinal": False, "peakMemoryBytes": 31457280}
body = json.dumps(report, sort_keys=True, separators=(",", ":")).encode()
write("FuzzLoadReport", body)
write("FuzzLoadReport", frames(body, histograms))
