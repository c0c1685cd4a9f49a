#!/usr/bin/env python3
"""Installs, upgrades or removes kube-rdma's chart on a cluster with Helm v4's
own engine (PyPI helm-python-sdk; no helm CLI exists in our registries), as a
user's `helm upgrade --install` would: CRDs from crds/ on first install,
hooks, release history in Secrets.

  e2e/helm.py upgrade  --kubeconfig FILE --namespace NS --release NAME --values FILE [--wait SECONDS]
  e2e/helm.py uninstall --kubeconfig FILE --namespace NS --release NAME
  e2e/helm.py test --kubeconfig FILE --namespace NS --release NAME [--wait SECONDS]

`upgrade` installs when the release does not exist yet. `test` is `helm test`: runs the
release's test hooks (templates/tests.yaml), prints their logs, exits 1 when one fails or
does not finish within --wait (default 300 s). Prints one line (test: and the logs).
"""

import argparse
import sys
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parent.parent / "charts" / "kube-rdma"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=["upgrade", "uninstall", "test"])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--release", required=True)
    p.add_argument("--values")
    p.add_argument("--wait", type=int, default=0, help="wait for the release's resources (seconds)")
    a = p.parse_args()

    import helm_python as helm

    cfg = helm.Config(kubeconfig_path=a.kubeconfig, namespace=a.namespace)
    try:
        if a.action == "uninstall":
            cfg.uninstall(a.release, ignore_not_found=True, wait="watcher" if a.wait else None,
                          timeout=a.wait or None)
            print(f"helm: uninstalled {a.release}")
            return 0
        if a.action == "test":
            res = cfg.test(a.release, timeout=a.wait or 300, logs=True)
            print(f"helm: test {a.release} passed\n{res.get('logs', '')}".rstrip())
            return 0
        values = yaml.safe_load(Path(a.values).read_text()) if a.values else {}
        wait = "watcher" if a.wait else None
        with helm.Chart.load(CHART) as chart:
            try:
                cfg.status(a.release)
                exists = True
            except helm.HelmNotFoundError:
                exists = False
            if exists:
                rel = cfg.upgrade(chart, a.release, values, namespace=a.namespace, wait=wait,
                                  timeout=a.wait or None)
            else:
                rel = cfg.install(chart, a.release, values, namespace=a.namespace, wait=wait,
                                  timeout=a.wait or None, create_namespace=True)
        # helm-python-sdk's release summary: name, revision, status, chart_version, ...
        print(f"helm: {a.release} revision {rel['revision']} {rel['status']} (chart {rel['chart_version']})")
        return 0
    except helm.HelmError as e:
        print(f"helm {a.action} {a.release}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
