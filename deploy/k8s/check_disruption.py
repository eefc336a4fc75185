#!/usr/bin/env python3
"""Checks that rendered Clarion manifests keep the pipeline up through a rolling restart.

Every Clarion stage (coordinators, harvester, dispatchers) that runs at
least two pods (its `replicas`, its HPA's `minReplicas` or its KEDA
ScaledObject's `minReplicaCount`) must have a PodDisruptionBudget
selecting its pods that keeps at least one up (`minAvailable` >= 1) and
still lets a node drain go on (`minAvailable` below the pod count), and
its Deployment's rolling update must not take every pod down at once
(`maxUnavailable`, 25% by default, below the pod count). A stage of one
pod (the dev values) is listed, not refused: it stops while it restarts.

Usage: check_disruption.py RENDERED.yaml [...]   (exit 1 on any violation)
       check_disruption.py --self-test             (the checker catches a bad budget)
"""
import math
import sys

import yaml

STAGES = ("coordinator", "harvester", "dispatcher")


def is_stage(component):
    return bool(component) and component.split("-")[0] in STAGES


def pod_count(deployment, documents):
    """The fewest pods the stage runs: its replicas, or its autoscaler's floor."""
    name = deployment["metadata"]["name"]
    for doc in documents:
        if doc.get("kind") == "HorizontalPodAutoscaler" and doc["spec"]["scaleTargetRef"]["name"] == name:
            return int(doc["spec"].get("minReplicas", 1))
        if doc.get("kind") == "ScaledObject" and doc["spec"]["scaleTargetRef"]["name"] == name:
            return int(doc["spec"].get("minReplicaCount", 0))
    return int(deployment["spec"].get("replicas", 1))


def resolve(value, pods, round_up):
    """An int-or-percent of `pods` (Kubernetes rounds maxUnavailable down)."""
    if isinstance(value, str) and value.endswith("%"):
        share = pods * int(value[:-1]) / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(value)


def selects(budget, labels):
    wanted = budget["spec"].get("selector", {}).get("matchLabels", {})
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def violations(documents):
    documents = [d for d in documents if d]
    found, single = [], []
    for deployment in documents:
        if deployment.get("kind") != "Deployment":
            continue
        labels = deployment["spec"]["template"].get("metadata", {}).get("labels", {})
        if not is_stage(labels.get("app.kubernetes.io/component")):
            continue
        name = deployment["metadata"]["name"]
        pods = pod_count(deployment, documents)
        if pods < 2:
            single.append(f"{name} ({pods} pod)")
            continue
        budgets = [d for d in documents if d.get("kind") == "PodDisruptionBudget" and selects(d, labels)]
        if not budgets:
            found.append(f"{name}: {pods} pods and no PodDisruptionBudget")
        for budget in budgets:
            spec = budget["spec"]
            if "minAvailable" in spec:
                keep = resolve(spec["minAvailable"], pods, round_up=True)
            else:
                keep = pods - resolve(spec.get("maxUnavailable", 0), pods, round_up=True)
            if keep < 1:
                found.append(f"{name}: PodDisruptionBudget {budget['metadata']['name']} lets every pod go")
            if keep >= pods:
                found.append(f"{name}: PodDisruptionBudget {budget['metadata']['name']} keeps all {pods} pods: "
                             "a node drain never finishes")
        rolling = deployment["spec"].get("strategy", {})
        if rolling.get("type") == "Recreate":
            found.append(f"{name}: the Recreate strategy stops every pod on an upgrade")
        unavailable = rolling.get("rollingUpdate", {}).get("maxUnavailable", "25%")
        if resolve(unavailable, pods, round_up=False) >= pods:
            found.append(f"{name}: a rolling update may take all {pods} pods down (maxUnavailable {unavailable})")
    return found, single


def self_test():
    labels = {"app.kubernetes.io/component": "harvester"}
    deployment = {"kind": "Deployment", "metadata": {"name": "h"},
                  "spec": {"replicas": 2, "strategy": {"rollingUpdate": {"maxUnavailable": "100%"}},
                           "template": {"metadata": {"labels": labels}}}}
    none, _ = violations([deployment])
    keeps_all = {"kind": "PodDisruptionBudget", "metadata": {"name": "b"},
                 "spec": {"minAvailable": 2, "selector": {"matchLabels": labels}}}
    stuck, _ = violations([deployment, keeps_all])
    expected = [("no PodDisruptionBudget", none), ("never finishes", stuck), ("all 2 pods down", stuck)]
    missing = [word for word, found in expected if not any(word in v for v in found)]
    if missing:
        print(f"self-test: the checker missed {missing}: {none + stuck}")
        return 1
    print(f"self-test: {len(none) + len(stuck)} violations found in deliberately bad budgets, as expected")
    return 0


def main(paths):
    if paths == ["--self-test"]:
        return self_test()
    failed = 0
    for path in paths:
        with open(path) as stream:
            documents = list(yaml.safe_load_all(stream))
        found, single = violations(documents)
        for violation in found:
            print(f"{path}: {violation}")
        failed += len(found)
        note = f"; one pod, down while it restarts: {', '.join(single)}" if single else ""
        print(f"{path}: disruption budgets checked, {len(found)} violations{note}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
