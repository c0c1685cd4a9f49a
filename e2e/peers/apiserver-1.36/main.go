// Command kube-apiserver of Kubernetes 1.36, alone: the newest API server whose
// authorization differs for kube-rdma. From 1.36 (DRAResourceClaimGranularStatusAuthorization,
// beta, on by default) writing a claim's status.devices needs `resourceclaims/driver` with
// `associated-node:<verb>`, which the chart grants only there (charts/kube-rdma/templates/
// dra-rbac.yaml); device-plugin/tests/dra_network_data.rs runs the DRA driver against this server to
// show the grant is needed and enough. The rest of the cluster tier stays on e2e/peers/kube.
// Test-only: the product is Rust.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }
