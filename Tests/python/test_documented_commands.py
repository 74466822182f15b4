"""The README's and docs' commands, run as a reader would run them, with their output checked
where it is exact (deterministic runs); and the documentation's own promises: every link resolves
inside the repository, docs/rules.md defines every rule id the code and tests name, and docs/
stays within its size budget.

Each checked example is found in its document by its command line, so a document and this test
cannot drift apart silently: change the example and this test runs the new command.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCUMENT_LINE_BUDGET = 5000
DOCUMENT_FILE_LINE_BUDGET = 900
# Documents the README names that another branch adds; empty when every branch is merged.
PENDING_DOCUMENTS = set()
# Paths the documents name that a command makes or that a reader writes, not files of the repository.
MADE_PATHS = {"Fuzz/crashes", "Fuzz/crashes/FuzzTopology-crash", "topology/mine.yaml"}


def read_text(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as file:
        return file.read()


def documented_output(document, command):
    """The output a document shows under `$ COMMAND` in a fenced block: the lines up to the next
    `$ ` prompt or the end of the block."""
    lines = read_text(document).split("\n")
    prompt = "$ " + command
    for index, line in enumerate(lines):
        if line.rstrip() == prompt:
            output = []
            for following in lines[index + 1:]:
                if following.startswith("$ ") or following.startswith("```"):
                    return output
                output.append(following)
            return output
    raise AssertionError("%s shows no `%s`" % (document, prompt))


def markdown_files():
    names = ["README.md", "CHANGELOG.md", "Benchmarks/README.md", "Examples/ObserverExploration/README.md"]
    names += ["docs/" + name for name in sorted(os.listdir(os.path.join(ROOT, "docs"))) if name.endswith(".md")]
    return [name for name in names if os.path.exists(os.path.join(ROOT, name))]


class DocumentedCommandsTest(unittest.TestCase):
    def setUp(self):
        # Absolute, since each command runs in a fresh directory (SKSIM may be relative to the caller).
        self.binary = os.path.abspath(os.environ.get("SKSIM") or os.path.join(ROOT, ".build", "debug", "sksim"))
        self.assertTrue(os.access(self.binary, os.X_OK), "build sksim first (swift build), or set SKSIM")
        self.directory = tempfile.mkdtemp(prefix="sksim-docs-")

    def tearDown(self):
        shutil.rmtree(self.directory, ignore_errors=True)

    def run_documented(self, command):
        """Runs a documented `sksim …` command line in a fresh directory, as a reader would."""
        arguments = shlex.split(command)
        self.assertEqual(arguments[0], "sksim")
        completed = subprocess.run([self.binary] + arguments[1:], cwd=self.directory, capture_output=True,
                                   text=True, timeout=300)
        # The documents show paths relative to the directory the reader runs sksim from.
        completed.stdout = completed.stdout.replace(self.directory + "/", "")
        return completed

    def test_readme_simulate_example_is_exact(self):
        """README.md's worked example: the same output, byte for byte, on any machine."""
        command = "sksim simulate --devices 10 --purchases-per-device 8 --seed 42 --out readme-demo --json"
        expected = documented_output("README.md", command)
        completed = self.run_documented(command)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        self.assertEqual(completed.stdout.split("\n")[:-1], expected)
        # "Run it again with another --out and the two logs are identical."
        again = self.run_documented(command.replace("readme-demo", "other"))
        self.assertEqual(again.returncode, 0, again.stderr)
        segments = sorted(os.listdir(os.path.join(self.directory, "readme-demo", "log", "queue")))
        self.assertTrue(any(name.endswith(".segment") for name in segments), segments)
        for name in segments:
            with open(os.path.join(self.directory, "readme-demo", "log", "queue", name), "rb") as first, \
                 open(os.path.join(self.directory, "other", "log", "queue", name), "rb") as second:
                self.assertEqual(first.read(), second.read(), name)
        # Then the log is read back.
        verify = "sksim log verify readme-demo"
        completed = self.run_documented(verify)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        self.assertEqual(completed.stdout.split("\n")[:-1], documented_output("README.md", verify))
        cat = "sksim log cat readme-demo --transaction 'device-0003#1'"
        completed = self.run_documented(cat)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        self.assertEqual(completed.stdout.split("\n")[:-1], documented_output("README.md", cat))

    def test_readme_finish_before_downloads_is_a_violation(self):
        """README.md: `--observers finishBeforeDownloads` reports an R-D3 violation and exits 1."""
        self.assertIn("`--observers finishBeforeDownloads`", read_text("README.md"))
        completed = self.run_documented(
            "sksim simulate --devices 10 --purchases-per-device 8 --seed 42 --out bad --observers finishBeforeDownloads")
        self.assertEqual(completed.returncode, 1, completed.stderr)
        self.assertIn("R-D3", completed.stdout)

    def test_replay_worked_example_is_exact(self):
        """docs/replay.md's worked example: the recording, and its unchanged replay."""
        record = "sksim simulate --devices 2 --purchases-per-device 3 --seed 42 --out out/rec"
        completed = self.run_documented(record)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        self.assertEqual(completed.stdout.split("\n")[:-1], documented_output("docs/replay.md", record))
        replay = "sksim replay out/rec"
        completed = self.run_documented(replay)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        expected = documented_output("docs/replay.md", replay)
        actual = completed.stdout.split("\n")[:-1]
        # Every line but the rate (events per second) is exact.
        rate = re.compile(r" in [0-9.]+ s: [0-9]+ events/s$")
        self.assertEqual([rate.sub("", line) for line in actual], [rate.sub("", line) for line in expected])

    def test_explore_on_every_core_example_is_exact(self):
        """docs/explore.md's `--jobs` example: the report is the same on one thread and on two."""
        one = "sksim explore --observers finishOnFirstDownload --strategy pct --seed 2 --jobs 1 --report par1"
        completed = self.run_documented(one)
        self.assertEqual(completed.returncode, 1, completed.stderr)  # a violation was found
        rate = re.compile(r" in [0-9.]+ s: [0-9]+ schedules/s$")
        self.assertEqual([rate.sub("", line) for line in completed.stdout.split("\n")[:-1]],
                         [rate.sub("", line) for line in documented_output("docs/explore.md", one)])
        two = self.run_documented(one.replace("--jobs 1", "--jobs 2").replace("par1", "par2"))
        self.assertEqual(two.returncode, 1, two.stderr)
        for directory, _, files in os.walk(os.path.join(self.directory, "par1")):
            for file in files:
                first = os.path.join(directory, file)
                with open(first, "rb") as one_file, open(first.replace("par1", "par2"), "rb") as two_file:
                    self.assertEqual(one_file.read(), two_file.read(), file)

    def test_log_cat_json_examples_are_exact(self):
        """docs/cli.md's `log cat --json` example lines come from the runs it names."""
        expected = [line for line in read_text("docs/cli.md").split("\n") if line.startswith('{"sequence":')]
        self.assertEqual(len(expected), 3)
        runs = [("sksim simulate --devices 2 --purchases-per-device 2 --seed 7 --out a", "a", expected[:2]),
                ("sksim simulate --devices 4 --purchases-per-device 3 --seed 3 --restricted-device-share 0.5 --out b",
                 "b", expected[2:])]
        for simulate, directory, lines in runs:
            completed = self.run_documented(simulate)
            self.assertEqual(completed.returncode, 0, completed.stderr)
            cat = self.run_documented("sksim log cat %s --json" % directory)
            self.assertEqual(cat.returncode, 0, cat.stderr)
            printed = cat.stdout.split("\n")
            for line in lines:
                self.assertIn(line, printed)

    def test_log_cat_help_names_the_document_with_its_schema(self):
        completed = self.run_documented("sksim log cat --help")
        self.assertEqual(completed.returncode, 0, completed.stderr)
        self.assertIn("docs/cli.md", completed.stdout)
        self.assertIn("## `log cat --json`", read_text("docs/cli.md"))


