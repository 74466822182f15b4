#!/usr/bin/env bash
# The wire format proven from C (docs/wire-format.md, "An app of your own against a live system"):
# builds Tests/c/app_client.c with gcc (or clang) against libzmq, starts a real queue, store and downloader,
# and runs the client against them: register, launch, attach, buy, download, finish, restore.
# SKSIM names the sksim binary (default .build/debug/sksim). Exits 0 when the client passed.
set -euo pipefail
cd "$(dirname "$0")/../.."
sksim="${SKSIM:-$PWD/.build/debug/sksim}"
[ -x "$sksim" ] || { echo "test_app_client: build sksim first (swift build), or set SKSIM" >&2; exit 1; }
directory="$(mktemp -d)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$directory"
}
trap cleanup EXIT

# gcc, or the clang that comes with the Swift toolchain on a machine without gcc.
compiler="${CC:-$(command -v gcc || command -v clang || command -v cc)}"
"$compiler" -std=c11 -Wall -Wextra -Werror -O1 -o "$directory/app_client" Tests/c/app_client.c -lzmq

# Two free TCP ports on the loopback interface (bound, released, then used by the queue).
read -r events requests < <(python3 -c 'import socket
ports = []
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ports.append(s)
print(*[s.getsockname()[1] for s in ports])')
cat > "$directory/app.yaml" <<EOF
name: app
# The client checks the wire format, not the store's failures: its restores must succeed.
scenario: {devices: 1, store: {restoreFailureProbability: 0}}
processes:
  - {name: queue, role: queue, events: "tcp://127.0.0.1:$events", requests: "tcp://127.0.0.1:$requests"}
  - {name: store, role: store}
  - {name: downloader, role: downloader}
  - {name: apps, role: observer, devices: "1"}
EOF
for role in queue store downloader; do
    "$sksim" "$role" --topology "$directory/app.yaml" --name "$role" --run-directory "$directory/run" 2>"$directory/$role.log" &
    pids+=("$!")
done
if ! "$directory/app_client" "tcp://127.0.0.1:$requests" "tcp://127.0.0.1:$events" c-phone c-account; then
    echo "test_app_client: FAILED; the processes' logs:" >&2
    tail -n 20 "$directory"/*.log >&2
    exit 1
fi
# The log on disk holds what the client did, intact.
for pid in "${pids[@]}"; do kill -TERM "$pid"; done
for pid in "${pids[@]}"; do wait "$pid"; done
pids=()
"$sksim" log verify "$directory/run" >/dev/null
finished=$("$sksim" log cat "$directory/run" | grep -c 'transactionFinished(c-phone#' || true)
[ "$finished" = 3 ] || { echo "test_app_client: the log holds $finished finishes of c-phone, not 3" >&2; exit 1; }
echo "c-client: passed"
