"""The App Store's server side, verified with Apple's own library (docs/app-store-server.md).

Runs a real `sksim simulate` (subscriptions, renewals, billing retry, grace periods), then checks with
Apple's App Store Server Library (PyPI `app-store-server-library`), constructed as a team's server
constructs it with the simulator's root certificate, and with nothing of the Swift code:

- every signed transaction and renewal info `sksim log signed` prints, and every notification's payload;
- every device's app receipt from `sksim log receipt` (ReceiptUtility reads a transaction id of the log);
- the chain under `openssl verify -x509_strict`.

Run by scripts/test; pytest runs it too.
"""
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    from appstoreserverlibrary.models.Environment import Environment
    from appstoreserverlibrary.receipt_utility import ReceiptUtility
    from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier
    import jwt
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
except ImportError:  # scripts/setup installs it; say so plainly if it could not.
    SignedDataVerifier = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKSIM = os.environ.get("SKSIM", os.path.join(ROOT, ".build", "debug", "sksim"))
BUNDLE_ID = "com.example.sksim"


def sksim(*arguments):
    result = subprocess.run([SKSIM, *arguments], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise AssertionError(f"sksim {' '.join(arguments)} exited {result.returncode}: {result.stderr}")
    return result.stdout


@unittest.skipIf(SignedDataVerifier is None, "app-store-server-library is not installed (scripts/setup installs it)")
class AppStoreServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix="sksim-app-store-")
        cls.run_dir = os.path.join(cls.scratch, "run")
        sksim("simulate", "--devices", "6", "--purchases-per-device", "6", "--seed", "29", "--out", cls.run_dir,
              "--billing-issue-probability", "0.5", "--billing-grace-period", "--json")
        cls.signed = [json.loads(line) for line in sksim("log", "signed", cls.run_dir).splitlines() if line]
        with open(os.path.join(cls.run_dir, "app-store", "root.cer"), "rb") as file:
            cls.root = file.read()
        cls.verifier = SignedDataVerifier([cls.root], False, Environment.SANDBOX, BUNDLE_ID)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def transactions(self):
        return [entry for entry in self.signed if "signedTransactionInfo" in entry]

    def notifications(self):
        return [entry for entry in self.signed if "signedPayload" in entry]

    def test_every_signed_transaction_verifies_with_apples_library(self):
        transactions = self.transactions()
        self.assertGreater(len(transactions), 10)
        kinds = set()
        for entry in transactions:
            decoded = self.verifier.verify_and_decode_signed_transaction(entry["signedTransactionInfo"])
            self.assertEqual(decoded.transactionId, entry["transactionId"])
            self.assertTrue(decoded.transactionId.isdigit(), decoded.transactionId)
            self.assertTrue(decoded.originalTransactionId.isdigit())
            self.assertEqual(decoded.bundleId, BUNDLE_ID)
            self.assertEqual(decoded.rawEnvironment, "Sandbox")
            self.assertEqual(decoded.storefront, "USA")
            self.assertEqual(decoded.inAppOwnershipType.value, "PURCHASED")
            # Dates lie after 2000 (a deterministic run starts at 2026-01-01), and never after the signing.
            self.assertGreater(decoded.purchaseDate, 946684800000)
            self.assertLessEqual(decoded.originalPurchaseDate, decoded.purchaseDate)
            kinds.add(decoded.rawType)
            if decoded.rawType == "Auto-Renewable Subscription":
                self.assertIsNotNone(decoded.expiresDate)
                self.assertGreater(decoded.expiresDate, decoded.purchaseDate)
                self.assertTrue(decoded.webOrderLineItemId.isdigit())
                self.assertIn(decoded.rawTransactionReason, ("PURCHASE", "RENEWAL"))
        self.assertIn("Auto-Renewable Subscription", kinds)
        self.assertIn("Consumable", kinds)
        renewals = [entry for entry in transactions
                    if self.verifier.verify_and_decode_signed_transaction(entry["signedTransactionInfo"]).rawTransactionReason == "RENEWAL"]
        self.assertTrue(renewals, "the run renewed no subscription")

    def test_every_renewal_info_verifies_with_apples_library(self):
        infos = [entry["signedRenewalInfo"] for entry in self.transactions() if "signedRenewalInfo" in entry]
        self.assertTrue(infos)
        for signed in infos:
            decoded = self.verifier.verify_and_decode_renewal_info(signed)
            self.assertTrue(decoded.originalTransactionId.isdigit())
            self.assertIn(decoded.autoRenewStatus, (0, 1))
            self.assertEqual(decoded.rawEnvironment, "Sandbox")

    def test_every_notification_verifies_and_names_its_transaction(self):
        notifications = self.notifications()
        types = set()
        known = {entry["transactionId"] for entry in self.transactions()}
        for entry in notifications:
            decoded = self.verifier.verify_and_decode_notification(entry["signedPayload"])
            self.assertEqual(decoded.notificationUUID, entry["notificationUUID"])
            types.add(decoded.rawNotificationType)
            transaction = self.verifier.verify_and_decode_signed_transaction(decoded.data.signedTransactionInfo)
            self.assertIn(transaction.transactionId, known)
        self.assertIn("ONE_TIME_CHARGE", types)
        self.assertIn("SUBSCRIBED", types)
        self.assertIn("DID_RENEW", types)
        self.assertEqual(len({entry["notificationUUID"] for entry in notifications}), len(notifications))

    def test_a_transaction_of_another_app_is_refused(self):
        other = SignedDataVerifier([self.root], False, Environment.SANDBOX, "com.example.other")
        with self.assertRaises(Exception):
            other.verify_and_decode_signed_transaction(self.transactions()[0]["signedTransactionInfo"])

    def test_every_app_receipt_names_a_transaction_of_the_log(self):
        known = {entry["transactionId"] for entry in self.transactions()}
        utility = ReceiptUtility()
        read = 0
        for device in ("device-0001", "device-0002", "device-0003"):
            receipt = sksim("log", "receipt", self.run_dir, "--device", device).strip()
            base64.b64decode(receipt, validate=True)
            transaction_id = utility.extract_transaction_id_from_app_receipt(receipt)
            if transaction_id is not None:
                self.assertIn(transaction_id, known)
                read += 1
        self.assertGreater(read, 0)

    def test_the_chain_passes_openssl_strict_verification(self):
        if shutil.which("openssl") is None:
            self.skipTest("openssl is not installed")
        folder = os.path.join(self.run_dir, "app-store")
        pems = {}
        for name in ("root", "intermediate", "leaf"):
            pems[name] = os.path.join(self.scratch, name + ".pem")
            subprocess.run(["openssl", "x509", "-inform", "DER", "-in", os.path.join(folder, name + ".cer"), "-out", pems[name]], check=True)
        result = subprocess.run(["openssl", "verify", "-x509_strict", "-CAfile", pems["root"], "-untrusted", pems["intermediate"], pems["leaf"]],
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


class Webhook:
    """A team's notification endpoint: answers 500 to the first `failures` deliveries of each UUID, then 200."""

    def __init__(self, failures=0):
        self.failures = failures
        self.received = []  # (uuid, status answered)
        self.condition = threading.Condition()
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                signed = json.loads(body)["signedPayload"]
                uuid = jwt.decode(signed, options={"verify_signature": False})["notificationUUID"]
                with webhook.condition:
                    attempts = sum(1 for seen, _ in webhook.received if seen == uuid)
                    status = 500 if attempts < webhook.failures else 200
                    webhook.received.append((uuid, status))
                    webhook.payloads = getattr(webhook, "payloads", {})
                    webhook.payloads[uuid] = signed
                    webhook.condition.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *arguments):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def delivered(self):
        with self.condition:
            return {uuid for uuid, status in self.received if status == 200}

    def wait_for(self, uuids, seconds):
        """Waits until every UUID was answered 200, woken by each delivery; returns the ones still missing."""
        deadline = time.monotonic() + seconds
        with self.condition:
            while True:
                missing = set(uuids) - {uuid for uuid, status in self.received if status == 200}
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    return missing
                self.condition.wait(left)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def start_server(run_dir, *arguments):
    """Starts `sksim app-store-server` on a free port; its log goes to a file, so a full pipe never blocks it."""
    errors = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen([SKSIM, "app-store-server", run_dir, "--listen", "127.0.0.1:0", *arguments],
                               stdout=subprocess.PIPE, stderr=errors, text=True)
    line = process.stdout.readline()
    if not line:
        process.kill()
        process.wait()
        process.stdout.close()
        errors.seek(0)
        with errors:
            raise AssertionError("app-store-server printed nothing: " + errors.read())
    process.errors = errors
    return process, json.loads(line)["listening"].rsplit(":", 1)[1]