class DocumentationTest(unittest.TestCase):
    LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
    PATH = re.compile(r"(?<![\w/.-])((?:docs|topology|Examples|Tests|scripts|Benchmarks|Sources|Fuzz)/[\w./-]*\w)")

    def test_every_link_resolves_inside_the_repository(self):
        missing = []
        for name in markdown_files():
            text = read_text(name)
            self.assertNotIn("../shared", text, name)
            for target in self.LINK.findall(text):
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue
                path = os.path.normpath(os.path.join(os.path.dirname(name), target.split("#")[0]))
                if not os.path.exists(os.path.join(ROOT, path)):
                    missing.append("%s: %s" % (name, target))
        # Paths named in the text, from the repository's root or from the document's folder.
        for name in markdown_files():
            for target in set(self.PATH.findall(read_text(name))):
                if target in PENDING_DOCUMENTS | MADE_PATHS:
                    continue
                if not any(os.path.exists(os.path.join(ROOT, base, target)) for base in ("", os.path.dirname(name))):
                    missing.append("%s: %s" % (name, target))
        self.assertEqual(missing, [])

    def test_rules_define_every_rule_id_the_code_and_tests_name(self):
        rule = re.compile(r"\b[RF]-[A-Z]+[0-9]+")
        named = set()
        for top in ("Sources", "Tests", "docs"):
            for directory, _, files in os.walk(os.path.join(ROOT, top)):
                for file in files:
                    if file.endswith((".swift", ".md", ".py", ".c", ".sh")):
                        with open(os.path.join(directory, file), encoding="utf-8", errors="replace") as source:
                            named.update(rule.findall(source.read()))
        defined = set(re.findall(r"^\| ([RF]-[A-Z]+[0-9]+) \|", read_text("docs/rules.md"), re.MULTILINE))
        self.assertEqual(sorted(named - defined), [])

    def test_docs_stay_reference_sized(self):
        sizes = {name: read_text("docs/" + name).count("\n")
                 for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md")}
        self.assertLessEqual(sum(sizes.values()), DOCUMENT_LINE_BUDGET, sizes)
        self.assertEqual({name: size for name, size in sizes.items() if size > DOCUMENT_FILE_LINE_BUDGET}, {})
        self.assertLessEqual(read_text("README.md").count("\n"), 150)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    print("documented commands: %d passed, %d failed, %d skipped" % (result.testsRun - failed - len(result.skipped), failed, len(result.skipped)))
    sys.exit(1 if failed else 0)
