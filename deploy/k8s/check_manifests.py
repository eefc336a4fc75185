#!/usr/bin/env python3
"""Checks rendered Clarion manifests for the hardening the chart promises.

Every Clarion workload (coordinator, harvester, dispatchers) must run as
non-root with a read-only root filesystem, no privilege escalation and every
capability dropped, with liveness and readiness probes, resource requests
and limits, and a termination grace period that covers the shutdown grace.

Usage: check_manifests.py RENDERED.yaml [...]   (exit 1 on any violation)
       check_manifests.py --self-test             (the checker catches a bad pod)
"""
import sys

import yaml

CLARION = ("coordinator", "harvester", "dispatcher-ios", "dispatcher-android")


def violations(documents):
    shutdown_grace = None
    found = []
    for doc in documents:
        if doc and doc.get("kind") == "ConfigMap" and "CLARION_SHUTDOWN_GRACE_SECS" in doc.get("data", {}):
            shutdown_grace = int(doc["data"]["CLARION_SHUTDOWN_GRACE_SECS"])
    for doc in documents:
        if not doc or doc.get("kind") != "Deployment":
            continue
        component = doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        if component not in CLARION:
            continue
        name = doc["metadata"]["name"]
        pod = doc["spec"]["template"]["spec"]
        problems = []
        pod_ctx = pod.get("securityContext", {})
        if pod_ctx.get("runAsNonRoot") is not True:
            problems.append("pod does not require runAsNonRoot")
        if pod_ctx.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            problems.append("pod has no RuntimeDefault seccomp profile")
        if pod.get("automountServiceAccountToken") is not False:
            problems.append("service account token is mounted")
        grace = pod.get("terminationGracePeriodSeconds")
        if shutdown_grace is not None and (grace is None or grace <= shutdown_grace):
            problems.append(f"terminationGracePeriodSeconds {grace} does not cover the {shutdown_grace}s shutdown grace")
        for container in pod.get("containers", []):
            ctx = container.get("securityContext", {})
            where = f"container {container['name']}"
            if ctx.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{where}: root filesystem is writable")
            if ctx.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where}: privilege escalation allowed")
            if ctx.get("privileged"):
                problems.append(f"{where}: privileged")
            if "ALL" not in ctx.get("capabilities", {}).get("drop", []):
                problems.append(f"{where}: capabilities not dropped")
            for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                if container.get(probe, {}).get("httpGet", {}).get("path") != path:
                    problems.append(f"{where}: no {probe} on {path}")
            resources = container.get("resources", {})
            for kind in ("requests", "limits"):
                if not {"cpu", "memory"} <= set(resources.get(kind, {})):
                    problems.append(f"{where}: no cpu and memory {kind}")
        found += [f"{name}: {p}" for p in problems]
    return found


def self_test():
    bad = [{"kind": "Deployment",
            "metadata": {"name": "bad", "labels": {"app.kubernetes.io/component": "harvester"}},
            "spec": {"template": {"spec": {"containers": [{"name": "harvester"}]}}}}]
    found = violations(bad)
    expected = ("runAsNonRoot", "writable", "escalation", "capabilities", "livenessProbe", "requests")
    missing = [word for word in expected if not any(word in v for v in found)]
    if missing:
        print(f"self-test: the checker missed {missing}: {found}")
        return 1
    print(f"self-test: {len(found)} violations found in a deliberately bad pod, as expected")
    return 0


def main(paths):
    if paths == ["--self-test"]:
        return self_test()
    failed = 0
    for path in paths:
        with open(path) as stream:
            documents = list(yaml.safe_load_all(stream))
        deployments = sum(1 for d in documents if d and d.get("kind") == "Deployment")
        found = violations(documents)
        for violation in found:
            print(f"{path}: {violation}")
        failed += len(found)
        print(f"{path}: {deployments} deployments checked, {len(found)} violations")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
