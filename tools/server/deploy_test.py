#!/usr/bin/env python3
"""Kubernetes cannot run here: this test parses deploy/kserve/*.yaml and deploy/Dockerfile and
checks them against the server itself. Every flag they pass is one dynvm-server --help lists;
the container ports are the ports the args set; the probe paths answer 200 on a running server
started with the manifest's own args (host and ports made local and free); the container runs
as a non-root user.

    DYNVM_SERVER=build/release/tools/dynvm-server /usr/bin/python3 tools/server/deploy_test.py
"""
import http.client
import os
import re
import shlex
import subprocess
import sys
import unittest

try:
    import yaml
except ImportError as e:
    print(f"skipped: {e} (install python3-yaml)")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = os.environ.get("DYNVM_SERVER", os.path.join(ROOT, "build/release/tools/dynvm-server"))


def load(name):
    with open(os.path.join(ROOT, "deploy/kserve", name)) as f:
        return yaml.safe_load(f)


def server_flags():
    out = subprocess.run([SERVER, "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"(--[a-z-]+)", out))


def flag_values(args):
    """{--flag: value} of an argument list of --flag value pairs."""
    assert len(args) % 2 == 0, args
    return {args[i]: args[i + 1] for i in range(0, len(args), 2)}


def get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path)
    r = conn.getresponse()
    r.read()
    conn.close()
    return r.status


class Manifests(unittest.TestCase):
    def setUp(self):
        self.runtime = load("cluster-serving-runtime.yaml")
        self.service = load("inference-service.yaml")
        self.container = self.runtime["spec"]["containers"][0]
        self.args = flag_values(self.container["args"])

    def test_args_are_server_flags(self):
        flags = server_flags()
        for flag in self.args:
            self.assertIn(flag, flags)
        self.assertEqual(self.args["--model-repository"], "/mnt/models")  # KServe's mount
        self.assertEqual(self.args["--host"], "0.0.0.0")

    def test_ports_match_args(self):
        http_port = int(self.args["--http-port"])
        self.assertEqual([p["containerPort"] for p in self.container["ports"]], [http_port])
        self.assertEqual([p["containerPort"] for p in self.service["spec"]["predictor"]["model"]["ports"]],
                         [http_port])
        for probe in ("readinessProbe", "livenessProbe"):
            self.assertEqual(self.container[probe]["httpGet"]["port"], http_port)
        self.assertEqual(self.runtime["spec"]["annotations"]["prometheus.kserve.io/port"], str(http_port))
        self.assertEqual(self.service["spec"]["predictor"]["model"]["runtime"], self.runtime["metadata"]["name"])
        self.assertIn("v2", self.runtime["spec"]["protocolVersions"])

    def test_non_root(self):
        sc = self.container["securityContext"]
        self.assertTrue(sc["runAsNonRoot"])
        self.assertGreater(sc["runAsUser"], 0)
        with open(os.path.join(ROOT, "deploy/Dockerfile")) as f:
            docker = f.read()
        self.assertIn(f"USER {sc['runAsUser']}", docker)

    def test_dockerfile_matches(self):
        with open(os.path.join(ROOT, "deploy/Dockerfile")) as f:
            docker = f.read()
        cmd = flag_values(yaml.safe_load(re.search(r"^CMD (\[.*\])$", docker, re.M).group(1)))
        flags = server_flags()
        for flag in cmd:
            self.assertIn(flag, flags)
        exposed = set(re.search(r"^EXPOSE (.*)$", docker, re.M).group(1).split())
        self.assertEqual(exposed, {cmd["--http-port"], cmd["--grpc-port"]})
        self.assertEqual(cmd["--http-port"], self.args["--http-port"])
        self.assertEqual(cmd["--grpc-port"], self.args["--grpc-port"])
        self.assertIn(f"VOLUME {cmd['--model-repository']}", docker)
        # The build stage copies the binary from where the build puts it (SERVER is the target's
        # file when ctest runs this test).
        built = re.search(r"cp (build/release/\S*dynvm-server) ", docker).group(1)
        self.assertTrue(os.path.abspath(SERVER).endswith(built[len("build/release"):]),
                        f"Dockerfile copies {built}; the build writes {SERVER}")

    def test_probes_and_metrics_answer(self):
        args = dict(self.args)
        args.update({"--model-repository": os.path.join(ROOT, "deploy/model-repository"),
                     "--host": "127.0.0.1", "--http-port": "0", "--grpc-port": "0",
                     "--access-log": "off"})
        proc = subprocess.Popen([SERVER] + [x for kv in args.items() for x in kv],
                                stdout=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline()
            port = int(re.search(r"http=[^ ]*:(\d+)", line).group(1))
            for probe in ("readinessProbe", "livenessProbe"):
                self.assertEqual(get(port, self.container[probe]["httpGet"]["path"]), 200, probe)
            self.assertEqual(get(port, self.runtime["spec"]["annotations"]["prometheus.kserve.io/path"]), 200)
        finally:
            proc.terminate()
            self.assertEqual(proc.wait(timeout=60), 0)
            proc.stdout.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