def stop_server(process, kill=False):
    if kill:
        process.kill()
    else:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    process.stdout.close()
    process.errors.close()


@unittest.skipIf(SignedDataVerifier is None, "app-store-server-library is not installed (scripts/setup installs it)")
class AppStoreServerHTTPTest(unittest.TestCase):
    """The App Store Server API over real HTTP, and notifications to a real webhook."""

    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix="sksim-app-store-http-")
        cls.run_dir = os.path.join(cls.scratch, "run")
        sksim("simulate", "--devices", "4", "--purchases-per-device", "5", "--seed", "31", "--out", cls.run_dir,
              "--billing-issue-probability", "0.3", "--billing-grace-period", "--json")
        cls.signed = [json.loads(line) for line in sksim("log", "signed", cls.run_dir).splitlines() if line]
        cls.webhook = Webhook(failures=2)
        cls.process, cls.port = start_server(cls.run_dir, "--notification-url", f"http://127.0.0.1:{cls.webhook.port}/hook",
                                             "--notification-retry-delays", "0.05,0.05,0.05,0.05,0.05", "--idle-timeout", "1s")
        with open(os.path.join(cls.run_dir, "app-store", "root.cer"), "rb") as file:
            cls.verifier = SignedDataVerifier([file.read()], False, Environment.SANDBOX, BUNDLE_ID)
        cls.key = ec.generate_private_key(ec.SECP256R1())

    @classmethod
    def tearDownClass(cls):
        stop_server(cls.process)
        cls.webhook.close()
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def token(self, bid=BUNDLE_ID, expires_in=600, key=None, headers=None):
        claims = {"iss": "57246542-96fe-1a63-e053-0824d011072a", "aud": "appstoreconnect-v1", "bid": bid,
                  "exp": int(time.time()) + expires_in}
        return jwt.encode(claims, key or self.key, algorithm="ES256", headers=headers or {"kid": "2X9R4HXF34", "typ": "JWT"})

    def request(self, method, path, token=None, body=None, content_type="application/json"):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body, method=method)
        if token is not None:
            request.add_header("Authorization", "Bearer " + token)
        if body is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            payload = error.read()
            try:
                return error.code, json.loads(payload) if payload else None
            except ValueError:
                return error.code, None

    def transactions(self):
        return [entry for entry in self.signed if "signedTransactionInfo" in entry]

    def test_get_transaction_info_is_signed_and_verifies(self):
        for entry in self.transactions()[:5]:
            status, body = self.request("GET", "/inApps/v1/transactions/" + entry["transactionId"], self.token())
            self.assertEqual(status, 200, body)
            decoded = self.verifier.verify_and_decode_signed_transaction(body["signedTransactionInfo"])
            self.assertEqual(decoded.transactionId, entry["transactionId"])

    def test_an_unknown_transaction_gets_apples_error_code(self):
        status, body = self.request("GET", "/inApps/v1/transactions/1234567890", self.token())
        self.assertEqual(status, 404)
        self.assertEqual(body["errorCode"], 4040010)
        status, body = self.request("GET", "/inApps/v1/transactions/not-a-number", self.token())
        self.assertEqual(status, 400)

    def test_requests_without_a_valid_token_get_401(self):
        path = "/inApps/v1/transactions/" + self.transactions()[0]["transactionId"]
        self.assertEqual(self.request("GET", path)[0], 401)
        self.assertEqual(self.request("GET", path, "not.a.token")[0], 401)
        self.assertEqual(self.request("GET", path, self.token(bid="com.example.other"))[0], 401)
        self.assertEqual(self.request("GET", path, self.token(expires_in=-60))[0], 401)
        forged = jwt.encode({"bid": BUNDLE_ID, "aud": "appstoreconnect-v1", "exp": int(time.time()) + 600}, "a-forged-secret-long-enough-for-hs256-keys", algorithm="HS256",
                            headers={"kid": "X"})
        self.assertEqual(self.request("GET", path, forged)[0], 401)

    def test_history_pages_by_revision_through_every_transaction_of_the_account(self):
        subscription = next(entry for entry in self.transactions() if "signedRenewalInfo" in entry)
        revision, seen, pages = None, [], 0
        while True:
            query = f"?revision={revision}" if revision is not None else ""
            status, body = self.request("GET", f"/inApps/v2/history/{subscription['transactionId']}{query}", self.token())
            self.assertEqual(status, 200, body)
            self.assertEqual(body["bundleId"], BUNDLE_ID)
            self.assertEqual(body["environment"], "Sandbox")
            seen += [self.verifier.verify_and_decode_signed_transaction(item).transactionId for item in body["signedTransactions"]]
            revision = body["revision"]
            pages += 1
            if not body["hasMore"]:
                break
            self.assertLess(pages, 100)
        self.assertIn(subscription["transactionId"], seen)
        self.assertEqual(len(seen), len(set(seen)))

    def test_subscription_statuses_carry_signed_renewal_info(self):
        subscription = next(entry for entry in self.transactions() if "signedRenewalInfo" in entry)
        status, body = self.request("GET", "/inApps/v1/subscriptions/" + subscription["transactionId"], self.token())
        self.assertEqual(status, 200, body)
        self.assertTrue(body["data"])
        for group in body["data"]:
            for last in group["lastTransactions"]:
                self.assertIn(last["status"], (1, 2, 3, 4, 5))
                renewal = self.verifier.verify_and_decode_renewal_info(last["signedRenewalInfo"])
                self.assertEqual(renewal.originalTransactionId, last["originalTransactionId"])
                self.verifier.verify_and_decode_signed_transaction(last["signedTransactionInfo"])

    def test_verify_receipt_answers_with_apples_status_codes(self):
        receipt = sksim("log", "receipt", self.run_dir, "--device", "device-0001").strip()
        status, body = self.request("POST", "/verifyReceipt", body=json.dumps({"receipt-data": receipt}).encode())
        self.assertEqual(status, 200)
        self.assertEqual(body["status"], 0, body)
        self.assertEqual(body["receipt"]["bundle_id"], BUNDLE_ID)
        known = {entry["transactionId"] for entry in self.transactions()}
        for entry in body["receipt"]["in_app"]:
            self.assertIn(entry["transaction_id"], known)
        self.assertEqual(self.request("POST", "/verifyReceipt", body=json.dumps({"receipt-data": "AAAA"}).encode())[1]["status"], 21003)
        self.assertEqual(self.request("POST", "/verifyReceipt", body=json.dumps({"receipt": 1}).encode())[1]["status"], 21002)
        self.assertEqual(self.request("POST", "/verifyReceipt", body=b"not json")[1]["status"], 21000)

    def test_hostile_input_gets_a_clear_4xx(self):
        huge = b"{" + b" " * (2 << 20) + b"}"
        self.assertEqual(self.request("POST", "/verifyReceipt", body=huge)[0], 413)
        self.assertEqual(self.request("GET", "/inApps/v1/nothing-here", self.token())[0], 404)
        self.assertEqual(self.request("GET", "/inApps/v1/transactions/" + "9" * 200, self.token())[0], 400)

    def test_a_client_that_stops_mid_request_is_disconnected(self):
        import socket
        with socket.create_connection(("127.0.0.1", int(self.port)), timeout=15) as connection:
            connection.sendall(b"POST /verifyReceipt HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{")
            started = time.monotonic()
            # recv blocks until the server closes the idle connection (1 s here); the socket's own timeout bounds the wait.
            data = connection.recv(65536)
            while data:
                data = connection.recv(65536)
            self.assertLess(time.monotonic() - started, 10)

    def test_api_keys_make_the_signature_count(self):
        key = ec.generate_private_key(ec.SECP256R1())
        pem = os.path.join(self.scratch, "api-key.pem")
        with open(pem, "wb") as file:
            file.write(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        process, port = start_server(self.run_dir, "--api-key", f"2X9R4HXF34={pem}")
        try:
            path = f"http://127.0.0.1:{port}/inApps/v1/transactions/" + self.transactions()[0]["transactionId"]
            def status(token):
                request = urllib.request.Request(path, headers={"Authorization": "Bearer " + token})
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        return response.status
                except urllib.error.HTTPError as error:
                    return error.code
            self.assertEqual(status(self.token(key=key)), 200)
            self.assertEqual(status(self.token()), 401)  # well-formed, but signed by a key not configured
            self.assertEqual(status(self.token(key=key, headers={"kid": "OTHERKEY01"})), 401)
        finally:
            stop_server(process)

    def test_every_notification_is_delivered_after_retries_with_the_same_uuid(self):
        expected = {entry["notificationUUID"] for entry in self.signed if "signedPayload" in entry}
        self.assertTrue(expected)
        missing = self.webhook.wait_for(expected, 60)
        self.assertFalse(missing, f"{len(missing)} notifications never delivered")
        with self.webhook.condition:
            for uuid in expected:
                answers = [status for seen, status in self.webhook.received if seen == uuid]
                self.assertEqual(answers[:3], [500, 500, 200], uuid)
            for uuid in expected:
                self.verifier.verify_and_decode_notification(self.webhook.payloads[uuid])

    def test_the_test_notification_reaches_the_webhook(self):
        status, body = self.request("POST", "/inApps/v1/notifications/test", self.token())
        self.assertEqual(status, 200, body)
        token = body["testNotificationToken"]
        self.assertFalse(self.webhook.wait_for({token}, 30))
        decoded = self.verifier.verify_and_decode_notification(self.webhook.payloads[token])
        self.assertEqual(decoded.rawNotificationType, "TEST")


@unittest.skipIf(SignedDataVerifier is None, "app-store-server-library is not installed (scripts/setup installs it)")
class NotificationDurabilityTest(unittest.TestCase):
    def test_kill_9_of_the_sender_loses_no_notification(self):
        scratch = tempfile.mkdtemp(prefix="sksim-app-store-kill-")
        try:
            run_dir = os.path.join(scratch, "run")
            sksim("simulate", "--devices", "4", "--purchases-per-device", "5", "--seed", "37", "--out", run_dir, "--json")
            expected = {json.loads(line)["notificationUUID"] for line in sksim("log", "signed", run_dir).splitlines()
                        if line and "signedPayload" in line}
            self.assertGreater(len(expected), 5)
            # The webhook accepts only after refusing each notification twice, so the first server is
            # killed with deliveries under way and notifications outstanding.
            webhook = Webhook(failures=2)
            arguments = ["--notification-url", f"http://127.0.0.1:{webhook.port}/hook", "--notification-retry-delays", "0.3,0.3,0.3,0.3,0.3"]
            first, _ = start_server(run_dir, *arguments)
            with webhook.condition:
                webhook.condition.wait_for(lambda: len(webhook.received) >= 3, timeout=30)
            stop_server(first, kill=True)
            self.assertLess(len(webhook.delivered()), len(expected), "every notification was delivered before the kill")
            second, _ = start_server(run_dir, *arguments)
            try:
                missing = webhook.wait_for(expected, 60)
                self.assertFalse(missing, f"{len(missing)} notifications lost after kill -9")
            finally:
                stop_server(second)
                webhook.close()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


@unittest.skipIf(SignedDataVerifier is None, "app-store-server-library is not installed (scripts/setup installs it)")
class RunWithAppStoreServerTest(unittest.TestCase):
    def test_sksim_run_starts_the_role_and_drains_every_notification_before_it_exits(self):
        scratch = tempfile.mkdtemp(prefix="sksim-app-store-run-")
        webhook = Webhook(failures=1)
        try:
            run_dir = os.path.join(scratch, "run")
            result = subprocess.run([SKSIM, "run", "--devices", "4", "--duration", "60s", "--out", run_dir, "--json",
                                     "--notification-url", f"http://127.0.0.1:{webhook.port}/hook"],
                                    capture_output=True, text=True, timeout=300)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            report = json.loads(result.stdout)
            self.assertEqual(report["appStoreServer"]["undelivered"], 0)
            with open(os.path.join(run_dir, "run.json")) as file:
                processes = json.load(file)["processes"]
            self.assertIn("appStoreServer", [process["role"] for process in processes])
            expected = {json.loads(line)["notificationUUID"] for line in sksim("log", "signed", run_dir).splitlines()
                        if line and "signedPayload" in line}
            self.assertTrue(expected)
            # Delivered before `sksim run` exited (the drain), each after one refusal, with the same UUID.
            self.assertEqual(webhook.delivered(), expected)
            with open(os.path.join(run_dir, "app-store", "root.cer"), "rb") as file:
                verifier = SignedDataVerifier([file.read()], False, Environment.SANDBOX, BUNDLE_ID)
            for uuid in expected:
                verifier.verify_and_decode_notification(webhook.payloads[uuid])
        finally:
            webhook.close()
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    print("app-store-server: %d passed, %d failed, %d skipped" % (result.testsRun - failed - len(result.skipped), failed, len(result.skipped)))
    sys.exit(1 if failed else 0)
