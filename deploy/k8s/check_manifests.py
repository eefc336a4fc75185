#!/usr/bin/env python3
"""Checks rendered Clarion manifests for the hardening and routing the chart promises.

Every Clarion workload (coordinators, harvester, dispatchers) must run as
non-root with a read-only root filesystem, no privilege escalation and every
capability dropped, with liveness and readiness probes, resource requests
and limits, and a termination grace period that covers the shutdown grace.

Every Ingress and HTTPRoute must send each kind of API route to a Service
whose pods run the coordinator role that serves it (CLARION_ROLE, both
when unset): app-facing writes to `api`, the rest to `control`, the reads
of notifications to either (to `api` where the router matches methods).

Usage: check_manifests.py RENDERED.yaml [...]   (exit 1 on any violation)
       check_manifests.py --self-test             (the checker catches a bad pod)
"""
import sys

import yaml

CLARION = (
    "coordinator",
    "coordinator-api",
    "harvester",
    "dispatcher-ios",
    "dispatcher-android",
    "dispatcher-web",
)

# A route of each kind (docs/src/operate/kubernetes.md) and the role that
# serves it; "reads" are served by both roles.
ROUTES = [
    ("PUT", "/api/v1/registrations/abc", "api"),
    ("GET", "/api/v1/registrations/abc", "api"),
    ("DELETE", "/api/v1/registrations/abc/topics/breaking/uk", "api"),
    ("POST", "/api/v1/receipts", "api"),
    ("GET", "/api/v1/notifications", "reads"),
    ("GET", "/api/v1/notifications/0190d5e2", "reads"),
    ("GET", "/api/v1/notifications/0190d5e2/curve", "reads"),
    ("GET", "/api/v1/notifications/0190d5e2/held", "reads"),
    ("POST", "/api/v1/notifications", "control"),
    ("PUT", "/api/v1/notifications/0190d5e2", "control"),
    ("POST", "/api/v1/notifications/0190d5e2/cancel", "control"),
    ("POST", "/api/v1/notifications/0190d5e2/held/release", "control"),
    ("GET", "/api/v1/topics/breaking/uk", "control"),
    ("GET", "/api/v1/audit", "control"),
    ("POST", "/api/v1/live-activities", "control"),
    ("POST", "/api/v1/live-activities/0190d5e2/updates", "control"),
    ("GET", "/console/", "control"),
]


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


def coordinator_roles(deployment):
    """The roles a coordinator Deployment runs (CLARION_ROLE, both when unset)."""
    for container in deployment["spec"]["template"]["spec"].get("containers", []):
        for var in container.get("env", []):
            if var.get("name") == "CLARION_ROLE":
                return {role.strip() for role in var.get("value", "").split(",")}
    return {"api", "control"}


def service_roles(documents):
    """Service name -> the roles of the coordinator pods it selects."""
    pods = []
    for doc in documents:
        if doc and doc.get("kind") == "Deployment" and "coordinator" in doc["metadata"].get("labels", {}).get(
                "app.kubernetes.io/component", ""):
            pods.append((doc["spec"]["template"]["metadata"].get("labels", {}), coordinator_roles(doc)))
    roles = {}
    for doc in documents:
        if doc and doc.get("kind") == "Service":
            selector = doc["spec"].get("selector", {})
            roles[doc["metadata"]["name"]] = set().union(
                *[r for labels, r in pods if selector and selector.items() <= labels.items()])
    return roles


def under(prefix, path):
    """Prefix matching by path elements, as Ingress and HTTPRoute do."""
    prefix = prefix.rstrip("/")
    return prefix == "" or path == prefix or path.startswith(prefix + "/")


def ingress_backend(ingress, path):
    best = None
    for rule in ingress["spec"].get("rules", []):
        for entry in rule.get("http", {}).get("paths", []):
            exact = entry.get("pathType") == "Exact"
            if (path == entry["path"]) if exact else under(entry["path"], path):
                rank = (len(entry["path"]), exact)
                if best is None or rank > best[0]:
                    best = (rank, entry["backend"]["service"]["name"])
    return best and best[1]


def route_backend(route, method, path):
    best = None
    for rule in route["spec"].get("rules", []):
        for match in rule.get("matches", []):
            kind, value = match["path"]["type"], match["path"]["value"]
            if not ((path == value) if kind == "Exact" else under(value, path)):
                continue
            if match.get("method", method) != method:
                continue
            rank = (kind == "Exact", len(value), "method" in match)
            if best is None or rank > best[0]:
                best = (rank, rule["backendRefs"][0]["name"])
    return best and best[1]


def routing_violations(documents):
    roles = service_roles(documents)
    found = []
    for doc in documents:
        if not doc or doc.get("kind") not in ("Ingress", "HTTPRoute"):
            continue
        name = f'{doc["kind"]} {doc["metadata"]["name"]}'
        for method, path, served_by in ROUTES:
            if doc["kind"] == "Ingress":
                service = ingress_backend(doc, path)
                needed = {"api", "control"} if served_by == "reads" else {served_by}
            else:
                service = route_backend(doc, method, path)
                needed = {"api"} if served_by == "reads" else {served_by}
            running = roles.get(service, set())
            if not running & needed:
                found.append(f"{name}: {method} {path} goes to {service}, whose pods run {sorted(running)}, "
                             f"not {' or '.join(sorted(needed))}")
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

    def coordinator(component, role):
        labels = {"app.kubernetes.io/component": component}
        env = [{"name": "CLARION_ROLE", "value": role}]
        return {"kind": "Deployment", "metadata": {"name": component, "labels": labels},
                "spec": {"template": {"metadata": {"labels": labels}, "spec": {"containers": [{"env": env}]}}}}

    def service(name, component):
        return {"kind": "Service", "metadata": {"name": name},
                "spec": {"selector": {"app.kubernetes.io/component": component}}}

    # Everything to the control pods: the app-facing routes are misrouted.
    misrouted = [coordinator("coordinator", "control"), coordinator("coordinator-api", "api"),
                 service("control", "coordinator"), service("api", "coordinator-api"),
                 {"kind": "Ingress", "metadata": {"name": "all-to-control"},
                  "spec": {"rules": [{"http": {"paths": [
                      {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "control"}}}]}}]}}]
    found = routing_violations(misrouted)
    wrong = sorted({v.split(" goes to")[0].split(": ", 1)[1] for v in found})
    expected = ["DELETE /api/v1/registrations/abc/topics/breaking/uk", "GET /api/v1/registrations/abc",
                "POST /api/v1/receipts", "PUT /api/v1/registrations/abc"]
    if wrong != expected:
        print(f"self-test: a route-everything-to-control Ingress gave {wrong}, expected {expected}")
        return 1
    print(f"self-test: {len(found)} misrouted app-facing routes found in a deliberately bad Ingress, as expected")
    return 0


def main(paths):
    if paths == ["--self-test"]:
        return self_test()
    failed = 0
    for path in paths:
        with open(path) as stream:
            documents = list(yaml.safe_load_all(stream))
        deployments = sum(1 for d in documents if d and d.get("kind") == "Deployment")
        found = violations(documents) + routing_violations(documents)
        for violation in found:
            print(f"{path}: {violation}")
        failed += len(found)
        routers = sum(1 for d in documents if d and d.get("kind") in ("Ingress", "HTTPRoute"))
        print(f"{path}: {deployments} deployments and {routers} routers checked, {len(found)} violations")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
