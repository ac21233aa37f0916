"""Property-based fuzzing of the API from its own OpenAPI schema with schemathesis (its examples, coverage and
fuzzing phases: valid and invalid bodies, paths and queries, boundary values) against the real server: no
request may get a 500. Bounded: a few examples per operation, about a minute on a busy 2-core machine.

The command line runs it (`schemathesis run`) because its pytest plugin does not load under pytest 9; the
coverage phase is what finds the boundary cases (an id beyond SQLite's integers was one)."""
import re
import subprocess
import sys


def test_schemathesis_finds_no_server_error(live_api, tmp_path):
    command = [sys.executable, "-m", "schemathesis.cli", "run", f"{live_api}/openapi.json",
               "--checks", "not_a_server_error", "--phases", "examples,coverage,fuzzing",
               "--max-examples", "5", "--generation-deterministic", "--workers", "1", "--no-color"]
    # cwd: schemathesis keeps a cache folder where it runs; not in the repository.
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    tested = re.search(r"Tested: (\d+)", report)
    assert tested and int(tested[1]) >= 18 and "generated" in report, report[-3000:]
